"""The benchmarks behind ``scripts/bench.py`` (its ``--help``, from ``cli``, says what they
measure): one module per section (``build``, ``peer``, ``load``, ``contention``, ``cpu``, ``gpu``,
``cuda``, ``cache``), each returning its section's JSON; ``stats`` (medians, spreads, timing a
function), ``processes`` (wall time and peak memory of a process tree, many processes at once),
``machine`` (what the report says about this machine), ``report`` (benchmarks.md), ``plot``
(benchmarks.png) and ``cli`` (the command: arguments, running the sections, writing the files).

Run through ``scripts/bench.py``, which puts ``scripts/`` on sys.path; the modules import each
other relatively.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
