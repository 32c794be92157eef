"""The steps of scripts/gpu_check.py (its ``--help`` says what each does) and what runs them:
a step's commands under its time limit, each limit cut to what is left of the whole check's
budget. The report is written by gpu_check_report.py, the command is gpu_check.py."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Seconds per step, each cut to what is left of the budget: one 10-minute command on an H100.
LIMITS = {
    "facts": 60,
    "build": 240,
    "install": 60,
    "cuda": 180,
    "selftest": 45,
    "gsplat": 90,
    "peers": 240,
    "bench": 120,
}
BUDGET = 570.0
MIN_STEP = 10.0  # a step with less time than this left is skipped, not started


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
    """Run one command of a step under the step's time left; record it (a step's commands and
    their output follow one another). None if it timed out."""
    step.command = "; ".join(filter(None, [step.command, shlex.join(cmd)]))
    left = max(1.0, step.limit - step.seconds)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left, **kwargs)
    except subprocess.TimeoutExpired as exc:
        step.seconds += time.monotonic() - start
        step.status, step.summary = "failed", f"over its time limit ({step.limit:.0f} s)"
        out = exc.stdout or b""
        step.output = (
            step.output + (out.decode(errors="replace") if isinstance(out, bytes) else out)
        )[-6000:]
        return None
    step.seconds += time.monotonic() - start
    step.output = (step.output + proc.stdout + proc.stderr)[-6000:]
    return proc


def run_together(step: Step, cmds: dict[str, list[str]], **kwargs) -> dict[str, int] | None:
    """Run a step's independent commands at once (the GPU machine has 16 cores; one build uses
    few of them for long), under the step's time left; each one's exit status, or None when any
    ran out of time."""
    from concurrent.futures import ThreadPoolExecutor

    step.command = "; ".join(
        filter(None, [step.command, *(shlex.join(cmd) + " &" for cmd in cmds.values())])
    )
    left = max(1.0, step.limit - step.seconds)
    start = time.monotonic()

    def one(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=left, **kwargs)
        except subprocess.TimeoutExpired:
            return None

    with ThreadPoolExecutor(len(cmds)) as pool:
        procs = dict(zip(cmds, pool.map(one, cmds.values())))
    step.seconds += time.monotonic() - start
    for name, proc in procs.items():
        text = "over the time limit" if proc is None else (proc.stdout + proc.stderr)[-3000:]
        step.output = (step.output + f"\n--- {name}\n" + text)[-6000:]
    if any(proc is None for proc in procs.values()):
        step.status, step.summary = "failed", f"over its time limit ({step.limit:.0f} s)"
        return None
    return {name: proc.returncode for name, proc in procs.items()}


def budgeted(c: Check, step: Step) -> bool:
    """Cut the step's limit to what is left of the whole check's budget; False (the step skipped,
    saying so) when too little is left to start it."""
    left = c.deadline - time.monotonic()
    if left < MIN_STEP:
        step.summary = f"no time left in the check's budget ({left:.0f} s left)"
        return False
    step.limit = min(step.limit, left)
    return True


def gpu_facts(python: str) -> dict:
    """torch's view of this machine, asked in a child (this script itself never touches CUDA)."""
    script = (
        "import json, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'gpus': "
        "[{'name': torch.cuda.get_device_name(i), 'capability': list(torch.cuda.get_device_capability(i))} "
        "for i in range(n)]}))"
    )
    proc = subprocess.run(
        [python, "-c", script], capture_output=True, text=True, timeout=LIMITS["facts"]
    )
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
    base_site = subprocess.run(
        [base_python, "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    site = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "gpu-check-base.pth").write_text("\n".join(base_site) + "\n")
    return python


@dataclass
class Check:
    """What the steps share: where things go, what this machine is, what earlier steps made."""

    out: Path
    dry_run: bool
    deps: Path
    objects: Path | None
    deadline: float
    requested_arch: str | None = None  # --arch
    python: str = sys.executable
    gpus: list = field(default_factory=list)
    arch: str = "sm_90"  # --arch, else GPU 0's, else (a dry run) sm_90
    wheel: Path | None = None  # prebuild's, from the build step
    venv_python: Path | None = None  # the install step's venv
    peers_python: Path | None = None  # the peers step's venv
    peer_wheels: Path | None = None  # --peer-wheels: the peers' wheels from an earlier check

    build_site: Path | None = None  # what the build needs and this Python lacks (pyelftools)

    @property
    def env(self) -> dict:
        """prebuild from this tree, for the build steps."""
        path = [str(ROOT / "src"), *([str(self.build_site)] if self.build_site else [])]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "COLUMNS": "160"}


def step_facts(c: Check, step: Step) -> None:
    start = time.monotonic()
    step.data = gpu_facts(c.python)
    step.seconds = time.monotonic() - start
    c.gpus = step.data["gpus"]
    step.status = "passed"
    step.summary = (
        f"torch {step.data['torch']} (CUDA {step.data['cuda']}), Python {platform.python_version()}; "
        + (
            ", ".join(f"{g['name']} ({g['capability'][0]}.{g['capability'][1]})" for g in c.gpus)
            or "no GPU visible"
        )
    )
    if not c.gpus and not c.dry_run:
        raise SystemExit("gpu_check: no GPU visible; on a CPU machine run it with --dry-run")
    if c.requested_arch:
        c.arch = c.requested_arch
    elif c.gpus:
        c.arch = "sm_{}{}".format(*c.gpus[0]["capability"])


def step_build(c: Check, step: Step) -> None:
    """The wheel for this GPU's arch, with the builder of this tree."""
    dist = c.out / "dist"
    has = subprocess.run([c.python, "-c", "import elftools"], capture_output=True).returncode == 0
    if not has:  # the image's Python lacks pyelftools (seen 2026-11-27): from the fetched folder
        c.build_site = c.out / "build-site"
        proc = pip_install(c, step, Path(c.python), "--target", str(c.build_site), "pyelftools")
        if proc is None or proc.returncode != 0:
            step.status, step.summary = "failed", "pyelftools is not installed, nor in --deps"
            return
    cmd = [
        c.python,
        "-m",
        "prebuild",
        "wheel",
        "--arch",
        c.arch,
        "--out",
        str(dist),
        "--build-dir",
        str(c.objects or c.out / "objects"),
    ]
    proc = run(step, cmd, env=c.env, cwd=ROOT)
    wheels = sorted(dist.glob("prebuild-*.whl"))
    if proc is not None:
        step.status = "passed" if proc.returncode == 0 and len(wheels) == 1 else "failed"
        step.summary = wheels[0].name if step.status == "passed" else "no wheel (see the output)"
        c.wheel = wheels[0] if step.status == "passed" else None


def pip_install(c: Check, step: Step, python: Path, *what: str, env: dict | None = None):
    """pip install, offline, from the fetched folder (the image's packages are seen as installed)."""
    cmd = [
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-index",
        "--find-links",
        str(c.deps),
        *what,
    ]
    return run(step, cmd, env=env)


def step_install(c: Check, step: Step) -> None:
    """Into a venv that sees this Python's torch."""
    if c.wheel is None:
        step.summary = "no wheel to install"
        return
    start = time.monotonic()
    python = make_venv(c.out / "venv", c.python)
    step.seconds = time.monotonic() - start
    have_elftools = (
        subprocess.run([str(python), "-c", "import elftools"], capture_output=True).returncode == 0
    )
    proc = pip_install(c, step, python, str(c.wheel), *([] if have_elftools else ["pyelftools"]))
    if proc is not None:
        step.status = "passed" if proc.returncode == 0 else "failed"
        step.summary = (
            f"{c.wheel.name} into {c.out / 'venv'}"
            if proc.returncode == 0
            else "pip could not install it (offline: is pyelftools in the fetched folder? run --fetch)"
        )
        c.venv_python = python if proc.returncode == 0 else None


def step_cuda(c: Check, step: Step) -> None:
    """The CUDA tests (all skipped, each with its reason, when no GPU is visible)."""
    if c.venv_python is None:
        step.summary = "prebuild is not installed (see install)"
        return
    report = c.out / "cuda-tests.xml"
    proc = run(
        step,
        [
            str(c.venv_python),
            "-m",
            "pytest",
            "-m",
            "cuda",
            "tests/cuda",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
        ],
        cwd=ROOT,
    )
    if proc is not None:
        step.data = junit_counts(report)
        ran = step.data.get("tests", 0) - step.data.get("skipped", 0)
        failed = step.data.get("failures", 0) + step.data.get("errors", 0)
        step.status = (
            "failed"
            if proc.returncode not in (0, 5) or failed
            else ("passed" if ran else "skipped")
        )
        step.summary = (
            f"{step.data.get('tests', 0)} tests: {ran - failed} passed, {failed} failed, "
            f"{step.data.get('skipped', 0)} skipped"
        )


def step_selftest(c: Check, step: Step) -> None:
    """Each installed kernel package's ops on each GPU against its CPU kernel."""
    if c.venv_python is None:
        step.summary = "prebuild is not installed (see install)"
        return
    proc = run(step, [str(c.venv_python.parent / "prebuild"), "selftest", "--json"], cwd=c.out)
    if proc is not None:
        try:
            step.data = json.loads(proc.stdout)
        except json.JSONDecodeError:
            step.data = {}
        step.status = "passed" if proc.returncode == 0 else "failed"
        step.summary = f"exit {proc.returncode}" + (
            "" if c.gpus else " (no GPU: the CPU kernels only)"
        )


def gsplat_sdist(c: Check) -> Path | None:
    return next(iter(sorted(c.deps.glob("gsplat-1.5.3.tar.gz"))), None)


def step_gsplat(c: Check, step: Step) -> None:
    """gsplat's own tests with prebuild's ops, on the GPU."""
    sdist = gsplat_sdist(c)
    if not c.gpus:
        step.summary = (
            "needs a GPU (the CPU run is in the test suite: tests/scripts/test_gsplat_suite.py)"
        )
    elif sdist is None:
        step.summary = f"gsplat's sdist is not in {c.deps}: run scripts/gpu_check.sh --fetch"
    elif c.venv_python is None:
        step.summary = "prebuild is not installed (see install)"
    else:
        with tempfile.TemporaryDirectory(prefix="gsplat-src-") as tmp:
            subprocess.run(["tar", "-xzf", str(sdist), "-C", tmp], check=True)
            proc = pip_install(
                c,
                step,
                c.venv_python,
                "--no-deps",
                "--no-build-isolation",
                str(sdist),
                "jaxtyping",
                "wadler-lindig",
                env={**os.environ, "BUILD_NO_CUDA": "1"},
            )
            if proc is not None and proc.returncode == 0:
                report = c.out / "gsplat-suite.json"
                proc = run(
                    step,
                    [
                        str(c.venv_python),
                        str(ROOT / "scripts" / "gsplat_suite.py"),
                        "--backend",
                        "cuda",
                        "--gsplat-src",
                        str(Path(tmp) / "gsplat-1.5.3"),
                        "--scene",
                        "synthetic",
                        "--json",
                        str(report),
                    ],
                    cwd=ROOT,
                )
                if proc is not None:
                    step.status = "passed" if proc.returncode == 0 else "failed"
                    step.summary = (proc.stdout.strip().splitlines() or ["no output"])[-1].strip()
            elif proc is not None:
                step.status, step.summary = (
                    "failed",
                    "could not install gsplat's sdist from the fetched folder",
                )


def step_peers(c: Check, step: Step) -> None:
    """Upstream fused-ssim and gsplat, built by `prebuild wheel` for this GPU against this
    machine's torch, installed with prebuild's wheel into a second venv."""
    sources = {
        "fused-ssim": next(iter(sorted(c.deps.glob("fused-ssim-*.tar.gz"))), None),
        "gsplat": gsplat_sdist(c),
    }
    if not c.gpus:
        step.summary = (
            "needs a GPU machine's CUDA torch (the classic builds are tested in the suite: "
            "tests/e2e/test_classic_build.py, test_gsplat_build.py)"
        )
        return
    if c.wheel is None:
        step.summary = "no prebuild wheel (see build)"
        return
    missing = [name for name, path in sources.items() if path is None]
    if missing:
        step.status = "failed"
        step.summary = (
            f"not in {c.deps}: {', '.join(missing)}'s source: run scripts/gpu_check.sh --fetch"
        )
        return
    dist = c.out / "peers"
    if c.peer_wheels is not None:
        install_peers(c, step, sorted(c.peer_wheels.glob("*.whl")), [], "installed the built")
        return
    codes = run_together(
        step,
        {
            name: [
                c.python,
                "-m",
                "prebuild",
                "wheel",
                "--arch",
                c.arch,
                "--out",
                str(dist / name),
                str(source),
            ]
            for name, source in sources.items()
        },
        env=c.env,
        cwd=c.out,
    )
    if codes is None:
        return
    built, failed = [], []
    for name, code in codes.items():
        wheels = sorted((dist / name).glob("*.whl"))
        (built if code == 0 and wheels else failed).append(name)
        step.data[name] = [w.name for w in wheels]
    install_peers(
        c, step, sorted(dist.glob("*/*.whl")), failed, f"built {', '.join(built) or 'nothing'} for"
    )


def install_peers(c: Check, step: Step, wheels: list[Path], failed: list[str], done: str) -> None:
    """prebuild's wheel and the peers' into a second venv (with pytorch-msssim, a peer of the
    bench, if fetched)."""
    python = make_venv(c.out / "venv-peers", c.python)
    msssim = ["pytorch-msssim"] if any(c.deps.glob("pytorch_msssim-*.whl")) else []
    proc = pip_install(c, step, python, str(c.wheel), *map(str, wheels), *msssim)
    if proc is None:
        return
    if proc.returncode == 0:
        c.peers_python = python
    step.status = "passed" if proc.returncode == 0 and wheels and not failed else "failed"
    names = ", ".join(w.name.split("-")[0] for w in wheels) or "nothing"
    step.summary = (
        (f"{done} {c.arch}" if c.peer_wheels is None else f"{done} {names} ({c.peer_wheels})")
        + (f"; {', '.join(failed)} failed" if failed else "")
        + ("" if proc.returncode == 0 else "; pip could not install the wheels")
    )


def step_bench(c: Check, step: Step) -> None:
    """bench.py's cuda section with the peers beside prebuild (without them, if they did not
    build: the section names what it did not time); in a dry run its code on the CPU."""
    python = c.peers_python or c.venv_python
    if python is None:
        step.summary = "prebuild is not installed (see install)"
        return
    out = c.out / "bench"
    cmd = [
        str(python),
        str(ROOT / "scripts" / "bench.py"),
        "--sections",
        "cuda",
        "--out",
        str(out),
        "--work",
        str(c.out / "bench-work"),
    ] + (["--quick", "--device", "cpu"] if c.dry_run else [])
    proc = run(step, cmd, cwd=ROOT)
    if proc is None:
        return
    results = out / "benchmarks.json"
    if proc.returncode != 0 or not results.is_file():
        step.status, step.summary = "failed", f"bench.py exit {proc.returncode}"
        return
    section = json.loads(results.read_text())["cuda"]
    step.data = {k: section.get(k) for k in ("name", "peaks", "absent")}
    step.data["ssim"] = [
        {
            "size": r["size"],
            "batch": r["batch"],
            "ratios": r["ratios"],
            "bandwidth_share": r["bandwidth_share"],
        }
        for r in section.get("ssim", [])
    ]
    step.data["raster"] = [
        {"gaussians": r["gaussians"], "ratios": r["ratios"], "peak_share": r["peak_share"]}
        for r in section.get("raster", [])
    ]
    step.status = "passed"
    step.summary = bench_summary(step.data) + (
        " (dry run: the section's code on the CPU, tiny sizes)" if c.dry_run else ""
    )


def bench_summary(data: dict) -> str:
    """One line: the largest SSIM and rasterization rows against each peer."""
    parts = []
    for key, label in (("ssim", "SSIM {size} B={batch}"), ("raster", "raster {gaussians:,}")):
        if data.get(key):
            row = data[key][-1]
            versus = ", ".join(f"{v:.2f}x vs {k}" for k, v in row["ratios"].items()) or "no peer"
            parts.append(f"{label.format(**row)}: {versus}")
    return "; ".join(parts) or "no rows"


STEPS = {
    "facts": step_facts,
    "build": step_build,
    "install": step_install,
    "cuda": step_cuda,
    "selftest": step_selftest,
    "gsplat": step_gsplat,
    "peers": step_peers,
    "bench": step_bench,
}


def check(
    out: Path,
    dry_run: bool,
    arch: str | None,
    objects: Path | None,
    deps: Path,
    budget: float = BUDGET,
    only: set[str] | None = None,
    peer_wheels: Path | None = None,
) -> list[Step]:
    """Every step (or those in ``only``; facts always), in order, except that the peers' build,
    all CPU, runs beside the GPU steps that follow install (cuda, selftest, gsplat) and is
    waited for before bench: it took 100 s of a 255 s check."""
    import threading

    c = Check(
        out=out,
        dry_run=dry_run,
        deps=deps,
        objects=objects,
        deadline=time.monotonic() + budget,
        requested_arch=arch,
        peer_wheels=peer_wheels,
    )
    steps = {name: Step(name, LIMITS[name]) for name in STEPS}
    asked = set(STEPS) if only is None else only | {"facts"}
    background: threading.Thread | None = None
    for name, step in steps.items():
        if name not in asked:
            step.summary = "not asked for (--steps)"
            continue
        if name == "peers" and background is not None:
            continue  # started after install
        if name == "bench" and background is not None:
            background.join()
        if budgeted(c, step):
            STEPS[name](c, step)
        if name == "install" and "peers" in asked and budgeted(c, steps["peers"]):
            background = threading.Thread(target=STEPS["peers"], args=(c, steps["peers"]))
            background.start()
    if background is not None:
        background.join()
    return list(steps.values())


def junit_counts(path: Path) -> dict:
    import xml.etree.ElementTree as ET

    if not path.is_file():
        return {}
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return (
        {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        if suite is not None
        else {}
    )
