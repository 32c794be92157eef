"""What a failed classic build's log says: the compiler's errors worth showing (ninja's failed
steps, the first error of a build without ninja), the line of setup.py a traceback left, and
each run's part of a log that several runs append to."""

from __future__ import annotations

import re
from pathlib import Path

from build import BuildBackendException, BuildException

from prebuild.tool.builder import build_site

# setuptools runs setup.py with exec(): its frames in a traceback are "<string>"'s.
_SETUP_FRAME = re.compile(
    r'^\s*File "(?:<string>|[^"]*\bsetup\.py)", line (\d+), in <module>$', re.M
)


def setup_py_line(log: str, setup_text: str) -> tuple[int, str] | None:
    """Pure: the line of setup.py where the last traceback in ``log`` left it, with its code
    (SparseConvNet's ``assert torch.matmul(torch.ones(...).cuda(), ...)``); None if none."""
    frames = _SETUP_FRAME.findall(log)
    lines = setup_text.splitlines()
    if not frames or not 0 < int(frames[-1]) <= len(lines):
        return None
    number = int(frames[-1])
    code = lines[number - 1].strip()
    return number, code if len(code) <= 100 else code[:97] + "..."


# A Python traceback's heading and frames (indented), up to the exception's line.
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):\n(?:[ \t].*\n)*", re.M)


# A compiler's error line (g++ ``file:line:col: error:``, nvcc ``file(line): error:``), and
# the lines before one that place it.
_COMPILER_ERROR = re.compile(
    r"^\S.*?(?::\d+(?::\d+)?: (?:fatal )?error|\(\d+\): (?:catastrophic |internal )?error)\b",
    re.M,
)


_ERROR_CONTEXT = re.compile(r"In file included from |\s+from \S+:\d+|\S+: In \w+")


def backend_failure(exc: BuildBackendException | BuildException) -> str:
    """Pure: what a build that failed before writing to its log says: ``build``'s words and,
    for a backend that did not import, the last line of its traceback (the module missing)."""
    inner = getattr(exc, "exception", None)
    trace = str(getattr(inner, "traceback", "") or "").strip().splitlines()
    return "\n".join(filter(None, [str(exc), trace[-1] if trace else ""]))


def compiler_errors(log: str, limit: int = 8000) -> str:
    """What to show of a failed build's log: ninja's failed steps (the compiler's own words)
    when there are any, else ninja's own error (an input missing), else, in a build without
    ninja, the compiler's first error on (where the cause is: torch-points-kernels 0.7.0's first
    is a missing #include, its last a cascade), else the log's end. Of ninja's failed steps,
    the first one's ``FAILED:`` line and command, then the compiler's first error on: the
    warnings before it (nvcc's on torch's own headers: megablocks 0.10.0's filled the 8000
    characters shown) are left to the full log; each further failed step in a line, with its
    first error (neural_renderer's .cpp and .cu fail each in its own way). Each Python
    traceback is cut to its exception
    (the frames are setuptools' own: the full log keeps them). A build the header check
    stopped before compiling (build_site.py): the check's own lines."""
    if build_site.STOPPED in log:
        return "\n".join(line for line in log.splitlines() if line.startswith("prebuild: "))
    start = log.find("FAILED:")
    if start < 0:
        ninja = [line for line in log.splitlines() if line.startswith("ninja: error:")]
        if ninja:
            return "\n".join(ninja)[:limit]
        log = _TRACEBACK.sub("", log)
        return _from_first_error(log, limit) or log[-limit:].strip()
    end = log.find("ninja: build stopped", start)
    steps = log[start : end if end >= 0 else None]
    failed, _, rest = steps.partition("\n")
    command, _, rest = rest.partition("\n")
    # its own output ends where ninja starts the next step's ("[2/3] nvcc ...": VMamba's
    # ptxas -v reports of the sources still compiling filled what was shown), or another failed
    rest = rest[: next_step.start()] if (next_step := _NINJA_STEP.search(rest)) else rest
    errors = _from_first_error(rest, limit) or rest.strip()
    also = _further_failures(steps)[: limit // 2]
    shown = f"{failed}\n{command}\n{errors}"[: limit - len(also) - 2].rstrip()
    return f"{shown}\n\n{also}".rstrip() if also else shown


def failed_command(log: str) -> str:
    """Pure: the command of ninja's first failed step in ``log`` (the line after ``FAILED:``,
    as the project's build wrote it into build.ninja); "" where no step failed."""
    start = log.find("FAILED:")
    return log[start:].split("\n", 2)[1].strip() if start >= 0 and "\n" in log[start:] else ""


def _further_failures(steps: str, most: int = 5) -> str:
    """Pure: a line for each failed ninja step after the first in ``steps`` (what ninja printed
    from the first ``FAILED:`` on): its object and its first compiler error; "" for none."""
    lines = []
    for step in steps.split("\nFAILED:")[1:]:
        target, _, output = step.partition("\n")
        first = _COMPILER_ERROR.search(output)
        error = output[first.start() :].partition("\n")[0] if first else ""
        lines.append(f"  {target.strip()}" + (f": {error}" if error else ""))
    if not lines:
        return ""
    more = f"\n  ... and {len(lines) - most} more" if len(lines) > most else ""
    return "Also failed (the full log has each):\n" + "\n".join(lines[:most]) + more


_NINJA_STEP = re.compile(r"^(?:\[\d+/\d+\] |FAILED:)", re.M)  # a step's output ends there


def _from_first_error(log: str, limit: int) -> str:
    """Pure: ``log`` from its first compiler error on, with the lines before it that place it
    (its function, its includes); "" where it has none."""
    first = _COMPILER_ERROR.search(log)
    if first is None:
        return ""
    lines = log[: first.start()].splitlines()
    context = 0
    while context < min(len(lines), 12) and _ERROR_CONTEXT.match(lines[-1 - context]):
        context += 1
    head = "\n".join(lines[len(lines) - context :]) + "\n" if context else ""
    return (head + log[first.start() :])[:limit].strip()


def log_size(log: Path) -> int:
    """Where the next run's output will start in ``log`` (it is appended to)."""
    return log.stat().st_size if log.exists() else 0


def log_since(log: Path, offset: int) -> str:
    """What was added to ``log`` from ``offset`` on (log_size's): one run's output, where a
    wheel built again appends a second."""
    if not log.exists():
        return ""
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", errors="replace")
