#!/usr/bin/env python3
"""The benchmark command, ``scripts/bench.py`` (its ``--help`` says what it measures); the
package ``scripts/bench/`` does the work, one module per section."""

import sys

from bench.cli import main  # this file's directory, scripts/, is first on sys.path: the package

if __name__ == "__main__":
    sys.exit(main())
