"""Statistics of repeated runs: median, min-max and spread with the noisy flag, timing a
function, and how the report writes times, sizes and shares of a peak."""

from __future__ import annotations

import statistics
import time

NOISY = 0.20  # spread (max - min) above this share of the median flags a row


def stat(samples: list[float]) -> dict:
    """Median, min, max and spread ((max - min) / median) of repeated samples."""
    xs = [float(x) for x in samples]
    median = statistics.median(xs)
    spread = (max(xs) - min(xs)) / median if median > 0 else 0.0
    return {
        "samples": xs,
        "median": median,
        "min": min(xs),
        "max": max(xs),
        "spread": spread,
        "noisy": len(xs) > 1 and spread > NOISY,
    }


def fmt_time(seconds: float) -> str:
    if seconds >= 100:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def fmt_stat(s: dict | None, fmt=fmt_time) -> str:
    """``1.23 s (1.20-1.31, n=3)``, with ``**noisy**`` when the spread is over 20 %."""
    if not s:
        return "-"
    if len(s["samples"]) == 1:
        return f"{fmt(s['median'])} (n=1)"
    text = f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])}, n={len(s['samples'])})"
    return text + (f" **noisy {s['spread']:.0%}**" if s["noisy"] else "")


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def time_fn(fn, repeats: int, warmup: int = 1, sync=None) -> dict:
    """Wall time of ``fn()`` over repeated runs. ``sync`` waits for a device's queued work
    (``torch.cuda.synchronize``): a CUDA call returns before its kernels have run."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return stat(samples)


def fmt_share(share: float, digits: int = 0) -> str:
    """A share of a measured peak. Over 100 % cannot be (the work model or a peak measured too
    low is wrong): flagged, never printed as a number."""
    if share > 1:
        return "**impossible** (over 100 %: a peak measured too low?)"
    return f"{share:.{digits}%}"
