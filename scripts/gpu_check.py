#!/usr/bin/env python3
"""Check prebuild on a GPU machine in one command, offline, from the source tree; write one
report (markdown and JSON) into OUT.

    scripts/gpu_check.sh --fetch [DIR]     # on a networked machine, first: what the GPU image lacks
    scripts/gpu_check.sh OUT               # on the GPU machine (10 minutes at most)
    scripts/gpu_check.sh --dry-run OUT     # on a CPU machine: every step that can run without a GPU

The steps, each under its own time limit (together within 10 minutes on one H100):
  build     `prebuild wheel --arch <the GPU's arch>` with this machine's nvcc and torch;
  install   a venv that sees this Python's packages (the image's torch) gets the wheel;
  cuda      `pytest -m cuda tests/cuda` in it: every op on every GPU against the CPU kernel,
            streams, torch.compile, the loader's GPU paths, 16 processes' first CUDA call;
  selftest  `prebuild selftest`;
  gsplat    gsplat 1.5.3's own tests with prebuild's ops (scripts/gsplat_suite.py), on the GPU.
A step that cannot run (no GPU in a dry run, a file missing from the fetched folder) says why
and counts as skipped, never as passed. The exit status is 1 when any step failed.

What the GPU image lacks (pyelftools; gsplat's sdist and its small pure-Python dependencies)
is gathered by --fetch into .gpu-check-deps/ (ignored by git; it travels with the tree: a few
MB) and installed from there with pip --no-index.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEPS = ROOT / ".gpu-check-deps"
# Pure-Python packages the image lacks, as wheels; gsplat's sdist (its tests, and the package
# its test suite imports; BUILD_NO_CUDA=1: prebuild's ops replace its CUDA extension there).
FETCH_WHEELS = ("pyelftools", "jaxtyping", "wadler-lindig")
FETCH_GSPLAT = "gsplat==1.5.3"
# Seconds per step: the whole check stays within one 10-minute command on an H100.
LIMITS = {"facts": 60, "build": 240, "install": 60, "cuda": 150, "selftest": 45, "gsplat": 90}


@dataclass
class Step:
    name: str
    limit: float
    status: str = "skipped"  # passed, failed, skipped
    seconds: float = 0.0
    summary: str = ""
    command: str = ""
    output: str = ""  # the tail of what it printed
    data: dict = field(default_factory=dict)


def run(step: Step, cmd: list[str], **kwargs) -> subprocess.CompletedProcess | None:
    """Run one command of a step under the step's time left; record it. None if it timed out."""
    step.command = shlex.join(cmd)
    left = max(1.0, step.limit - step.seconds)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left, **kwargs)
    except subprocess.TimeoutExpired as exc:
        step.seconds += time.monotonic() - start
        step.status, step.summary = "failed", f"over its time limit ({step.limit:.0f} s)"
        out = exc.stdout or b""
        step.output = (out.decode(errors="replace") if isinstance(out, bytes) else out)[-6000:]
        return None
    step.seconds += time.monotonic() - start
    step.output = (proc.stdout + proc.stderr)[-6000:]
    return proc


def gpu_facts(python: str) -> dict:
    """torch's view of this machine, asked in a child (this script itself never touches CUDA)."""
    script = ("import json, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
              "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'gpus': "
              "[{'name': torch.cuda.get_device_name(i), 'capability': list(torch.cuda.get_device_capability(i))} "
              "for i in range(n)]}))")  # fmt: skip
    proc = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=LIMITS["facts"])
    if proc.returncode != 0:
        raise SystemExit(f"gpu_check: {python} cannot import torch:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_venv(path: Path, base_python: str) -> Path:
    """A venv that sees ``base_python``'s packages (the image's torch): --system-site-packages,
    plus a .pth naming base_python's own site-packages when that Python is itself a venv. No
    pip of its own: ensurepip's would bring an old setuptools that shadows the one torch needs
    (and pip cannot fetch another offline); base_python's pip installs into it all the same."""
    venv.create(path, with_pip=False, system_site_packages=True)
    python = path / "bin" / "python"
    base_site = subprocess.run([base_python, "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                               capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    Path(site, "gpu-check-base.pth").write_text("\n".join(base_site) + "\n")
    return python


def fetch(dest: Path) -> int:
    """--fetch: download what the GPU image lacks into ``dest``; list the files and their size."""
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", str(dest)]
    subprocess.run([*pip, "--no-deps", "--only-binary", ":all:", *FETCH_WHEELS], check=True)
    # gsplat's setup.py needs CUDA to say its name unless told it builds no extension.
    subprocess.run([*pip, "--no-deps", "--no-binary", ":all:", "--no-build-isolation", FETCH_GSPLAT], check=True,
                   env={**os.environ, "BUILD_NO_CUDA": "1"})  # fmt: skip
    files = sorted(p for p in dest.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    for p in files:
        print(f"  {p.name}  {p.stat().st_size / 1e6:.2f} MB")
    print(f"gpu_check: {len(files)} files, {total / 1e6:.1f} MB in {dest}")
    return 0


def check(out: Path, dry_run: bool, arch: str | None, objects: Path | None, deps: Path) -> list[Step]:
    python = sys.executable
    steps = {name: Step(name, limit) for name, limit in LIMITS.items()}
    facts = steps["facts"]
    start = time.monotonic()
    facts.data = gpu_facts(python)
    facts.seconds = time.monotonic() - start
    gpus = facts.data["gpus"]
    facts.status = "passed"
    facts.summary = (f"torch {facts.data['torch']} (CUDA {facts.data['cuda']}), Python {platform.python_version()}; "
                     + (", ".join(f"{g['name']} ({g['capability'][0]}.{g['capability'][1]})" for g in gpus)
                        or "no GPU visible"))  # fmt: skip
    if not gpus and not dry_run:
        raise SystemExit("gpu_check: no GPU visible; on a CPU machine run it with --dry-run")
    if arch is None:
        arch = f"sm_{gpus[0]['capability'][0]}{gpus[0]['capability'][1]}" if gpus else "sm_90"

    # build: the wheel for this GPU's arch, with the builder of this tree.
    build = steps["build"]
    dist = out / "dist"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "160"}
    cmd = [python, "-m", "prebuild", "wheel", "--arch", arch, "--out", str(dist), "--build-dir", str(objects or out / "objects")]
    proc = run(build, cmd, env=env, cwd=ROOT)
    wheels = sorted(dist.glob("prebuild-*.whl"))
    if proc is not None:
        build.status = "passed" if proc.returncode == 0 and len(wheels) == 1 else "failed"
        build.summary = wheels[0].name if build.status == "passed" else "no wheel (see the output)"

    # install: into a venv that sees this Python's torch.
    install = steps["install"]
    venv_python = None
    if build.status == "passed":
        start = time.monotonic()
        venv_python = make_venv(out / "venv", python)
        install.seconds = time.monotonic() - start
        have_elftools = subprocess.run([str(venv_python), "-c", "import elftools"], capture_output=True).returncode == 0
        extra = [] if have_elftools else ["pyelftools"]
        cmd = [str(venv_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
               "--find-links", str(deps), str(wheels[0]), *extra]  # fmt: skip
        proc = run(install, cmd)
        if proc is not None:
            install.status = "passed" if proc.returncode == 0 else "failed"
            install.summary = (f"{wheels[0].name} into {out / 'venv'}" if proc.returncode == 0 else
                               "pip could not install it (offline: is pyelftools in the fetched folder? run --fetch)")
    else:
        install.summary = "no wheel to install"

    # cuda: the CUDA tests (all skipped, each with its reason, when no GPU is visible).
    cuda = steps["cuda"]
    if venv_python is not None and install.status == "passed":
        report = out / "cuda-tests.xml"
        proc = run(cuda, [str(venv_python), "-m", "pytest", "-m", "cuda", "tests/cuda", "-q", "-p", "no:cacheprovider",
                          f"--junitxml={report}"], cwd=ROOT)  # fmt: skip
        if proc is not None:
            cuda.data = junit_counts(report)
            ran = cuda.data.get("tests", 0) - cuda.data.get("skipped", 0)
            failed = cuda.data.get("failures", 0) + cuda.data.get("errors", 0)
            cuda.status = "failed" if proc.returncode not in (0, 5) or failed else ("passed" if ran else "skipped")
            cuda.summary = (f"{cuda.data.get('tests', 0)} tests: {ran - failed} passed, {failed} failed, "
                            f"{cuda.data.get('skipped', 0)} skipped")  # fmt: skip
    else:
        cuda.summary = "prebuild is not installed (see install)"

    # selftest: each installed kernel package's ops on each GPU against its CPU kernel.
    selftest = steps["selftest"]
    prebuild_cli = out / "venv" / "bin" / "prebuild"
    if install.status == "passed":
        proc = run(selftest, [str(prebuild_cli), "selftest", "--json"], cwd=out)
        if proc is not None:
            try:
                selftest.data = json.loads(proc.stdout)
            except json.JSONDecodeError:
                selftest.data = {}
            selftest.status = "passed" if proc.returncode == 0 else "failed"
            selftest.summary = f"exit {proc.returncode}" + ("" if gpus else " (no GPU: the CPU kernels only)")
    else:
        selftest.summary = "prebuild is not installed (see install)"

    # gsplat: its own tests with prebuild's ops, on the GPU.
    gsplat = steps["gsplat"]
    sdists = sorted(deps.glob("gsplat-1.5.3.tar.gz"))
    if not gpus:
        gsplat.summary = "needs a GPU (the CPU run is in the test suite: tests/scripts/test_gsplat_suite.py)"
    elif not sdists:
        gsplat.summary = f"gsplat's sdist is not in {deps}: run scripts/gpu_check.sh --fetch"
    elif install.status == "passed":
        with tempfile.TemporaryDirectory(prefix="gsplat-src-") as tmp:
            subprocess.run(["tar", "-xzf", str(sdists[0]), "-C", tmp], check=True)
            proc = run(gsplat, [str(venv_python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                                "--no-build-isolation", "--find-links", str(deps), str(sdists[0]), "jaxtyping",
                                "wadler-lindig"], env={**os.environ, "BUILD_NO_CUDA": "1"})  # fmt: skip
            if proc is not None and proc.returncode == 0:
                report = out / "gsplat-suite.json"
                proc = run(gsplat, [str(venv_python), str(ROOT / "scripts" / "gsplat_suite.py"), "--backend", "cuda",
                                    "--gsplat-src", str(Path(tmp) / "gsplat-1.5.3"), "--scene", "synthetic",
                                    "--json", str(report)], cwd=ROOT)  # fmt: skip
                if proc is not None:
                    gsplat.status = "passed" if proc.returncode == 0 else "failed"
                    gsplat.summary = (proc.stdout.strip().splitlines() or ["no output"])[-1].strip()
            elif proc is not None:
                gsplat.status, gsplat.summary = "failed", "could not install gsplat's sdist from the fetched folder"
    return list(steps.values())


def junit_counts(path: Path) -> dict:
    import xml.etree.ElementTree as ET

    if not path.is_file():
        return {}
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")} if suite is not None else {}


def write_report(out: Path, steps: list[Step], dry_run: bool, command: str) -> None:
    total = sum(s.seconds for s in steps)
    facts = steps[0]
    lines = [f"# GPU check{' (dry run: no GPU)' if dry_run else ''}", "",
             f"`{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {total:.0f} s in all. "
             f"{facts.summary}.", "",
             "| step | status | seconds (limit) | result |", "|---|---|---|---|"]  # fmt: skip
    for s in steps:
        lines.append(f"| {s.name} | {s.status} | {s.seconds:.0f} ({s.limit:.0f}) | {s.summary} |")
    for s in steps:
        if s.command or s.output:
            lines += ["", f"## {s.name}", "", f"`{s.command}`" if s.command else "", "", "```",
                      s.output.strip()[-3000:], "```"]  # fmt: skip
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "report.json").write_text(json.dumps({"dry_run": dry_run, "command": command, "seconds": total,
                                                 "steps": [asdict(s) for s in steps]}, indent=1) + "\n")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("out", type=Path, nargs="?", help="where the report (report.md, report.json) goes")
    parser.add_argument("--fetch", type=Path, nargs="?", const=DEPS, default=None, metavar="DIR",
                        help=f"download what the GPU image lacks into DIR (default {DEPS.relative_to(ROOT)}) and stop")
    parser.add_argument("--dry-run", action="store_true", help="no GPU here: run every step that can run without one")
    parser.add_argument("--arch", help="the arch to build (default: GPU 0's; sm_90 in a dry run)")
    parser.add_argument("--objects", type=Path, help="a build directory to reuse (prebuild wheel --build-dir)")
    parser.add_argument("--deps", type=Path, default=DEPS, help="the folder --fetch filled")
    args = parser.parse_args(argv)
    if args.fetch is not None:
        return fetch(args.fetch)
    if args.out is None:
        parser.error("give OUT, the directory for the report (or --fetch)")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    steps = check(out, args.dry_run, args.arch, args.objects, args.deps.resolve())
    command = shlex.join(["scripts/gpu_check.sh", *(argv if argv is not None else sys.argv[1:])])
    write_report(out, steps, args.dry_run, command)
    width = max(len(s.name) for s in steps)
    for s in steps:
        print(f"  {s.name:<{width}}  {s.status:<7}  {s.seconds:5.0f} s  {s.summary}")
    print(f"gpu_check: report in {out / 'report.md'}")
    return 1 if any(s.status == "failed" for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
