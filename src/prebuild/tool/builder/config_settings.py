"""``prebuild wheel -C KEY=VALUE``: settings for a classic project's own PEP 517 backend, as pip's
``--config-settings`` and pypa/build's ``-C`` pass them. Some setup.py files read options from
their command line rather than the environment: apex documents ``--config-settings
"--build-option=--cpp_ext"``, MinkowskiEngine asks for ``--blas=openblas``. Pure."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

# What a backend is handed: one value per key, or a list where the key was given again (as pip
# and pypa/build do: setuptools reads "--build-option" as a list of arguments).
ConfigSettings = dict[str, str | list[str]]


def parse_config_settings(given: Iterable[str]) -> ConfigSettings:
    """Each ``KEY=VALUE`` (or ``KEY``, for an empty value) in the order given; ValueError naming
    one with no key."""
    settings: ConfigSettings = {}
    for item in given:
        key, _, value = item.partition("=")
        if not key:
            raise ValueError(
                f"-C {item!r} names no setting: give KEY=VALUE, as pip's --config-settings takes "
                "(-C--build-option=--cpp_ext hands a classic setup.py --cpp_ext)"
            )
        if key not in settings:
            settings[key] = value
        elif isinstance(old := settings[key], list):
            old.append(value)
        else:
            settings[key] = [old, value]
    return settings


def as_options(settings: ConfigSettings) -> list[str]:
    """The settings as the ``-C`` options that give them (in a command said back to the user)."""
    options = []
    for key, value in settings.items():
        for one in value if isinstance(value, list) else [value]:
            options.append(f"-C{key}={one}" if one else f"-C{key}")
    return options


# A setup.py telling its user to run it with an option: "python setup.py install --blas=openblas"
# (MinkowskiEngine 0.5.4); the command may be any that takes options after it.
_SETUP_OPTION = re.compile(
    r"setup\.py\s+(?:install|develop|build_ext|build|bdist_wheel)\s+(?P<option>--[A-Za-z][\w-]*(?:=[^\s\"'`]+)?)"
)


def setup_option_hint(output: str, command: str) -> str:
    """Where a failed build's output tells the user to give its setup.py an option, how to give
    it through ``command`` (the prebuild command of the build); "" otherwise."""
    found = _SETUP_OPTION.search(output)
    if found is None:
        return ""
    option = found["option"]
    given = shlex.quote(f"-C--global-option={option}")
    return (
        f"Its setup.py asks for {option} on its command line: give it through prebuild, which "
        f"hands -C settings to its backend as pip's --config-settings does: {command} {given} "
        "(setuptools puts a --global-option on every setup.py command of the build, a "
        "--build-option on bdist_wheel's only)."
    )
