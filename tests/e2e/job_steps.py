"""The steps of a background job (background.py) that runs commands for a test: each step's
command, return code, output and seconds, in WORK/steps.json as they finish, which the test
reads back (``read_steps``) and asserts on as on commands it had run itself."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

# A job's step that compiles (prebuild's kernels, a project's extension) at nice 19 gets the CPU
# the tests leave: on a slow machine it ran past 1200 s of wall time behind them (2026-12-02, the
# suite's CPU time 2.4 times the day before's). The test waiting for the job (its timeout, an
# hour) is the guard against a hang; a step's own timeout only has to be within it.
COMPILE_TIMEOUT = 3000


class Steps:
    def __init__(self, work: Path):
        self.work = work
        self.done: list[dict] = []

    def run(
        self,
        what: str,
        command: list[str],
        env: dict[str, str],
        timeout: float,
        cwd: Path | None = None,
    ) -> bool:
        """Run ``command``, record it as step ``what``; whether it succeeded."""
        started = time.monotonic()
        proc = subprocess.run(
            command, cwd=cwd or self.work, env=env, capture_output=True, text=True, timeout=timeout
        )
        return self.record(what, proc, time.monotonic() - started)

    def record(self, what: str, proc: subprocess.CompletedProcess, seconds: float) -> bool:
        """Record ``proc``, run by the job itself, as step ``what``; whether it succeeded."""
        self.done.append(
            {
                "what": what,
                "command": [str(arg) for arg in proc.args],
                "returncode": proc.returncode,
                "stdout": proc.stdout,
                "stderr": proc.stderr,
                "seconds": seconds,
            }
        )
        (self.work / "steps.json").write_text(json.dumps(self.done, indent=1))
        return proc.returncode == 0


def read_steps(work: Path) -> list[dict]:
    """The steps a job recorded, in order (none when it failed before the first)."""
    path = work / "steps.json"
    return json.loads(path.read_text()) if path.exists() else []
