"""prebuild.tool.farm.build.run_farm, its jobs faked: what it records and publishes (the real
builds: tests/e2e/test_farm_build.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from prebuild.tool.farm import build
from prebuild.tool.farm.ledger import BUILT, Entry, read_ledger
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
