"""The farm's plan: one job per wheel, keyed by what decides it; what is built is left out."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.farm.plan import (
    Farm,
    Job,
    SourceFacts,
    matrix,
    plan_jobs,
    source_facts,
    tree_digest,
)
from prebuild.tool.farm.recipes import CLASSIC, NATIVE, RecipeError, parse_recipes

RECIPES = """
[[project]]
name = "gsplat"
source = "gsplat==1.5.3"

[[project]]
name = "old-only"
source = "old-only==1.0"
pythons = ["3.10"]
archs = ["sm_80"]

[[project]]
name = "demo"
source = "demo==0.1.0"
kind = "native"
"""


def recipes():
    return parse_recipes(RECIPES, Path("/r/field.toml")).recipes


def facts(kind_of_demo=NATIVE):
    return {
        "gsplat": SourceFacts("gsplat==1.5.3", CLASSIC),
        "old-only": SourceFacts("old-only==1.0", CLASSIC),
        "demo": SourceFacts("demo==0.1.0", kind_of_demo),
    }


FARM = Farm(
    torch=("2.14.1", "2.13"),
    cuda=("13.0",),
    python=("3.11", "3.10"),
    archs=parse_arch_list("sm_80,sm_90"),
    prebuild="0.1.0",
)


def test_one_job_per_wheel_classic_per_torch_and_python_native_once():
    plan = plan_jobs(recipes(), facts(), FARM)
    titles = [j.title for j in plan.jobs]
    gsplat = [t for t in titles if t.startswith("gsplat")]
    # 2 torch x 2 Pythons x (2 archs + the plain wheel)
    assert len(gsplat) == 12
    assert "gsplat pt214 cu130 cp311 sm_90" in gsplat and "gsplat pt213 cu130 cp310 plain" in gsplat
    # the recipe's pythons and archs narrow the farm's
    assert [t for t in titles if t.startswith("old-only")] == [
        "old-only pt214 cu130 cp310 sm_80",
        "old-only pt214 cu130 cp310 plain",
        "old-only pt213 cu130 cp310 sm_80",
        "old-only pt213 cu130 cp310 plain",
    ]
    # abi3: once per arch, with the oldest torch and Python asked for
    demo = [j for j in plan.jobs if j.project == "demo"]
    assert [j.title for j in demo] == [
        "demo cu130 abi3 sm_80",
        "demo cu130 abi3 sm_90",
        "demo cu130 abi3 plain",
    ]
    assert {(j.torch, j.python) for j in demo} == {("2.13", "3.10")}
    assert plan.done == [] and plan.notes == []


def test_what_each_job_builds():
    by_title = {j.title: j for j in plan_jobs(recipes(), facts(), FARM).jobs}
    newest = by_title["gsplat pt214 cu130 cp311 sm_90"]
    assert newest.wheel_args() == ["--arch", "sm_90", "--ptx"]  # the newest arch carries PTX
    assert by_title["gsplat pt214 cu130 cp311 sm_80"].wheel_args() == ["--arch", "sm_80"]
    assert by_title["gsplat pt214 cu130 cp311 plain"].wheel_args() == [
        "--arch",
        "sm_80,sm_90",
        "--plain",
    ]
    assert by_title["old-only pt214 cu130 cp310 sm_80"].wheel_args() == ["--arch", "sm_80", "--ptx"]


def test_keys_change_with_what_decides_the_output_and_only_with_it():
    job = plan_jobs(recipes(), facts(), FARM).jobs[0]
    keys = {job.key}
    for change in (
        {"source_id": "gsplat==1.5.4"},
        {"torch": "2.15"},
        {"cuda": "12.8"},
        {"python": "3.12"},
        {"wheel": "sm_86", "archs": ("sm_86",)},
        {"ptx": not job.ptx},
        {"env": (("FORCE_CUDA", "1"),)},
        {"build_requires": ("ninja",)},
        {"prebuild": "0.2.0"},
        {"first_use": ("from gsplat import Ops; Ops.load(False)",)},
    ):
        keys.add(replace(job, **change).key)
    assert len(keys) == 11
    # none given: the key a job had before recipes could give it (a ledger's), read back
    assert "first_use" not in job.decides()
    before = {k: v for k, v in job.to_dict().items() if k not in ("key", "title", "first_use")}
    assert Job.from_dict(before) == job
    given = replace(job, first_use=("import gsplat.jit",))
    assert given.wheel_args()[-2:] == ["--first-use", "import gsplat.jit"]
    assert Job.from_dict(given.to_dict()) == given
    # where a local source was read from is not part of it: its content hash is
    assert replace(job, source="/elsewhere").key == job.key
    # a native wheel is abi3 for the stable ABI: the build's torch and Python do not decide it
    native = next(j for j in plan_jobs(recipes(), facts(), FARM).jobs if j.kind == NATIVE)
    assert replace(native, torch="2.15", python="3.12").key == native.key


def test_built_keys_are_left_out_so_a_new_torch_costs_only_its_jobs():
    first = plan_jobs(recipes(), facts(), FARM)
    built = {j.key for j in first.jobs}
    assert plan_jobs(recipes(), facts(), FARM, built).jobs == []
    wider = replace(FARM, torch=("2.13", "2.14", "2.15"))
    plan = plan_jobs(recipes(), facts(), wider, built)
    assert {j.torch for j in plan.jobs} == {"2.15"}  # the native project is done already
    assert len(plan.done) == len(first.jobs)


def test_jobs_round_trip_through_the_matrix_json():
    for job in plan_jobs(recipes(), facts(), FARM).jobs:
        data = job.to_dict()
        assert data["key"] == job.key and Job.from_dict(data) == job


def test_combinations_that_make_no_job_are_said():
    narrow = replace(FARM, python=("3.12",), archs=parse_arch_list("sm_90"))
    plan = plan_jobs(recipes(), facts(), narrow)
    assert not any(j.project == "old-only" for j in plan.jobs)
    assert any("old-only: none of the farm's Pythons (3.12)" in n for n in plan.notes)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"cuda": ("12.6",)}, "no CUDA 12.6 in the support table"),
        ({"torch": ("2",)}, "give torch's minor release too"),
        ({"python": ()}, "at least one python"),
    ],
)
def test_a_bad_farm_is_refused(change, said):
    with pytest.raises(ValueError, match=said):
        replace(FARM, **change)


def test_local_sources_are_hashed_and_their_kind_read(tmp_path):
    native = tmp_path / "native"
    native.mkdir()
    (native / "pyproject.toml").write_text(
        '[project]\nname = "n"\nversion = "1"\n[tool.prebuild]\n'
    )
    classic = tmp_path / "classic"
    (classic / "build").mkdir(parents=True)
    (classic / "setup.py").write_text("print(1)\n")
    archive = tmp_path / "c-1.0.tar.gz"
    archive.write_bytes(b"not really")
    text = "".join(
        f'[[project]]\nname = "{n}"\nsource = "./{p}"\n'
        for n, p in (("n", "native"), ("c", "classic"), ("a", archive.name), ("m", "missing"))
    )
    n, c, a, m = parse_recipes(text, tmp_path / "r.toml").recipes
    assert source_facts(n).kind == NATIVE and source_facts(c).kind == CLASSIC
    before = source_facts(c).source_id
    (classic / "build" / "x.o").write_text("an output: not the source")
    assert source_facts(c).source_id == before == f"tree:sha256:{tree_digest(classic)}"
    (classic / "setup.py").write_text("print(2)\n")
    assert source_facts(c).source_id != before
    assert source_facts(a).source_id.startswith("file:sha256:")
    with pytest.raises(RecipeError, match="project 'm': key 'source': .*missing does not exist"):
        source_facts(m)


def test_the_matrix_one_entry_per_job_or_per_build():
    jobs = plan_jobs(recipes(), facts(), FARM).jobs
    single = matrix(jobs)["include"]
    assert [e["keys"] for e in single] == [j.key for j in jobs]
    grouped = matrix(jobs, group=True)["include"]
    # gsplat: 2 torch x 2 Pythons; old-only: 2 torch x 1; demo: once
    assert len(grouped) == 4 + 2 + 1
    assert sum(len(e["keys"].split(",")) for e in grouped) == len(jobs)
    first = grouped[0]
    assert first["title"] == "gsplat pt214 cu130 cp311" and first["wheels"] == "sm_80,sm_90,plain"
