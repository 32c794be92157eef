"""The farm's daily job: add to a recipe set's [farm] table the torch minor releases PyPI has
and it lacks, and say which (the GitHub Actions step output ``added``, e.g. ``2.15``; empty
when none). The workflow then opens a pull request with the change.

Usage: PYTHONPATH=src python scripts/ci/farm_new_torch.py recipes/farm.toml"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from prebuild.tool.farm.recipes import parse_recipes
from prebuild.tool.farm.releases import new_minors, released_torch, with_torch


def main(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    defaults = parse_recipes(text, path).defaults
    if defaults is None:
        raise SystemExit(f"{path} has no [farm] table")
    added = new_minors(defaults.torch, released_torch())
    if added:
        path.write_text(with_torch(text, added), encoding="utf-8")
    return ",".join(added)


if __name__ == "__main__":
    added = main(Path(sys.argv[1]))
    print(f"torch releases added: {added or 'none'}")
    with open(os.environ.get("GITHUB_OUTPUT", os.devnull), "a", encoding="utf-8") as f:
        f.write(f"added={added}\n")
