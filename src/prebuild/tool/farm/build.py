"""``prebuild farm build``: run the plan's jobs on this machine, then publish the index.

Each job is one ``prebuild wheel`` in its environment (``envs``), with the recipe's variables,
every compile through the compile cache the jobs share (so the host objects of one project
compile once for all its archs), its output in a log of its own. Its wheel is then tried
(``smoke_test``): installed into a throwaway venv over the build environment and imported with
no GPU visible and an empty ``TORCH_EXTENSIONS_DIR`` that must stay empty; the recipe's GPU
check runs too where a GPU the wheel fits is visible. A wheel that passes goes into
SITE/wheels and its job into the ledger at once, so a run that stops keeps what it finished
and the next run does only the rest. A job that fails is recorded with the end of its log
and the others go on. At the end the site is rewritten from the ledger (``site.publish``).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from filelock import FileLock, Timeout
from packaging.utils import canonicalize_name

from prebuild.runtime.versions import release
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.project import last_error
from prebuild.tool.builder.python_tag import python_floor
from prebuild.tool.farm.envs import (
    EnvError,
    Environments,
    EnvSpec,
    prebuild_path,
    uv_binary,
    uv_environment,
)
from prebuild.tool.farm.ledger import BUILT, FAILED, Entry, read_ledger, write_ledger
from prebuild.tool.farm.plan import PLAIN, Job
from prebuild.tool.farm.recipes import Recipe, Smoke
from prebuild.tool.farm.site import publish, store
from prebuild.tool.index_keys import is_host_wheel
from prebuild.tool.user_cache import user_cache_dir
from prebuild.tool.variant_wheels import parse_filename

LOG_TAIL = 3000  # characters of a failed job's log kept in the ledger


class FarmError(RuntimeError):
    """The farm cannot run at all (its site is locked or is something else)."""


class FarmReporter(Protocol):
    def job_started(self, number: int, total: int, job: Job) -> None: ...

    def job_finished(self, number: int, total: int, entry: Entry) -> None: ...


@dataclass(frozen=True)
class FarmResult:
    built: list[Entry]
    failed: list[Entry]
    seconds: float


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-LOG_TAIL:]


def run_farm(
    jobs: list[Job],
    recipes: dict[str, Recipe],
    site: Path,
    work: Path,
    environments: Environments,
    report: FarmReporter,
    cache: str | None = None,
    gpu_archs: tuple[str, ...] = (),
) -> FarmResult:
    """Run ``jobs`` (the plan's, for ``recipes`` by name) into ``site``; ``work`` keeps the
    environments, logs and throwaway venvs; ``cache``: the compile cache spec every job uses;
    ``gpu_archs``: the visible GPUs' archs (``sm_90``), where the recipes' GPU checks run."""
    started = time.monotonic()
    if jobs:
        uv_binary()  # every wheel is tried in a venv uv makes: EnvError before anything is built
    site.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(site.resolve().parent / f".{site.name}.farm.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise FarmError(
            f"another prebuild farm build is writing {site} (it holds {lock.lock_file}): wait "
            "for it, or give another --out"
        ) from None
    try:
        wheels_dir = store(site)
        ledger = read_ledger(site)
        jobs = [j for j in jobs if j.key not in ledger.built]  # done since the plan was made
        (work / "logs").mkdir(parents=True, exist_ok=True)
        environments.log = work / "logs" / "environments.log"
        built, failed = [], []
        # jobs sharing an environment run one after another, so each is made or found once;
        # the oldest torch first (a stable-ABI wheel built there serves the newer ones)
        ordered = sorted(jobs, key=lambda j: (j.python, release(j.torch), j.cuda))
        pythons: dict[tuple, Path | EnvError] = {}
        host_built: dict[str, Entry] = {}  # a host wheel's job, by its arch_free_key
        # jobs whose wheels serve other torches or Pythons too, by torch_python_free_key: this
        # run's and, for its projects, earlier runs' (a torch added later costs no build)
        wide_built: dict[str, list[tuple[Entry, Reach]]] = {}
        projects = {j.project for j in jobs}
        for earlier in ledger.entries.values():
            if earlier.status == BUILT and earlier.job.project in projects:
                reach = wheel_reach(wheels_dir, earlier)
                if reach is not None and reach.wide:
                    key = earlier.job.torch_python_free_key
                    wide_built.setdefault(key, []).append((earlier, reach))
        for number, job in enumerate(ordered, 1):
            report.job_started(number, len(ordered), job)
            spec = EnvSpec(job.python, job.torch, job.cuda)
            recipe = recipes[job.project]
            try:
                if (spec, job.build_requires) not in pythons:
                    pythons[spec, job.build_requires] = environments.python_for(
                        spec, job.build_requires
                    )
                python = pythons[spec, job.build_requires]
            except EnvError as exc:
                pythons[spec, job.build_requires] = exc
                python = exc
            same = host_built.get(job.arch_free_key)
            wide = next(
                (
                    (entry, reach)
                    for entry, reach in wide_built.get(job.torch_python_free_key, ())
                    if reach.serves(entry.job, job)
                ),
                None,
            )
            if same is not None:
                entry = Entry(
                    job,
                    BUILT,
                    same.wheels,
                    smoke=f"not built again: {same.job.title}'s wheel holds no GPU code and "
                    "serves this arch too",
                    log=same.log,
                )
            elif wide is not None:
                built_by, reach = wide
                entry = Entry(
                    job,
                    BUILT,
                    built_by.wheels,
                    smoke=f"not built again: {built_by.job.title}'s wheel {reach.why(built_by.job, job)}",
                    log=built_by.log,
                )
            elif isinstance(python, EnvError):
                entry = Entry(job, FAILED, error=str(python), log=str(environments.log))
            else:
                entry = run_job(job, recipe, python, work, wheels_dir, cache, gpu_archs)
            if entry.status == BUILT and all(
                j.arch_free_key != job.arch_free_key for j in ordered[number:]
            ):
                # The last job of its group: its objects serve no other (kept after a failure,
                # for the next run's).
                shutil.rmtree(objects_dir(work, job), ignore_errors=True)
            if entry.status == BUILT and all(is_host_wheel(w) for w in entry.wheels):
                host_built.setdefault(job.arch_free_key, entry)
            reach = wheel_reach(wheels_dir, entry) if entry.status == BUILT else None
            if reach is not None and reach.wide:
                wide_built.setdefault(job.torch_python_free_key, []).append((entry, reach))
            entry = Entry(**{**entry.__dict__, "finished": _now()})
            ledger.record(entry)
            write_ledger(ledger, site)
            (built if entry.status == BUILT else failed).append(entry)
            report.job_finished(number, len(ordered), entry)
        try:
            publish(site, ledger)
        except (BuildError, ValueError) as exc:  # a wheel the index refuses (SiteError too)
            raise FarmError(f"the index of {site} could not be written: {exc}") from None
        return FarmResult(built, failed, time.monotonic() - started)
    finally:
        lock.release()


def run_job(
    job: Job,
    recipe: Recipe,
    python: Path,
    work: Path,
    wheels_dir: Path,
    cache: str | None,
    gpu_archs: tuple[str, ...] = (),
) -> Entry:
    """One job: ``prebuild wheel`` in ``python``'s environment, the wheel checked and tried,
    then kept in ``wheels_dir``. Without a compile cache, its objects are kept in a build
    directory it shares with the jobs that differ from it in their archs only
    (``objects_dir``): they compile the host code once, and a job that stopped goes on from its
    objects when the farm runs again."""
    started = time.monotonic()
    log = work / "logs" / f"{job.key}.log"
    out = work / "out" / job.key
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, **dict(job.env)}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(prebuild_path(work)), os.environ.get("PYTHONPATH", "")) if p
    )
    env["COLUMNS"] = "200"
    command = [str(python), "-m", "prebuild", "wheel", *job.wheel_args(), "--out", str(out)]
    if cache:
        command += ["--cache", cache]
    else:  # a cached build compiles in a workspace of a fixed name, its objects in the cache
        command += ["--build-dir", str(objects_dir(work, job))]
    command.append(job.source)
    with log.open("w", encoding="utf-8") as f:
        f.write(f"# {job.title} (job {job.key})\n$ {' '.join(command)}\n")
        f.flush()
        proc = subprocess.run(command, env=env, stdout=f, stderr=subprocess.STDOUT)

    def failed(error: str) -> Entry:
        shutil.rmtree(out, ignore_errors=True)
        return Entry(job, FAILED, seconds=time.monotonic() - started, error=error, log=str(log))

    if proc.returncode != 0:
        tail = _tail(log)
        return failed(f"prebuild wheel exited with {proc.returncode}: {last_error(tail)}\n{tail}")
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        return failed(
            f"prebuild wheel made {len(wheels)} wheels, not one: {[w.name for w in wheels]}"
        )
    (wheel,) = wheels
    made = str(canonicalize_name(parse_filename(wheel.name)[0]))
    if made != job.project:
        return failed(
            f"the source built {made} ({wheel.name}), not {job.project}: is the recipe's name "
            "or source wrong?"
        )
    try:
        smoke = smoke_test(wheel, python, recipe.smoke, work / "smoke" / job.key, job, gpu_archs)
    except (SmokeError, EnvError) as exc:
        return failed(str(exc))
    shutil.move(str(wheel), wheels_dir / wheel.name)
    shutil.rmtree(out, ignore_errors=True)
    return Entry(job, BUILT, (wheel.name,), time.monotonic() - started, smoke=smoke, log=str(log))


@dataclass(frozen=True)
class Reach:
    """What a built job's wheels serve beyond its own torch and Python."""

    torch_from: str | None  # every torch from this one on ("": every torch); None: its own
    python_from: str | None  # every Python from this one on (py310-none, cp39-abi3); None: its own

    @property
    def wide(self) -> bool:
        return self.torch_from is not None or self.python_from is not None

    def serves(self, built: Job, job: Job) -> bool:
        """Whether the wheels ``built`` made serve ``job`` (same but for torch and Python)."""
        torch = job.torch == built.torch or (
            self.torch_from is not None and release(job.torch)[:2] >= release(self.torch_from)[:2]
        )
        python = job.python == built.python or (
            self.python_from is not None
            and release(job.python)[:2] >= release(self.python_from)[:2]
        )
        return torch and python

    def why(self, built: Job, job: Job) -> str:
        """``uses PyTorch's stable ABI alone and serves every torch from 2.10 on``."""
        reasons = []
        if job.torch != built.torch:
            reasons.append(
                f"uses PyTorch's stable ABI alone and serves every torch from {self.torch_from} on"
                if self.torch_from
                else "calls nothing of torch's and serves every torch"
            )
        if job.python != built.python:
            reasons.append(f"serves every Python from {self.python_from} on")
        return "; it ".join(reasons)


def wheel_reach(wheels_dir: Path, entry: Entry) -> Reach | None:
    """What a built job's wheels serve beyond its own torch and Python, read from their
    manifests: every torch from a target on (PyTorch's stable ABI alone, ``torch_target``) or
    every torch (nothing of torch's), every Python from one on (``py310-none``, ``cp39-abi3``);
    None where one cannot be read or is not another project's."""
    from prebuild.runtime.manifest import ManifestError, ProjectManifest
    from prebuild.tool.inspection import InspectionError, wheel_manifest

    targets, pythons = [], []
    for name in entry.wheels:
        try:
            manifest = wheel_manifest(wheels_dir / name)
        except (InspectionError, ManifestError, OSError):
            return None
        if not isinstance(manifest, ProjectManifest):
            return None
        if manifest.torch_free:
            targets.append("")
        elif manifest.stable_abi and manifest.torch_target:
            targets.append(manifest.torch_target)
        else:
            targets.append(None)
        pythons.append(python_floor(manifest.python_tag))
    torch_from = None if None in targets else max(targets, key=release, default=None)
    python_from = None if None in pythons else max(pythons, key=release, default=None)
    return Reach(torch_from, python_from)


def objects_dir(work: Path, job: Job) -> Path:
    """The ``--build-dir`` of ``job``'s build, shared by the jobs of the same project, source,
    torch, CUDA and Python (``Job.arch_free_key``); the record each build keeps there says
    which objects the next may use (builder/classic_objects.py)."""
    return work / "objects" / job.arch_free_key


class SmokeError(RuntimeError):
    """A built wheel failed its smoke test."""


# The import, and what it compiled: nothing may appear in TORCH_EXTENSIONS_DIR. torch first, as
# in every program that uses the project: an extension module (simple_knn._C) links against
# torch's libraries, which only importing torch loads.
_IMPORT = """
import importlib, json, os, pathlib, sys
try:
    import torch
except ImportError:
    pass
module = importlib.import_module(sys.argv[1])
extensions = pathlib.Path(os.environ["TORCH_EXTENSIONS_DIR"])
print(json.dumps({"file": getattr(module, "__file__", None),
                  "compiled": sorted(str(p) for p in extensions.rglob("*")) if extensions.exists() else []}))
"""


def smoke_test(
    wheel: Path, python: Path, smoke: Smoke, where: Path, job: Job, gpu_archs: tuple[str, ...] = ()
) -> str:
    """Install ``wheel`` into a throwaway venv over ``python``'s environment and import it with
    no GPU visible; run the recipe's GPU check where a GPU it fits is visible. Says what ran;
    SmokeError says what failed."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    venv = where / "venv"
    uv = uv_binary()
    made = subprocess.run(
        [uv, "venv", "--quiet", "--python", str(python), str(venv)], capture_output=True, text=True
    )
    _check(made, "making its venv")
    base = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib']); "
         "print(sysconfig.get_paths()['platlib'])"],
        capture_output=True, text=True,
    )  # fmt: skip
    _check(base, "reading the build environment's site-packages")
    purelib = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    # the build environment's packages (torch) behind the venv's own, its .pth files run
    dirs = list(dict.fromkeys(base.stdout.split()))
    # one line of statements: a .pth line runs at module level (a comprehension would not see
    # `site`), and addsitedir runs that environment's own .pth files too
    (purelib / "_prebuild_farm_base.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n"
    )
    install = [
        uv,
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--python",
        str(venv / "bin" / "python"),
        str(wheel),
    ]
    _check(subprocess.run(install, capture_output=True, text=True), f"installing {wheel.name}")
    install_missing_requirements(uv, venv / "bin" / "python", job.project)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PREBUILD_ALLOW_JIT")}
    env.update(CUDA_VISIBLE_DEVICES="", TORCH_EXTENSIONS_DIR=str(where / "torch_extensions"))
    ran = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _IMPORT, smoke.import_name],
        capture_output=True, text=True, env=env, cwd=where,
    )  # fmt: skip
    if ran.returncode != 0:
        raise SmokeError(
            f"import {smoke.import_name} failed: {last_error(ran.stderr)}\n{ran.stderr[-LOG_TAIL:]}"
        )
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    if result["compiled"]:
        raise SmokeError(
            f"import {smoke.import_name} compiled at run time: {', '.join(result['compiled'][:5])}"
        )
    said = f"imported {smoke.import_name}, nothing compiled"
    fits = [a for a in gpu_archs if job.wheel == PLAIN or a in job.archs]
    if smoke.gpu and fits:
        env.pop("CUDA_VISIBLE_DEVICES")
        gpu = subprocess.run(
            [str(venv / "bin" / "python"), "-c", smoke.gpu], capture_output=True, text=True, env=env, cwd=where
        )  # fmt: skip
        if gpu.returncode != 0:
            raise SmokeError(
                f"the recipe's GPU check failed on {fits[0]}: {last_error(gpu.stderr)}\n"
                f"{gpu.stderr[-LOG_TAIL:]}"
            )
        said += f"; the GPU check passed on {fits[0]}"
    elif smoke.gpu:
        seen = (
            f"the GPUs visible ({', '.join(gpu_archs)}) are none it fits"
            if gpu_archs
            else "no GPU is visible"
        )
        said += f"; {seen}: the GPU check did not run"
    shutil.rmtree(where, ignore_errors=True)
    return said


# The requirements of an installed distribution (and of those they bring) not met by what the
# venv sees, its build environment's packages included; printed as JSON.
_MISSING = """
import json, sys
import importlib.metadata as md
from packaging.requirements import Requirement
missing, seen, todo = [], set(), [sys.argv[1]]
while todo:
    name = todo.pop()
    for text in md.distribution(name).requires or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            missing.append(text)
            continue
        if not req.specifier.contains(version, prereleases=True):
            missing.append(text)
        elif req.name not in seen:
            seen.add(req.name)
            todo.append(req.name)
print(json.dumps(sorted(set(missing))))
"""


def install_missing_requirements(uv: str, python: Path, distribution: str) -> None:
    """Install into the smoke venv what the wheel needs and its build environment lacks
    (DeepSpeed's psutil, hjson, ...), never what it has (torch, seen through the .pth): one
    round per level of requirements, each without dependencies, at most a few rounds."""
    for _ in range(5):
        ran = subprocess.run(
            [str(python), "-c", _MISSING, distribution], capture_output=True, text=True
        )
        _check(ran, f"reading what {distribution} requires")
        missing = json.loads(ran.stdout.strip().splitlines()[-1])
        if not missing:
            return
        installed = subprocess.run(
            [uv, "pip", "install", "--quiet", "--no-deps", "--python", str(python), *missing],
            capture_output=True, text=True, env=uv_environment(),
        )  # fmt: skip
        _check(installed, f"installing what {distribution} requires ({', '.join(missing)})")
        # the next round reads what these require in turn
    raise SmokeError(f"{distribution}'s requirements kept growing after 5 rounds of installs")


def _check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        raise SmokeError(f"{what} failed: {last_error(output)}\n{output[-LOG_TAIL:]}")


def default_work() -> Path:
    """``~/.cache/prebuild/farm`` (``$XDG_CACHE_HOME`` respected): environments, logs, the
    compile cache."""
    return user_cache_dir() / "farm"
