"""Try the starter recipes (recipes/) with `prebuild farm build` on a machine that cannot clone:
each git source is replaced by a local snapshot of the pinned revision, DIR/<project> (submodules
filled in), and the other sources are kept. What docs/farm.md's "The starter recipes" table was
measured with.

Usage: python scripts/farm_trial.py --sources DIR [prebuild farm build options...]
  e.g. python scripts/farm_trial.py --sources /tmp/farm-sources --torch 2.14 --cuda 13.0 \\
       --arch sm_90 --python 3.11 --out /tmp/trial/site --work /tmp/trial/work"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def local_recipes(text: str, sources: Path) -> str:
    """A recipe file's text with each git source whose snapshot is in ``sources`` replaced."""
    out, name = [], None
    for line in text.splitlines():
        found = re.match(r'\s*name\s*=\s*"(.+)"', line)
        if found:
            name = found.group(1)
        if re.match(r'\s*source\s*=\s*"git\+', line) and name and (sources / name).is_dir():
            line = f'source = "{sources / name}"  # a snapshot of: {line.split("=", 1)[1].strip()}'
        out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--sources":
        print(__doc__, file=sys.stderr)
        return 2
    sources, rest = Path(argv[1]).resolve(), argv[2:]
    with tempfile.TemporaryDirectory(prefix="farm-trial-") as tmp:
        for recipe in sorted((ROOT / "recipes").glob("*.toml")):
            text = local_recipes(recipe.read_text(encoding="utf-8"), sources)
            (Path(tmp) / recipe.name).write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "prebuild", "farm", "build", tmp, *rest]
        return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
