"""PEP 825 variant wheels end to end, no GPU, nothing from the internet: a native project's
sm_80 and sm_90 variant wheels and its plain wheel (`prebuild wheel --variants`), indexed
(`prebuild index`), served on 127.0.0.1; uv (--preview-features wheel-variants) installs, for
each GPU its NVIDIA provider is told to see, the wheel whose SASS runs there, read back with
`prebuild inspect` from the installed distribution; a GPU no wheel has SASS for, and no GPU,
get the plain wheel, and so does pip. The same from the wheel folder with --find-links.
Then the bad inputs: each refused with its reason, nothing written."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from functools import partial
from pathlib import Path

import pytest
from pip_env import clean_pip_env

pytestmark = pytest.mark.slow

UV = Path(sys.executable).parent / "uv"
PLAIN = "demo-0.1.0+cu130-cp310-abi3-linux_x86_64.whl"
# What uv's NVIDIA provider is told it sees (both variables: it needs the driver too), and the
# wheel it must pick: a 9.0 GPU takes sm90, an 8.x one sm80 (same major, older or equal
# minor), 12.0 has no SASS here and takes the plain wheel (its PTX), as does no GPU at all.
GPUS = {"8.0": "sm80", "8.6": "sm80", "9.0": "sm90", "12.0": None, None: None}


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=900, **kwargs
    )


@pytest.fixture(scope="module")
def variant_dist(tmp_path_factory) -> Path:
    """`prebuild new demo`, then its variant wheels for sm_80 and sm_90 and its plain wheel."""
    work = tmp_path_factory.mktemp("variants")
    assert run([sys.executable, "-m", "prebuild", "new", "demo"], cwd=work).returncode == 0
    built = run(
        [
            sys.executable,
            "-m",
            "prebuild",
            "wheel",
            "--arch",
            "sm_80,sm_90",
            "--variants",
            work / "demo",
            "--out",
            work / "dist",
        ],
        env={**os.environ, "COLUMNS": "200"},
    )
    assert built.returncode == 0, built.stdout + built.stderr
    names = sorted(p.name for p in (work / "dist").iterdir())
    assert names == sorted(
        [
            PLAIN,
            PLAIN.replace(".whl", "-sm80.whl"),
            PLAIN.replace(".whl", "-sm90.whl"),
            "demo-0.1.0+cu130-variants.json",
        ]
    ), names
    assert "Variants file" in built.stdout
    return work / "dist"


@pytest.fixture(scope="module")
def served_site(variant_dist, tmp_path_factory):
    """`prebuild index` of the wheels, served over HTTP on 127.0.0.1."""
    site = tmp_path_factory.mktemp("site") / "site"
    indexed = run([sys.executable, "-m", "prebuild", "index", variant_dist, "--out", site])
    assert indexed.returncode == 0, indexed.stderr
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def gpu_env(capability: str | None) -> dict:
    # uv sees the test's index or folder only: none of the machine's uv settings
    env = clean_pip_env(
        {k: v for k, v in os.environ.items() if not k.startswith("NV_VARIANT_PROVIDER")},
        UV_NO_CACHE="1",
    )
    if capability is not None:
        env.update(
            NV_VARIANT_PROVIDER_FORCE_SM_ARCH=capability,
            NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION="13.0",
        )
    return env


def installed_variant(python: Path) -> tuple[str | None, dict]:
    """The label of the demo wheel installed in ``python``'s venv, from ``prebuild inspect``
    of the installed distribution (None: the plain wheel), and the archs its binaries hold."""
    proc = run([python, "-m", "prebuild", "inspect", "demo", "--json"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"], report["disagreements"]
    variants = (report["variant"] or {}).get("variants", {})
    cuda = next(lib for lib in report["libraries"] if lib["kind"] == "cuda")
    return (next(iter(variants)) if variants else None), {"sass": cuda["sass"], "ptx": cuda["ptx"]}


SASS = {
    "sm80": {"sass": ["sm_80"], "ptx": []},
    "sm90": {"sass": ["sm_90"], "ptx": []},
    None: {"sass": ["sm_80", "sm_90"], "ptx": ["compute_90"]},
}


@pytest.mark.parametrize("where", ["index", "find-links"])
def test_uv_installs_the_wheel_whose_code_runs_on_the_gpu(
    where, variant_dist, served_site, dev_venv_copy
):
    site, url = served_site
    source = (
        ["--index-url", f"{url}/simple"]
        if where == "index"
        else ["--no-index", "--find-links", variant_dist]
    )
    seen = {}
    for capability, expected in GPUS.items():
        python = dev_venv_copy(f"venv-{capability}")
        proc = run(
            [
                UV,
                "pip",
                "install",
                "--preview-features",
                "wheel-variants",
                "--python",
                python,
                "--no-deps",
                *source,
                "demo",
            ],
            env=gpu_env(capability),
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        label, code = installed_variant(python)
        seen[capability] = label
        assert label == expected and code == SASS[expected], (capability, label, code)
    assert seen == GPUS


def test_pip_knows_no_variants_and_gets_the_plain_wheel(served_site, dev_venv_copy):
    site, url = served_site
    python = dev_venv_copy()
    proc = run(
        [python, "-m", "pip", "install", "--no-deps", "--index-url", f"{url}/simple", "demo"],
        env=clean_pip_env(),  # the served index only
    )
    assert proc.returncode == 0, proc.stderr
    assert installed_variant(python) == (None, SASS[None])
    # the site's landing page tells both commands
    page = (site / "index.html").read_text()
    assert (
        "uv pip install --preview-features wheel-variants demo" in page
        and "pip install demo" in page
    )


def rewrite_member(wheel: Path, target: Path, member_suffix: str, text: str) -> None:
    """A copy of ``wheel`` whose member ending in ``member_suffix`` says ``text`` instead."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = text.encode() if info.filename.endswith(member_suffix) else src.read(info)
            dst.writestr(info, data)


def test_bad_variant_inputs_are_refused_and_nothing_is_written(variant_dist, tmp_path):
    def index(dist: Path) -> subprocess.CompletedProcess:
        return run([sys.executable, "-m", "prebuild", "index", dist, "--out", tmp_path / "site"])

    # a variants file that does not list a wheel in the folder
    stale = tmp_path / "stale"
    shutil.copytree(variant_dist, stale)
    doc = json.loads((stale / "demo-0.1.0+cu130-variants.json").read_text())
    del doc["variants"]["sm90"]
    (stale / "demo-0.1.0+cu130-variants.json").write_text(json.dumps(doc))
    proc = index(stale)
    assert proc.returncode == 2 and "does not list the wheel(s) labelled sm90" in proc.stderr, (
        proc.stderr
    )
    assert not (tmp_path / "site").exists()

    # a wheel whose variant.json disagrees with its binary: inspect says so, and so does the index
    lying = tmp_path / "lying"
    lying.mkdir()
    sm80 = variant_dist / PLAIN.replace(".whl", "-sm80.whl")
    own = json.loads(zipfile.ZipFile(sm80).read("demo-0.1.0+cu130.dist-info/variant.json"))
    own["variants"]["sm80"]["nvidia"]["sm_arch"] = ["90_real"]
    rewrite_member(sm80, lying / sm80.name, "variant.json", json.dumps(own))
    proc = run([sys.executable, "-m", "prebuild", "inspect", lying / sm80.name])
    assert proc.returncode == 1 and "sm_arch properties say SASS [sm_90]" in proc.stderr, (
        proc.stderr
    )

    # two wheels that call different builds by one label: a clash
    clash = tmp_path / "clash"
    clash.mkdir()
    shutil.copy(sm80, clash / sm80.name)
    other = PLAIN.replace("0.1.0+cu130", "0.1.0+cu130").replace(".whl", "-sm80.whl")
    doc80 = json.loads(zipfile.ZipFile(sm80).read("demo-0.1.0+cu130.dist-info/variant.json"))
    doc80["variants"]["sm80"]["nvidia"]["cuda_version_lower_bound"] = ["12.0"]
    twin = clash / other.replace("linux_x86_64", "manylinux_2_28_x86_64")
    rewrite_member(sm80, twin, "variant.json", json.dumps(doc80))
    proc = index(clash)
    assert (
        proc.returncode == 2 and "variant label clash" in proc.stderr and "sm80" in proc.stderr
    ), proc.stderr
    assert not (tmp_path / "site").exists()


def test_prebuild_install_picks_a_variant_wheel_and_pip_installs_it(served_site, dev_venv_copy):
    """`prebuild install` reads the labels (the plain wheel names no archs: it is pip's pick),
    and hands pip the chosen variant wheel under the name pip reads."""
    site, url = served_site
    python = dev_venv_copy()
    proc = run(
        [python, "-m", "prebuild", "install", "demo", "--from", f"{url}/simple", "--arch", "sm_90"],
        env=clean_pip_env(PIP_NO_DEPS="1", COLUMNS="200"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Chosen: demo-0.1.0+cu130-cp310-abi3-linux_x86_64-sm90.whl" in proc.stdout
    assert "(the variant wheel demo-0.1.0+cu130-cp310-abi3-linux_x86_64-sm90.whl)" in proc.stderr
    assert "a --variants build's plain wheel" in proc.stderr
    assert installed_variant(python) == ("sm90", SASS["sm90"])
    # and doctor names the variant it runs
    doctor = run([python, "-m", "prebuild", "doctor", "--json"])
    projects = {p["name"]: p for p in json.loads(doctor.stdout)["projects"]}
    assert projects["demo"]["variant"] == "sm90" and not projects["demo"]["problem"], projects[
        "demo"
    ]
    assert any(
        "demo 0.1.0+cu130 (variant sm90): native build" in c["message"]
        for c in projects["demo"]["checks"]
    )


def test_a_per_arch_release_gets_variant_twins_and_one_index_for_both(built_wheel, tmp_path):
    """`prebuild variant`: a per-arch wheel (as the release's cibuildwheel jobs make them) gets
    its variant twin; indexed together, pip's per-key index keeps the per-arch wheel and the
    index of every wheel lists the variant one (not the per-arch one, whose higher local version
    pip would take whatever the GPU)."""
    wheel = built_wheel("sm_80")
    dist = tmp_path / "dist"
    dist.mkdir()
    shutil.copy(wheel, dist / wheel.name)
    proc = run([sys.executable, "-m", "prebuild", "variant", dist / wheel.name, "--out", dist])
    assert proc.returncode == 0, proc.stderr
    twin = dist / "prebuild-0.1.0+cu130-cp310-abi3-linux_x86_64-sm80.whl"
    assert twin.is_file() and (dist / "prebuild-0.1.0+cu130-variants.json").is_file()
    inspected = json.loads(
        run([sys.executable, "-m", "prebuild", "inspect", twin, "--json"]).stdout
    )
    assert inspected["ok"] and inspected["manifest"]["package_version"] == "0.1.0+cu130"
    assert list(inspected["variant"]["variants"]) == ["sm80"]
    assert (
        run(
            [sys.executable, "-m", "prebuild", "index", dist, "--out", tmp_path / "site"]
        ).returncode
        == 0
    )
    index = json.loads((tmp_path / "site" / "index.json").read_text())
    assert [w["filename"] for w in index["wheels"]] == [twin.name]
    assert [w["filename"] for w in index["indexes"]["cu130-sm80"]["wheels"]] == [wheel.name]
    # a variant wheel is not made twice, and a wheel that does not match its manifest not at all
    again = run(
        [sys.executable, "-m", "prebuild", "variant", twin, "--out", tmp_path / "again"],
        env={**os.environ, "COLUMNS": "200"},
    )
    assert again.returncode == 2 and "is a variant wheel already" in again.stderr
