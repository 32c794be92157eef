#!/usr/bin/env python3
"""Check prebuild on a GPU machine in one command, offline, from the source tree; write one
report (markdown and JSON) into OUT.

    scripts/gpu_check.sh --fetch [DIR]     # on a networked machine, first: what the GPU image lacks
                                           # (--fused-ssim SRC: its git URL, a clone or a directory)
    scripts/gpu_check.sh OUT               # on the GPU machine (10 minutes at most)
    scripts/gpu_check.sh --dry-run OUT     # on a CPU machine: every step that can run without a GPU

The steps, each under its own time limit (together within 10 minutes on one H100):
  build     `prebuild wheel --arch <the GPU's arch>` with this machine's nvcc and torch;
  install   a venv that sees this Python's packages (the image's torch) gets the wheel;
  cuda      `pytest -m cuda tests/cuda` in it: every op on every GPU against the CPU kernel,
            streams, torch.compile, the loader's GPU paths, 16 processes' first CUDA call;
  selftest  `prebuild selftest`;
  gsplat    gsplat 1.5.3's own tests with prebuild's ops (scripts/gsplat_suite.py), on the GPU;
  peers     upstream fused-ssim and gsplat 1.5.3 built here by `prebuild wheel` for the GPU's
            arch against this machine's torch (the classic path on a real GPU), installed
            beside prebuild in a second venv; all CPU, so it runs beside cuda, selftest and
            gsplat (started after install, waited for before bench);
  bench     `scripts/bench.py --sections cuda` there: fused_ssim and rasterization against
            those peers and plain PyTorch, shares of the GPU's measured peaks (bench/ in OUT;
            in a dry run the section's code runs on the CPU at tiny sizes).
--steps runs some of them (build,install,bench: a quick measurement between changes), and
--peer-wheels DIR installs the peers an earlier check built instead of building them again.
Each step's limit is cut to what is left of the whole check's budget (--budget, 570 s); a step
with no time left is skipped, saying so. A step that cannot run (no GPU in a dry run, a file
missing from the fetched folder) says why and counts as skipped, never as passed. The exit
status is 1 when any step failed.

What the GPU image lacks (pyelftools; gsplat's sdist, fused-ssim's source and their small
pure-Python dependencies; pytorch-msssim, a peer of the bench) is gathered by --fetch into
.gpu-check-deps/ (ignored by git; it travels with the tree: about 5 MB) and installed from
there with pip --no-index. fused-ssim is not on PyPI: --fetch archives its source from git.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

# this file's directory, scripts/, is first on sys.path: its sibling modules
from gpu_check_report import write_report
from gpu_check_steps import BUDGET, ROOT, STEPS, check

DEPS = ROOT / ".gpu-check-deps"
# Pure-Python packages the image lacks, as wheels; gsplat's sdist (its tests, and the package
# its test suite imports; BUILD_NO_CUDA=1: prebuild's ops replace its CUDA extension there).
FETCH_WHEELS = ("pyelftools", "jaxtyping", "wadler-lindig", "pytorch-msssim")
FETCH_GSPLAT = "gsplat==1.5.3"
FUSED_SSIM_GIT = "https://github.com/rahul-goel/fused-ssim"


def archive_source(source: str, dest: Path, name: str) -> Path:
    """An sdist-shaped tarball (one top directory) of a project that is not on PyPI, from a git
    URL, a git repository (bare or not: its HEAD) or a plain directory; images are left out
    (fused-ssim's are 6 MB of its 6.3). Replaces an earlier one in ``dest``."""
    for old in dest.glob(f"{name}-*.tar.gz"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        repo = Path(source)
        if not repo.exists():  # a URL: the newest commit only
            repo = Path(tmp) / "clone"
            subprocess.run(
                ["git", "clone", "--quiet", "--depth", "1", source, str(repo)], check=True
            )
        is_git = (
            subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "--git-dir"], capture_output=True
            ).returncode
            == 0
        )
        if is_git:
            rev = subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            target = dest / f"{name}-{rev}.tar.gz"
            subprocess.run(
                [
                    "git",
                    "-C",
                    str(repo),
                    "archive",
                    "--format=tar.gz",
                    f"--prefix={name}-{rev}/",
                    "-o",
                    str(target.resolve()),
                    "HEAD",
                    "--",
                    ".",
                    ":(exclude)images",
                ],
                check=True,
            )
            return target
        import tarfile

        target = dest / f"{name}-local.tar.gz"
        with tarfile.open(target, "w:gz") as tar:
            tar.add(
                repo,
                arcname=f"{name}-local",
                filter=lambda info: (
                    None if {".git", "images"} & set(Path(info.name).parts) else info
                ),
            )
        return target


def fetch(dest: Path, fused_ssim: str) -> int:
    """--fetch: download what the GPU image lacks into ``dest``; list the files and their size."""
    dest.mkdir(parents=True, exist_ok=True)
    pip = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--dest",
        str(dest),
    ]
    subprocess.run([*pip, "--no-deps", "--only-binary", ":all:", *FETCH_WHEELS], check=True)
    # gsplat's setup.py needs CUDA to say its name unless told it builds no extension.
    subprocess.run(
        [*pip, "--no-deps", "--no-binary", ":all:", "--no-build-isolation", FETCH_GSPLAT],
        check=True,
        env={**os.environ, "BUILD_NO_CUDA": "1"},
    )
    archive_source(fused_ssim, dest, "fused-ssim")
    files = sorted(p for p in dest.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    for p in files:
        print(f"  {p.name}  {p.stat().st_size / 1e6:.2f} MB")
    print(f"gpu_check: {len(files)} files, {total / 1e6:.1f} MB in {dest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "out", type=Path, nargs="?", help="where the report (report.md, report.json) goes"
    )
    parser.add_argument(
        "--fetch",
        type=Path,
        nargs="?",
        const=DEPS,
        default=None,
        metavar="DIR",
        help=f"download what the GPU image lacks into DIR (default {DEPS.relative_to(ROOT)}) and stop",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU here: run every step that can run without one",
    )
    parser.add_argument("--arch", help="the arch to build (default: GPU 0's; sm_90 in a dry run)")
    parser.add_argument(
        "--objects", type=Path, help="a build directory to reuse (prebuild wheel --build-dir)"
    )
    parser.add_argument("--deps", type=Path, default=DEPS, help="the folder --fetch filled")
    parser.add_argument(
        "--fused-ssim",
        default=FUSED_SSIM_GIT,
        metavar="SRC",
        help="with --fetch: fused-ssim's source, a git URL, a clone or a directory "
        f"(default {FUSED_SSIM_GIT})",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=BUDGET,
        help=f"seconds for the whole check; each step's limit is cut to what is left (default {BUDGET:.0f})",
    )
    parser.add_argument(
        "--steps",
        type=lambda v: {x.strip() for x in v.split(",") if x.strip()},
        help=f"only these steps, comma-separated (facts always runs): {', '.join(STEPS)}",
    )
    parser.add_argument(
        "--peer-wheels",
        type=Path,
        metavar="DIR",
        help="install the peers' wheels found in DIR (an earlier check's OUT/peers/*/) instead of "
        "building them: a quicker check between changes; the reported check builds them",
    )
    args = parser.parse_args(argv)
    if args.steps and args.steps - set(STEPS):
        parser.error(f"unknown steps: {', '.join(sorted(args.steps - set(STEPS)))}")
    if args.fetch is not None:
        return fetch(args.fetch, args.fused_ssim)
    if args.out is None:
        parser.error("give OUT, the directory for the report (or --fetch)")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    steps = check(
        out,
        args.dry_run,
        args.arch,
        args.objects,
        args.deps.resolve(),
        args.budget,
        args.steps,
        args.peer_wheels.resolve() if args.peer_wheels else None,
    )
    command = shlex.join(["scripts/gpu_check.sh", *(argv if argv is not None else sys.argv[1:])])
    write_report(out, steps, args.dry_run, command)
    width = max(len(s.name) for s in steps)
    for s in steps:
        print(f"  {s.name:<{width}}  {s.status:<7}  {s.seconds:5.0f} s  {s.summary}")
    print(f"gpu_check: report in {out / 'report.md'}")
    return 1 if any(s.status == "failed" for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
