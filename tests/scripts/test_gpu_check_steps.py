"""scripts/gpu_check.py's pure parts and small steps, without a GPU: fused-ssim's source archived
as an sdist-shaped tarball (it is not on PyPI), the budget that keeps the whole check within one
10-minute command, commands run together (gpu_check_steps.py), and the bench step's summary
and report section (gpu_check_report.py). (The dry run end to end:
tests/e2e/test_gpu_check.py.)"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the command and its sibling modules, as `python scripts/gpu_check.py` finds them
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_check  # noqa: E402
import gpu_check_report  # noqa: E402
import gpu_check_steps  # noqa: E402


def git(*args: str, cwd: Path) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env
    ).stdout


@pytest.fixture
def project(tmp_path) -> Path:
    """A small project tree like fused-ssim's: sources, a package, pictures."""
    src = tmp_path / "fused-ssim"
    (src / "fused_ssim").mkdir(parents=True)
    (src / "images").mkdir()
    (src / "setup.py").write_text("from setuptools import setup\nsetup(name='fused_ssim')\n")
    (src / "ssim.cu").write_text("// kernels\n")
    (src / "fused_ssim" / "__init__.py").write_text("")
    (src / "images" / "plot.png").write_bytes(b"\x89PNG" + b"0" * 1000)
    return src


def members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name for m in tar.getmembers() if m.isfile()}


EXPECTED = {"setup.py", "ssim.cu", "fused_ssim/__init__.py"}


def test_a_git_checkout_is_archived_at_head_without_its_images(project, tmp_path):
    git("init", "-q", cwd=project)
    git("add", ".", cwd=project)
    git("commit", "-qm", "one", cwd=project)
    (project / "untracked.txt").write_text("not committed")
    rev = git("rev-parse", "--short=12", "HEAD", cwd=project).strip()
    deps = tmp_path / "deps"
    deps.mkdir()
    (deps / "fused-ssim-old.tar.gz").write_bytes(b"stale")  # an earlier fetch's: replaced
    archive = gpu_check.archive_source(str(project), deps, "fused-ssim")
    assert archive == deps / f"fused-ssim-{rev}.tar.gz" and sorted(deps.iterdir()) == [archive]
    assert members(archive) == {f"fused-ssim-{rev}/{name}" for name in EXPECTED}

    # a bare repository (what a mirror holds) gives the same archive
    bare = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(project), str(bare)], check=True)
    again = gpu_check.archive_source(str(bare), deps, "fused-ssim")
    assert again == archive and members(again) == {f"fused-ssim-{rev}/{name}" for name in EXPECTED}


def test_a_plain_directory_is_archived_as_it_is(project, tmp_path):
    archive = gpu_check.archive_source(str(project), tmp_path, "fused-ssim")
    assert archive.name == "fused-ssim-local.tar.gz"
    assert members(archive) == {f"fused-ssim-local/{name}" for name in EXPECTED}


def test_a_step_gets_what_is_left_of_the_budget():
    now = time.monotonic()
    c = gpu_check_steps.Check(
        out=Path("."), dry_run=True, deps=Path("."), objects=None, deadline=now + 1000
    )
    step = gpu_check_steps.Step("cuda", 180)
    assert gpu_check_steps.budgeted(c, step) and step.limit == 180  # plenty left: its own limit
    c.deadline = now + 60
    step = gpu_check_steps.Step("peers", 240)
    assert gpu_check_steps.budgeted(c, step) and 50 < step.limit <= 60  # cut to the rest
    c.deadline = now + 3
    step = gpu_check_steps.Step("bench", 120)
    assert not gpu_check_steps.budgeted(c, step)
    assert step.status == "skipped" and "no time left" in step.summary


def recording_steps(monkeypatch, seconds: float = 0.3) -> list[tuple[str, str, float]]:
    """Every step replaced by one that sleeps and records when it started and ended (the build
    step also 'makes' the wheel the peers need)."""
    events = []

    def fake(name):
        def run(c, step):
            events.append((name, "start", time.monotonic()))
            time.sleep(seconds)
            if name == "build":
                c.wheel = Path("prebuild.whl")
            step.status = "passed"
            events.append((name, "end", time.monotonic()))

        return run

    monkeypatch.setattr(
        gpu_check_steps, "STEPS", {name: fake(name) for name in gpu_check_steps.STEPS}
    )
    return events


def test_the_peers_build_beside_the_gpu_steps_and_bench_waits_for_them(monkeypatch, tmp_path):
    """The peers' build (all CPU) starts once install is done and runs beside cuda, selftest
    and gsplat; bench starts only after it. The report keeps the steps' order."""
    events = recording_steps(monkeypatch)
    steps = gpu_check_steps.check(tmp_path, False, None, None, tmp_path, budget=60)
    assert [s.name for s in steps] == list(gpu_check_steps.STEPS)
    assert all(s.status == "passed" for s in steps)
    at = {(name, what): t for name, what, t in events}
    assert at["peers", "start"] >= at["install", "end"]
    assert at["peers", "start"] < at["cuda", "end"]  # beside the GPU steps
    assert at["bench", "start"] >= at["peers", "end"]
    assert at["bench", "start"] >= at["gsplat", "end"]


def test_steps_runs_only_the_steps_asked_for(monkeypatch, tmp_path):
    events = recording_steps(monkeypatch, seconds=0)
    steps = gpu_check_steps.check(
        tmp_path, False, None, None, tmp_path, budget=60, only={"build", "bench"}
    )
    ran = [name for name, what, _ in events if what == "start"]
    assert ran == ["facts", "build", "bench"]  # facts always: the GPU and torch it reports
    skipped = {s.name: s.summary for s in steps if s.status == "skipped"}
    assert set(skipped) == {"install", "cuda", "selftest", "gsplat", "peers"}
    assert all(text == "not asked for (--steps)" for text in skipped.values())


def test_commands_run_together_each_with_its_status():
    step = gpu_check_steps.Step("peers", 60)
    start = time.monotonic()
    codes = gpu_check_steps.run_together(
        step,
        {
            "a": ["sh", "-c", "sleep 1; echo built a"],
            "b": ["sh", "-c", "sleep 1; echo no >&2; exit 3"],
        },
    )
    assert codes == {"a": 0, "b": 3}
    assert time.monotonic() - start < 1.9  # at once, not one after the other
    assert (
        "--- a\nbuilt a" in step.output
        and "--- b\nno" in step.output
        and step.command.count(" &") == 2
    )

    late = gpu_check_steps.Step("peers", 1)
    assert gpu_check_steps.run_together(late, {"slow": ["sleep", "5"], "quick": ["true"]}) is None
    assert late.status == "failed" and "time limit" in late.summary


def test_bench_summary_names_the_largest_rows_against_each_peer():
    data = {
        "ssim": [
            {"size": "256x256", "batch": 1, "ratios": {"fused-ssim (upstream)": 0.5}},
            {
                "size": "1080x1920",
                "batch": 4,
                "ratios": {"fused-ssim (upstream)": 1.25, "plain conv2d": 9.0},
            },
        ],
        "raster": [{"gaussians": 100000, "ratios": {"gsplat 1.5.3 rasterization": 0.8}}],
    }
    assert gpu_check_steps.bench_summary(data) == (
        "SSIM 1080x1920 B=4: 1.25x vs fused-ssim (upstream), 9.00x vs plain "
        "conv2d; raster 100,000: 0.80x vs gsplat 1.5.3 rasterization"
    )
    assert gpu_check_steps.bench_summary({"ssim": [], "raster": []}) == "no rows"


def test_the_bench_section_is_taken_into_the_report(tmp_path):
    md = tmp_path / "benchmarks.md"
    md.write_text(
        "# Benchmarks\n\n## 6. CUDA kernels\n\nH100.\n\n| a |\n|---|\n\n## History of measured changes\n\nold\n"
    )
    assert gpu_check_report.bench_section(md) == [
        "",
        "## bench: the CUDA kernels against their peers",
        "",
        "H100.",
        "",
        "| a |",
        "|---|",
    ]
    assert gpu_check_report.bench_section(tmp_path / "missing.md") == []


def test_peer_wheels_are_installed_instead_of_built(monkeypatch, tmp_path):
    """--peer-wheels DIR: the peers an earlier check built are installed beside prebuild's wheel,
    and nothing is built."""
    wheels = tmp_path / "peers"
    wheels.mkdir()
    for name in ("fused_ssim-1.0.0-cp312-cp312-linux_x86_64.whl", "gsplat-1.5.3-cp312.whl"):
        (wheels / name).write_bytes(b"")
    (tmp_path / "deps").mkdir()
    (tmp_path / "deps" / "gsplat-1.5.3.tar.gz").write_bytes(b"")
    (tmp_path / "deps" / "fused-ssim-abc.tar.gz").write_bytes(b"")
    installed = []
    monkeypatch.setattr(gpu_check_steps, "make_venv", lambda path, base: path / "bin" / "python")
    monkeypatch.setattr(
        gpu_check_steps,
        "pip_install",
        lambda c, step, python, *what, env=None: (
            installed.append(what) or subprocess.CompletedProcess([], 0, "", "")
        ),
    )
    monkeypatch.setattr(
        gpu_check_steps, "run_together", lambda *a, **k: pytest.fail("the peers were built")
    )
    c = gpu_check_steps.Check(
        out=tmp_path / "out",
        dry_run=False,
        deps=tmp_path / "deps",
        objects=None,
        deadline=time.monotonic() + 60,
        gpus=[{"name": "H200", "capability": [9, 0]}],
        wheel=tmp_path / "prebuild.whl",
        peer_wheels=wheels,
    )
    step = gpu_check_steps.Step("peers", 60)
    gpu_check_steps.step_peers(c, step)
    assert step.status == "passed", step.summary
    assert installed == [(str(c.wheel), *map(str, sorted(wheels.glob("*.whl"))))]
    assert step.summary.startswith("installed the built fused_ssim, gsplat")
    assert c.peers_python is not None
