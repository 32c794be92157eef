"""Section 3, contention: 1, 8 and 32 processes started at once until all have a result, ours
against JIT ``load`` with a shared warm and a shared cold cache; failures and hangs are data."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from .load import OURS_CHILD, _child_env, jit_extensions
from .processes import child_seconds, run_at_once
from .stats import stat


def section_contention(cfg: argparse.Namespace, work: Path) -> dict:
    codes = jit_extensions(work)
    flavour = "stable" if cfg.quick else "pybind"
    warm_cache = work / "cache" / "contention-warm"
    shutil.rmtree(warm_cache, ignore_errors=True)
    child_seconds(sys.executable, codes[flavour], _child_env(warm_cache), cfg.timeout)  # warm it
    rows = []
    for n in cfg.processes:
        for mode in ("prebuild", "JIT, shared warm cache", "JIT, shared cold cache"):
            samples = []
            repeats = cfg.cold_repeats if "cold" in mode else cfg.contention_repeats
            for i in range(repeats):
                if mode == "prebuild":
                    code, env = OURS_CHILD, _child_env()
                elif "warm" in mode:
                    code, env = codes[flavour], _child_env(warm_cache)
                else:
                    cache = work / "cache" / f"contention-cold-{n}-{i}"
                    shutil.rmtree(cache, ignore_errors=True)
                    code, env = codes[flavour], _child_env(cache)
                samples.append(
                    run_at_once(
                        sys.executable, code, n, env, cfg.timeout, work / "logs" / f"{n}-{i}"
                    )
                )
            rows.append(
                {
                    "n": n,
                    "mode": mode,
                    "seconds": stat([s["seconds"] for s in samples]),
                    "ok": sum(s["ok"] for s in samples),
                    "failed": sum(s["failed"] for s in samples),
                    "hung": sum(s["hung"] for s in samples),
                    "runs": len(samples),
                    "errors": sorted({e for s in samples for e in s["errors"]}),
                }
            )
    return {"rows": rows, "flavour": flavour, "timeout": cfg.timeout}
