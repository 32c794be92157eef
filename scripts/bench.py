#!/usr/bin/env python3
"""The benchmark command, ``scripts/bench.py`` (its ``--help`` says what it measures); the
package ``scripts/benchmarks/`` (not ``bench``: that name is this file's) does the work, one
module per section."""

import sys

from benchmarks.cli import main  # this file's directory, scripts/, is first on sys.path

if __name__ == "__main__":
    sys.exit(main())
