"""Files a classic project's build needs that its source does not have, recognised after the
build failed, so that the error says what is missing and where to get it: an sdist that leaves
out the sources its setup.py compiles (fast-hadamard-transform 1.1.0: its makers ship wheels),
and a git checkout whose submodules were not fetched (a clone without ``--recursive``).
Pure functions over the log's text and the project's files as given.
"""

from __future__ import annotations

import re
from email.parser import HeaderParser
from pathlib import Path

# ninja's words for an input that is not there, and the compilers' for a source or header.
_MISSING = re.compile(
    r"ninja: error: '(?P<ninja>[^']+)', needed by '[^']+', missing and no known rule to make it"
    r"|error: (?P<source>[^\s:]+\.(?:c|cc|cpp|cxx|cu)): No such file or directory"
    r"|fatal error: (?P<header>[^\s:]+): No such file or directory"
)
_SOURCE_HOSTS = ("github.com", "gitlab.com", "bitbucket.org", "codeberg.org")


def missing_files(log: str) -> list[str]:
    """Pure: the files a failed build's log says are missing, in order, once each."""
    found = [next(g for g in m.groups() if g) for m in _MISSING.finditer(log)]
    return list(dict.fromkeys(found))


def submodule_paths(gitmodules: str) -> list[str]:
    """Pure: the paths of the submodules ``.gitmodules`` lists, in order."""
    return list(dict.fromkeys(re.findall(r"^\s*path\s*=\s*(.+?)\s*$", gitmodules, re.M)))


def empty_submodules(gitmodules: str, present: set[str]) -> list[str]:
    """Pure: the submodule paths ``.gitmodules`` lists that are not among ``present`` (the
    paths that exist in the project's source with something in them)."""
    return [p for p in submodule_paths(gitmodules) if p not in present]


def source_url(pkg_info: str) -> str | None:
    """Pure: where the project's source lives, from an sdist's PKG-INFO (a Project-URL or the
    Home-page on a known code host); None if it names none."""
    headers = HeaderParser().parsestr(pkg_info)
    urls = [u.split(",", 1)[-1].strip() for u in headers.get_all("Project-URL") or ()]
    urls.append((headers.get("Home-page") or "").strip())
    return next((u for u in urls if any(h in u for h in _SOURCE_HOSTS)), None)


def source_gaps_advice(
    log: str,
    source: Path,
    gitmodules: str,
    present_submodules: set[str],
    pkg_info: str,
    command: str,
) -> str:
    """Pure but for the paths: what to tell a user whose build failed on files its source does
    not have; "" where the log names none. ``source``: the project's copy (the log's paths are
    under it); ``gitmodules``/``pkg_info``: its files' text ("" if absent); ``command``: the
    ``prebuild wheel`` command without the project."""
    missing = missing_files(log)
    if not missing:
        return ""
    shown = [_relative(name, source) for name in missing[:3]]
    empty = empty_submodules(gitmodules, present_submodules)
    if empty:
        return (
            f"The build is missing {', '.join(shown)}: the project's git submodules "
            f"({', '.join(empty)}) are not in its source. In the checkout: git submodule update "
            "--init --recursive, then build again (a git+https:// URL gets them: pip clones "
            "them too)."
        )
    compiled = [name for name in shown if name.endswith((".c", ".cc", ".cpp", ".cxx", ".cu"))]
    if not pkg_info or not compiled:
        return ""
    url = source_url(pkg_info)
    version = HeaderParser().parsestr(pkg_info).get("Version", "")
    where = (
        f": {command} git+{url}@<its tag or commit of {version}>"
        if url
        else " (its sdist names no repository)"
    )
    return (
        f"The sdist lacks sources its setup.py compiles ({', '.join(compiled)}): it is "
        "incomplete, as some projects that ship prebuilt wheels publish it. Build it from its "
        f"repository instead{where}."
    )


def _relative(name: str, source: Path) -> str:
    path = Path(name)
    try:
        return str(path.relative_to(source)) if path.is_absolute() else name
    except ValueError:
        return name
