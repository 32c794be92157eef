"""Version numbers as the loader needs them, without ``packaging``: the runtime is carried
inside native projects' wheels, which need only torch at run time (torch does not bring
``packaging``). The tool itself uses ``packaging``."""

from __future__ import annotations

import re

# PEP 440's public release segment, then anything (pre/post/dev, +local): enough to compare
# releases ("2.14.0a0+gitabc" -> (2, 14, 0)) and to reject what is not a version.
_VERSION = re.compile(
    r"v?(\d+(?:\.\d+)*)((?:[-_.]?[a-z]+\d*)*)(\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?", re.IGNORECASE
)


def is_version(text: str) -> bool:
    return isinstance(text, str) and _VERSION.fullmatch(text.strip()) is not None


def release(text: str) -> tuple[int, ...]:
    """``(2, 14, 1)`` for ``"2.14.1+cu130"``; ``()`` for something that is not a version."""
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def minor(text: str) -> str:
    """``"2.14"`` for ``"2.14.1+cu130"`` (``"3.0"`` for ``"3"``); ValueError for a non-version."""
    parts = release(text)
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    return f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}"
