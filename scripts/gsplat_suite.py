#!/usr/bin/env python3
"""Run gsplat 1.5.3's own tests on the CPU with prebuild's ops substituted for gsplat's.

gsplat's ``tests/test_basic.py`` (projection, intersection, rasterization, spherical
harmonics, covariances) and ``tests/test_rasterization.py`` (``rasterization()``) run with
every assertion and tolerance as written; only their device (``cuda:0`` -> ``cpu``) and their
"No CUDA device" skip markers change (checked: the rewrite fails if the files differ from
what it expects). scripts/gsplat_suite_plugin.py does the substitution and gives gsplat's
plain-PyTorch oracle its CPU pieces.

The tests come from a gsplat source tree (``--gsplat-src``: a git checkout or an unpacked
sdist), or else from gsplat's sdist of the installed version, downloaded with pip. Their scene
is gsplat's ``assets/test_garden.npz`` when the tree has it (git checkouts do, the sdist does
not), else a synthetic one with the same fields (``--scene synthetic``, smaller: faster).

    .venv/bin/python scripts/gsplat_suite.py                       # CPU kernels
    .venv/bin/python scripts/gsplat_suite.py --backend simt -k "test_isect or test_sh"
    python scripts/gsplat_suite.py --backend cuda --gsplat-src gsplat-1.5.3   # on a GPU
    .venv/bin/python scripts/gsplat_suite.py --gsplat-src ~/gsplat --require 0.9

Prints each test function's passed/total and every failure; exits 1 when the pass rate is
below ``--require``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEST_FILES = ("test_basic.py", "test_rasterization.py")
# The only lines rewritten, and how many times each must occur per file.
CUDA_DEVICE = 'device = torch.device("cuda:0")'
CUDA_SKIP = '@pytest.mark.skipif(not torch.cuda.is_available(), reason="No CUDA device")\n'


def download_sources(work: Path) -> Path:
    """gsplat's sdist of the installed version, unpacked into ``work``; returns its root."""
    wanted = version("gsplat")
    env = {**os.environ, "BUILD_NO_CUDA": "1"}  # its setup.py would otherwise need CUDA
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--no-build-isolation",
        "--dest",
        str(work),
        f"gsplat=={wanted}",
    ]
    print(f"gsplat_suite: downloading gsplat {wanted}'s sdist (its tests) with pip", flush=True)
    subprocess.run(cmd, check=True, env=env)
    (sdist,) = work.glob("gsplat-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    return work / f"gsplat-{wanted}"


def rewrite(source: str, name: str, backend: str = "cpu") -> str:
    """The test file for ``backend``: on the CPU (cpu, simt) its device line and CUDA skip
    markers changed, nothing else; on the GPU (cuda) as written."""
    if source.count(CUDA_DEVICE) != 1:
        raise SystemExit(
            f"gsplat_suite: {name} does not set its device as expected; is it gsplat 1.5.3's?"
        )
    if CUDA_SKIP not in source:
        raise SystemExit(f"gsplat_suite: {name} has no CUDA skip marker; is it gsplat 1.5.3's?")
    if backend == "cuda":
        return source
    return source.replace(CUDA_DEVICE, 'device = torch.device("cpu")').replace(CUDA_SKIP, "")


def synthetic_garden(path: Path, points: int = 4000, width: int = 160, height: int = 104) -> None:
    """A scene with test_garden.npz's fields: points in the [-2, 2]^3 crop gsplat's loader
    keeps, three cameras looking at the origin from about 4 units away."""
    import numpy as np

    rng = np.random.default_rng(0)
    means = rng.uniform(-2.0, 2.0, size=(points, 3)).astype(np.float32)
    colors = rng.integers(0, 256, size=(points, 3), dtype=np.uint8)
    viewmats = []
    for angle in (0.0, 0.5, -0.7):
        eye = np.array([4.5 * np.sin(angle), 0.4, -4.5 * np.cos(angle)])
        forward = -eye / np.linalg.norm(eye)
        right = np.cross(forward, [0.0, -1.0, 0.0])
        right /= np.linalg.norm(right)
        down = np.cross(forward, right)
        R = np.stack([right, down, forward])
        V = np.eye(4)
        V[:3, :3], V[:3, 3] = R, -R @ eye
        viewmats.append(V)
    focal = 0.9 * width
    K = np.array([[focal, 0.0, width / 2], [0.0, focal, height / 2], [0.0, 0.0, 1.0]])
    np.savez(
        path,
        means3d=means,
        colors=colors,
        viewmats=np.array(viewmats, np.float32),
        Ks=np.array([K] * 3, np.float32),
        height=np.int64(height),
        width=np.int64(width),
    )


def prepare(src: Path, work: Path, scene: str, backend: str = "cpu") -> Path:
    """gsplat's tests, rewritten for ``backend``, in work/tests with the scene in work/assets."""
    tests = work / "tests"
    tests.mkdir(parents=True)
    for name in TEST_FILES:
        (tests / name).write_text(rewrite((src / "tests" / name).read_text(), name, backend))
    (work / "assets").mkdir()
    garden = src / "assets" / "test_garden.npz"
    if scene == "garden":
        if not garden.is_file():
            raise SystemExit(
                f"gsplat_suite: --scene garden needs {garden} (a gsplat git checkout has it)"
            )
        (work / "assets" / "test_garden.npz").write_bytes(garden.read_bytes())
    else:
        synthetic_garden(work / "assets" / "test_garden.npz")
    return tests


def print_pass_counts(outcomes: dict[str, str]) -> tuple[int, int]:
    """Print the passed/total per test function, the tests not passed and the total; return
    (passed, total)."""
    by_function: dict[str, list[str]] = defaultdict(list)
    for nodeid, outcome in outcomes.items():
        by_function[nodeid.split("[")[0]].append(outcome)
    passed = total = 0
    print("\ngsplat 1.5.3's tests with prebuild's ops:")
    for function, results in sorted(by_function.items()):
        ok = sum(r == "passed" for r in results)
        passed, total = passed + ok, total + len(results)
        print(f"  {ok:4d}/{len(results):<4d} {function}")
    failures = {k: v for k, v in outcomes.items() if v != "passed"}
    for nodeid, outcome in sorted(failures.items()):
        print(f"  NOT PASSED {nodeid}: {outcome}")
    print(f"  {passed}/{total} passed ({100.0 * passed / max(total, 1):.1f}%)")
    return passed, total


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--gsplat-src",
        type=Path,
        help="gsplat source tree with tests/ (default: pip download the sdist)",
    )
    parser.add_argument(
        "--backend",
        choices=("cpu", "simt", "cuda"),
        default="cpu",
        help="prebuild's CPU kernels, the CUDA kernels' bodies on the CPU (slow), or the CUDA "
        "kernels on the GPU (the tests as written, on cuda:0)",
    )
    parser.add_argument(
        "--scene",
        choices=("garden", "synthetic"),
        help="default: garden when the source tree has assets/test_garden.npz",
    )
    parser.add_argument("-k", dest="keyword", help="pytest -k expression to select tests")
    parser.add_argument("--require", type=float, default=0.0, help="fail below this pass fraction")
    parser.add_argument("--json", type=Path, help="write the outcomes here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gsplat-suite-") as tmp:
        work = Path(tmp)
        src = args.gsplat_src or download_sources(work / "download")
        if not (src / "tests" / "test_basic.py").is_file():
            raise SystemExit(f"gsplat_suite: {src} has no tests/test_basic.py")
        scene = args.scene or (
            "garden" if (src / "assets" / "test_garden.npz").is_file() else "synthetic"
        )
        tests = prepare(src, work / "run", scene, args.backend)
        report = work / "report.json"
        env = {
            **os.environ,
            "PREBUILD_GSPLAT_BACKEND": args.backend,
            "PREBUILD_GSPLAT_REPORT": str(report),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
        }
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "gsplat_suite_plugin",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tests),
            *(["-k", args.keyword] if args.keyword else []),
            str(tests),
        ]
        print(f"gsplat_suite: {args.backend} backend, {scene} scene", flush=True)
        subprocess.run(cmd, cwd=tests, env=env)
        if not report.is_file():
            raise SystemExit("gsplat_suite: pytest wrote no report (see its output above)")
        outcomes = json.loads(report.read_text())["outcomes"]
    passed, total = print_pass_counts(outcomes)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "backend": args.backend,
                    "scene": scene,
                    "passed": passed,
                    "total": total,
                    "outcomes": outcomes,
                },
                indent=1,
            )
        )
    return 0 if total and passed >= args.require * total else 1


if __name__ == "__main__":
    sys.exit(main())
