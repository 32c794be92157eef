"""The report of scripts/gpu_check.py: report.md (a table of the steps, the bench's CUDA
section, each step's command and output) and report.json (every step's record)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from gpu_check_steps import Step


def bench_section(path: Path) -> list[str]:
    """The CUDA section of the bench step's report (its tables), for the check's own report."""
    if not path.is_file():
        return []
    text = path.read_text()
    start = text.find("## 6. CUDA kernels")
    if start < 0:
        return []
    end = text.find("\n## ", start + 1)
    body = text[start : end if end >= 0 else len(text)].strip().splitlines()[1:]
    return ["", "## bench: the CUDA kernels against their peers", *body]


def write_report(out: Path, steps: list[Step], dry_run: bool, command: str) -> None:
    total = sum(s.seconds for s in steps)
    facts = steps[0]
    lines = [
        f"# GPU check{' (dry run: no GPU)' if dry_run else ''}",
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {total:.0f} s in all. "
        f"{facts.summary}.",
        "",
        "| step | status | seconds (limit) | result |",
        "|---|---|---|---|",
    ]
    for s in steps:
        lines.append(f"| {s.name} | {s.status} | {s.seconds:.0f} ({s.limit:.0f}) | {s.summary} |")
    lines += bench_section(out / "bench" / "benchmarks.md")
    for s in steps:
        if s.command or s.output:
            lines += [
                "",
                f"## {s.name}",
                "",
                f"`{s.command}`" if s.command else "",
                "",
                "```",
                s.output.strip()[-3000:],
                "```",
            ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "report.json").write_text(
        json.dumps(
            {
                "dry_run": dry_run,
                "command": command,
                "seconds": total,
                "steps": [asdict(s) for s in steps],
            },
            indent=1,
        )
        + "\n"
    )
