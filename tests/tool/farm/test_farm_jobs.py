"""prebuild.tool.farm.build.run_farm, its jobs faked: what it records and publishes (the real
builds: tests/e2e/test_farm_build.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from prebuild.tool.farm import build
from prebuild.tool.farm.ledger import BUILT, FAILED, Entry, read_ledger
from prebuild.tool.farm.plan import Job

TAGS = "cp311-cp311-linux_x86_64"


def job(project: str, arch: str) -> Job:
    return Job(
        project, f"{project}==1.0", f"{project}==1.0", "classic", "2.14", "13.0", "3.11",
        arch, (arch,), False, (), (), "0.1.0",
    )  # fmt: skip


def write_wheel(folder: Path, name: str, version: str) -> str:
    filename = f"{name}-{version}-{TAGS}.whl"
    info = f"{name}-{version.split('+')[0]}.dist-info"
    with zipfile.ZipFile(folder / filename, "w") as zf:
        zf.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        zf.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nTag: {TAGS}\n")
        zf.writestr(f"{info}/RECORD", "")
    return filename


class Environments:
    log: Path | None = None

    def python_for(self, spec, build_requires):
        return Path("/fake/python")


class Report:
    def __init__(self):
        self.finished: list[Entry] = []

    def job_started(self, number, total, job):
        pass

    def job_finished(self, number, total, entry):
        self.finished.append(entry)


def test_a_host_wheel_is_built_once_for_all_the_arch_jobs_of_its_build(tmp_path, monkeypatch):
    """torch_memory_saver holds no GPU code: its sm_80 job's wheel serves sm_90 too, so the
    sm_90 job is recorded with it, not built again; a GPU project's jobs are each built."""
    built: list[str] = []

    def run_job(job, recipe, python, work, wheels_dir, cache, gpu_archs=()):
        built.append(job.title)
        label = (
            "pt214.cu130.host"
            if job.project == "tms"
            else f"pt214.cu130.{job.wheel.replace('_', '')}"
        )
        return Entry(job, BUILT, (write_wheel(wheels_dir, job.project, f"1.0+{label}"),))

    monkeypatch.setattr(build, "run_job", run_job)
    monkeypatch.setattr(build, "uv_binary", lambda: "uv")
    published = []  # the site itself is publish's (tests/tool/farm/test_farm_site.py)
    monkeypatch.setattr(build, "publish", lambda site, ledger: published.append(ledger.wheels()))
    jobs = [job(p, a) for p in ("tms", "gsplat") for a in ("sm_80", "sm_90")]
    report = Report()
    result = build.run_farm(
        jobs, {"tms": None, "gsplat": None}, tmp_path / "site", tmp_path / "work",
        Environments(), report,
    )  # fmt: skip
    assert sorted(built) == [
        "gsplat pt214 cu130 cp311 sm_80",
        "gsplat pt214 cu130 cp311 sm_90",
        "tms pt214 cu130 cp311 sm_80",
    ]
    assert len(result.built) == 4 and not result.failed
    (again,) = [e for e in report.finished if e.job.title == "tms pt214 cu130 cp311 sm_90"]
    assert again.wheels == (f"tms-1.0+pt214.cu130.host-{TAGS}.whl",)
    assert "not built again: tms pt214 cu130 cp311 sm_80's wheel holds no GPU code" in again.smoke
    wheels = sorted(
        [f"tms-1.0+pt214.cu130.host-{TAGS}.whl"]
        + [f"gsplat-1.0+pt214.cu130.{sm}-{TAGS}.whl" for sm in ("sm80", "sm90")]
    )
    assert read_ledger(tmp_path / "site").wheels() == wheels and published == [wheels]


def test_jobs_differing_in_archs_share_a_build_dir_removed_once_all_of_them_are_built(
    tmp_path, monkeypatch
):
    """Each job builds with --build-dir objects/<arch_free_key>, so the jobs of one project,
    torch and Python compile its host code once; the directory goes once the group's last job
    is built, and stays after a failure (the next run goes on from it). With a compile cache,
    none: the cache holds the objects, and its builds compile at a path of fixed name."""
    commands: list[list[str]] = []

    class Failed:
        returncode = 1

    def run(command, **kwargs):
        commands.append(command)
        return Failed()

    monkeypatch.setattr(build.subprocess, "run", run)
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    sm80, sm90, other = job("gsplat", "sm_80"), job("gsplat", "sm_90"), job("tms", "sm_80")
    for j in (sm80, sm90, other):
        entry = build.run_job(j, None, Path("/fake/python"), work, tmp_path / "wheels", None)
        assert entry.status != BUILT
    dirs = [Path(c[c.index("--build-dir") + 1]) for c in commands]
    assert dirs[0] == dirs[1] == work / "objects" / sm80.arch_free_key and dirs[2] != dirs[0]
    build.run_job(sm80, None, Path("/fake/python"), work, tmp_path / "wheels", "redis://h:1")
    assert "--build-dir" not in commands[-1] and "--cache" in commands[-1]

    def run_job(job, recipe, python, work, wheels_dir, cache, gpu_archs=()):
        build.objects_dir(work, job).mkdir(parents=True, exist_ok=True)
        if job.project == "tms":
            return Entry(job, FAILED, error="no")
        name = write_wheel(wheels_dir, job.project, f"1.0+pt214.cu130.{job.wheel[3:]}")
        # The group's first job finds its directory there still when the second runs.
        assert job.wheel == "sm_80" or build.objects_dir(work, job).is_dir()
        return Entry(job, BUILT, (name,))

    monkeypatch.setattr(build, "run_job", run_job)
    monkeypatch.setattr(build, "uv_binary", lambda: "uv")
    monkeypatch.setattr(build, "publish", lambda site, ledger: None)
    result = build.run_farm(
        [sm80, sm90, other],
        {"gsplat": None, "tms": None},
        tmp_path / "site",
        work,
        Environments(),
        Report(),
    )
    assert len(result.built) == 2 and len(result.failed) == 1
    assert not build.objects_dir(work, sm80).exists() and build.objects_dir(work, other).is_dir()


def run_fake_farm(tmp_path, monkeypatch, jobs, describe) -> tuple[list[str], Report]:
    """``run_farm`` over ``jobs`` whose builds each write a wheel holding its prebuild.json
    alone: ``describe(job)`` -> (its local label, its tags, ProjectManifest's keyword arguments).
    The titles of the jobs built, in order, and the report."""
    from prebuild.runtime.manifest import ProjectManifest

    built: list[str] = []

    def run_job(job, recipe, python, work, wheels_dir, cache, gpu_archs=()):
        built.append(job.title)
        label, tags, abi = describe(job)
        filename = f"{job.project}-1.0+{label}-{tags}.whl"
        manifest = ProjectManifest(
            "classic", f"{job.torch}.0+cu130", "13.0", "13.0", tags, (), (), (), **abi
        )
        with zipfile.ZipFile(wheels_dir / filename, "w") as zf:
            zf.writestr(f"{job.project}-1.0.dist-info/prebuild.json", manifest.to_json())
        return Entry(job, BUILT, (filename,))

    monkeypatch.setattr(build, "run_job", run_job)
    monkeypatch.setattr(build, "uv_binary", lambda: "uv")
    monkeypatch.setattr(build, "publish", lambda site, ledger: None)
    report = Report()
    projects = {j.project: None for j in jobs}
    build.run_farm(jobs, projects, tmp_path / "site", tmp_path / "work", Environments(), report)
    return built, report


def test_a_stable_abi_wheel_is_built_once_for_the_newer_torch_jobs_it_serves(tmp_path, monkeypatch):
    """A classic project whose libraries use the stable ABI alone (target 2.10): the oldest
    torch's job that builds it (2.12; 2.9's build is tied to 2.9) serves the 2.14 job, recorded
    with its wheel, not built again (the two would share one name); a C++-ABI project's jobs
    are each built. Jobs run oldest torch first, by release, not by text ("2.9" < "2.12")."""
    import dataclasses

    from prebuild.runtime.manifest import CXX_ABI, STABLE_ABI

    def describe(job):
        if job.project == "sabi" and job.torch != "2.9":
            return "cu130.sm80", TAGS, {"torch_abi": STABLE_ABI, "torch_target": "2.10"}
        return f"pt{job.torch.replace('.', '')}.cu130.sm80", TAGS, {"torch_abi": CXX_ABI}

    jobs = [
        dataclasses.replace(job(project, "sm_80"), torch=torch)
        for project in ("sabi", "plain")
        for torch in ("2.14", "2.9", "2.12")
    ]
    built, report = run_fake_farm(tmp_path, monkeypatch, jobs, describe)
    assert built == [
        "sabi pt29 cu130 cp311 sm_80",
        "plain pt29 cu130 cp311 sm_80",
        "sabi pt212 cu130 cp311 sm_80",
        "plain pt212 cu130 cp311 sm_80",
        "plain pt214 cu130 cp311 sm_80",
    ]
    (again,) = [e for e in report.finished if e.job.title == "sabi pt214 cu130 cp311 sm_80"]
    assert again.status == BUILT and again.wheels == (f"sabi-1.0+cu130.sm80-{TAGS}.whl",)
    assert "not built again: sabi pt212 cu130 cp311 sm_80's wheel uses PyTorch's stable" in (
        again.smoke
    )
    assert "from 2.10 on" in again.smoke


def test_a_wheel_for_every_torch_or_python_is_built_once_for_the_jobs_it_serves(
    tmp_path, monkeypatch
):
    """Libraries that call nothing of torch's (bitsandbytes' ctypes library) and nothing of
    Python's C API (py310-none): the first job of an arch serves the other torches' and the
    later Pythons' from 3.10 on (not 3.9's), of its CUDA and arch; a torch-tied one (a torch
    op library loaded by torch.ops.load_library) still builds once per torch."""
    import dataclasses

    from prebuild.runtime.manifest import CXX_ABI, NO_TORCH_ABI

    any_python = "py310-none-linux_x86_64"

    def describe(job):
        tags = TAGS if job.python == "3.9" else any_python
        if job.project == "free":
            return f"cu130.{job.wheel.replace('_', '')}", tags, {"torch_abi": NO_TORCH_ABI}
        return f"pt{job.torch.replace('.', '')}.cu130.sm80", tags, {"torch_abi": CXX_ABI}

    jobs = [
        dataclasses.replace(job(project, arch), torch=torch, python=python)
        for project, arch in (("free", "sm_80"), ("free", "sm_90"), ("ops", "sm_80"))
        for torch in ("2.14", "2.12")
        for python in ("3.12", "3.11", "3.9")
    ]
    built, report = run_fake_farm(tmp_path, monkeypatch, jobs, describe)
    assert sorted(built) == [
        "free pt212 cu130 cp311 sm_80",
        "free pt212 cu130 cp311 sm_90",  # another arch
        "free pt212 cu130 cp39 sm_80",  # 3.9: older than the py310 wheel serves
        "free pt212 cu130 cp39 sm_90",
        "ops pt212 cu130 cp311 sm_80",
        "ops pt212 cu130 cp39 sm_80",
        "ops pt214 cu130 cp311 sm_80",  # tied to its torch
        "ops pt214 cu130 cp39 sm_80",
    ]
    finished = {e.job.title: e for e in report.finished}
    assert len(finished) == 18 and all(e.status == BUILT for e in finished.values())
    assert finished["free pt214 cu130 cp312 sm_90"].smoke == (
        "not built again: free pt212 cu130 cp311 sm_90's wheel calls nothing of torch's and "
        "serves every torch; it serves every Python from 3.10 on"
    )
    assert finished["free pt214 cu130 cp312 sm_90"].wheels == (
        f"free-1.0+cu130.sm90-{any_python}.whl",
    )
    assert finished["ops pt214 cu130 cp312 sm_80"].smoke == (
        "not built again: ops pt214 cu130 cp311 sm_80's wheel serves every Python from 3.10 on"
    )
    # a wheel of one Python's tag serves that Python's jobs alone: here, every torch's
    assert finished["free pt214 cu130 cp39 sm_80"].wheels == (f"free-1.0+cu130.sm80-{TAGS}.whl",)


def test_a_later_run_s_new_torch_is_served_by_an_earlier_run_s_stable_abi_wheel(
    tmp_path, monkeypatch
):
    """The site's ledger holds a stable-ABI wheel built for torch 2.12 by an earlier run: a
    later run's 2.14 job is recorded with it, not built again; a 2.9 job (older than its
    target) is built."""
    import dataclasses

    from prebuild.runtime.manifest import CXX_ABI, STABLE_ABI

    def describe(job):
        if job.torch != "2.9":
            return "cu130.sm80", TAGS, {"torch_abi": STABLE_ABI, "torch_target": "2.10"}
        return "pt29.cu130.sm80", TAGS, {"torch_abi": CXX_ABI}

    first = [dataclasses.replace(job("sabi", "sm_80"), torch="2.12")]
    built, _ = run_fake_farm(tmp_path, monkeypatch, first, describe)
    assert built == ["sabi pt212 cu130 cp311 sm_80"]
    later = [dataclasses.replace(job("sabi", "sm_80"), torch=t) for t in ("2.14", "2.9")]
    built, report = run_fake_farm(tmp_path, monkeypatch, later, describe)
    assert built == ["sabi pt29 cu130 cp311 sm_80"]
    (again,) = [e for e in report.finished if e.job.torch == "2.14"]
    assert again.wheels == (f"sabi-1.0+cu130.sm80-{TAGS}.whl",)
    assert again.smoke.startswith("not built again: sabi pt212 cu130 cp311 sm_80's wheel uses")
