"""New torch releases for a recipe set's ``[farm]`` table: the daily CI job
(``scripts/ci/farm_new_torch.py``) finds the minor releases PyPI has and the table lacks, and
rewrites the table's ``torch`` line to add them. Pure but for ``released_torch``."""

from __future__ import annotations

import json
import re
import urllib.request

from packaging.version import InvalidVersion, Version

PYPI_TORCH = "https://pypi.org/pypi/torch/json"
_TORCH_LINE = re.compile(r"^(?P<head>\s*torch\s*=\s*)\[(?P<items>[^\]]*)\]", re.M)


def new_minors(known: tuple[str, ...], released: list[str]) -> list[str]:
    """Pure: the minor releases (``2.15``) among ``released`` (PyPI's version strings) that
    are newer than every one in ``known``; final releases only (a minor counts once its .0 is
    out), oldest first."""
    newest = max((Version(k) for k in known), default=None)
    found = set()
    for text in released:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or version.local:
            continue
        minor = Version(f"{version.major}.{version.minor}")
        if newest is None or minor > newest:
            found.add(minor)
    return [str(v) for v in sorted(found)]


def with_torch(text: str, minors: list[str]) -> str:
    """Pure: a recipe file's text whose ``[farm]`` ``torch = [...]`` line also lists
    ``minors`` (ValueError where it has no such line)."""
    match = _TORCH_LINE.search(text)
    if match is None:
        raise ValueError("the file has no `torch = [...]` line (a [farm] table's) to add to")
    items = [i.strip() for i in match["items"].split(",") if i.strip()]
    items += [json.dumps(m) for m in minors if json.dumps(m) not in items]
    return text[: match.start()] + f"{match['head']}[{', '.join(items)}]" + text[match.end() :]


def released_torch(url: str = PYPI_TORCH) -> list[str]:
    """The torch versions PyPI lists."""
    with urllib.request.urlopen(url, timeout=60) as response:  # the public PyPI JSON API
        return list(json.load(response)["releases"])
