"""prebuild.tool.index and `prebuild index`: layout, links and hashes, on made-up wheels; pip
resolves each index key's index to that key's wheel only."""

from __future__ import annotations

import hashlib
import html
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import unquote

import pytest
from pip_env import clean_pip_env
from typer.testing import CliRunner

from prebuild.tool.cli import app
from prebuild.tool.index import (
    ALL,
    SiteError,
    WheelInfo,
    build_index,
    group_by_index,
    project_page,
)

runner = CliRunner()
TAGS = "cp310-abi3-linux_x86_64"


def fake_wheel(dist: Path, version: str, name: str = "prebuild", requires: str = "") -> Path:
    """A minimal valid wheel (pip can install it); its module records its version."""
    dist.mkdir(parents=True, exist_ok=True)
    path = dist / f"{name}-{version}-{TAGS}.whl"
    info = f"{name}-{version}.dist-info"
    requires_dist = f"Requires-Dist: {requires}\n" if requires else ""
    files = {
        f"{name}_fake.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.10\n"
        + requires_dist,
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {TAGS}\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for n, text in files.items():
            zf.writestr(n, text)
        zf.writestr(f"{info}/RECORD", record)
    return path


def test_group_by_index_groups_by_key_and_keeps_all():
    wheels = [
        WheelInfo(f"prebuild-0.1.0+{label}-{TAGS}.whl", "0" * 64)
        for label in ("cu130.sm90", "cu130.sm80", "cu128.sm90", "cpu", "cu130.sm90.ptx90")
    ]
    indexes = group_by_index(wheels)
    assert list(indexes) == [ALL, "cu128-sm90", "cu130-sm80", "cu130-sm90"]
    assert len(indexes[ALL]) == 5
    assert [w.filename.split("+")[1].split("-")[0] for w in indexes["cu130-sm90"]] == [
        "cu130.sm90",
        "cu130.sm90.ptx90",
    ]


def test_project_page_links_escape_and_hash():
    page = project_page(
        "prebuild",
        [WheelInfo(f"prebuild-0.1.0+cu130.sm90-{TAGS}.whl", "ab" * 32, ">=3.10")],
        "../../wheels/",
    )
    assert f'href="../../wheels/prebuild-0.1.0%2Bcu130.sm90-{TAGS}.whl#sha256={"ab" * 32}"' in page
    assert 'data-requires-python="&gt;=3.10"' in page


def links(page: Path) -> list[tuple[Path, str]]:
    out = []
    for href in re.findall(r'href="([^"]+)"', page.read_text()):
        path, _, fragment = html.unescape(href).partition("#")
        out.append(((page.parent / unquote(path)).resolve(), fragment))
    return out


def test_site_layout_links_resolve_and_hashes_match(tmp_path):
    dist = tmp_path / "dist"
    for label in ("cu130.sm80", "cu130.sm90", "cu130.sm120.ptx120", "cpu"):
        fake_wheel(dist, f"0.1.0+{label}")
    site = tmp_path / "site"
    result = runner.invoke(app, ["index", str(dist), "--out", str(site)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "cu130-sm90/simple" in result.output
    for key, count in (("cu130-sm80", 1), ("cu130-sm90", 1), ("cu130-sm120", 1), ("", 4)):
        root = site / key / "simple" if key else site / "simple"
        assert [p for p, _ in links(root / "index.html")] == [(root / "prebuild").resolve()]
        found = links(root / "prebuild" / "index.html")
        assert len(found) == count
        for path, fragment in found:
            assert path.parent == (site / "wheels").resolve() and path.is_file()
            assert fragment == "sha256=" + hashlib.sha256(path.read_bytes()).hexdigest()
            if key:
                assert "+" + key.replace("-", ".") in path.name
    data = json.loads((site / "index.json").read_text())
    assert set(data["indexes"]) == {"cu130-sm80", "cu130-sm90", "cu130-sm120"}
    assert data["indexes"]["cu130-sm120"]["wheels"][0]["ptx_archs"] == ["compute_120"]
    assert "cu130-sm90/simple/" in (site / "index.html").read_text()


def test_rerun_replaces_the_site_whole(tmp_path):
    dist = tmp_path / "dist"
    old = fake_wheel(dist, "0.1.0+cu130.sm80")
    site = tmp_path / "site"
    build_index(dist, site)
    old.unlink()
    fake_wheel(dist, "0.1.0+cu130.sm90")
    build_index(dist, site)
    assert not (site / "cu130-sm80").exists()
    assert [p.name for p in (site / "wheels").iterdir()] == [
        f"prebuild-0.1.0+cu130.sm90-{TAGS}.whl"
    ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_refuses_bad_input_with_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    cases = [
        (["index", str(tmp_path / "nope"), "--out", str(tmp_path / "s")], "is not a directory"),
        (["index", str(tmp_path / "empty"), "--out", str(tmp_path / "s")], "no wheels"),
    ]
    dist = tmp_path / "dist"
    fake_wheel(dist, "0.1.0+cu130.sm80")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    cases.append((["index", str(dist), "--out", str(foreign)], "not an index written by prebuild"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "prebuild-0.1.0-cp310-abi3-linux_x86_64.whl").write_text("not a zip")
    cases.append((["index", str(bad), "--out", str(tmp_path / "s2")], "not a readable wheel"))
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.output.split())
    assert (foreign / "precious.txt").read_text() == "keep me"
    with pytest.raises(SiteError):
        build_index(bad, tmp_path / "s3")


def test_pip_resolves_each_key_index_to_its_own_wheel(tmp_path):
    dist = tmp_path / "dist"
    for label in ("cu130.sm80", "cu130.sm90", "cu128.sm90"):
        fake_wheel(dist, f"0.1.0+{label}")
    site = tmp_path / "site"
    build_index(dist, site)
    for key in ("cu130-sm90", "cu128-sm90", "cu130-sm80"):
        out = tmp_path / f"dl-{key}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--disable-pip-version-check",
                "--index-url",
                f"file://{site}/{key}/simple",
                "--dest",
                str(out),
                "prebuild",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_pip_env(),  # this index only: no machine index or find-links beside it
        )
        assert proc.returncode == 0, proc.stderr
        (got,) = out.glob("*.whl")
        assert f"+{key.replace('-', '.')}-" in got.name


def test_printed_install_command_takes_prebuild_from_the_key_index_and_dependencies_from_the_usual_index(
    tmp_path,
):
    """The site holds only prebuild; the command `prebuild index` prints for each index key
    must still resolve its dependencies (from the index pip uses by default: here a local
    one named by PIP_INDEX_URL)."""
    dist, usual = tmp_path / "dist", tmp_path / "usual"
    for label in ("cu130.sm80", "cu130.sm90"):
        fake_wheel(dist, f"0.1.0+{label}", requires="prebuild-dep-fake>=1")
    build_index(fake_wheel(tmp_path / "dep", "1.0", name="prebuild_dep_fake").parent, usual)
    usual_url = f"{usual.as_uri()}/simple"
    site = tmp_path / "site"
    result = runner.invoke(
        app,
        ["index", str(dist), "--out", str(site)],
        env={"COLUMNS": "80", "PIP_INDEX_URL": usual_url},
    )
    assert result.exit_code == 0, result.output
    commands = [
        line.strip()
        for line in result.output.splitlines()
        if line.strip().startswith("pip install")
    ]
    assert len(commands) == 2, result.output
    for key in ("cu130-sm80", "cu130-sm90"):
        (command,) = [c for c in commands if f"/{key}/simple " in c]
        assert (
            command
            == f"pip install prebuild --index-url {site.as_uri()}/{key}/simple --extra-index-url {usual_url}"
        )
        report = tmp_path / f"{key}.json"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                *command.split()[:2],
                "--dry-run",
                "--quiet",
                "--ignore-installed",
                "--disable-pip-version-check",
                "--report",
                str(report),
                *command.split()[2:],
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_pip_env({"PATH": "/usr/bin:/bin"}),  # the printed indexes only
        )
        assert proc.returncode == 0, proc.stderr
        resolved = {
            i["metadata"]["name"]: i["metadata"]["version"]
            for i in json.loads(report.read_text())["install"]
        }
        assert resolved == {
            "prebuild": f"0.1.0+{key.replace('-', '.')}",
            "prebuild_dep_fake": "1.0",
        }, resolved


def test_usual_index_is_pip_index_url_else_pips_default():
    from prebuild.tool.index import usual_index_url

    assert (
        usual_index_url({"PIP_INDEX_URL": "https://mirror.example/simple"})
        == "https://mirror.example/simple"
    )
    # pip's own default, asked in a process of its own: pip imported here would make the
    # setuptools that later tests import fail its distutils check
    pips_default = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pip._internal.models.index import PyPI; print(PyPI.simple_url)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert usual_index_url({}) == pips_default
    # and prebuild index itself imports no pip
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from prebuild.tool.cli import index; from prebuild.tool.index import "
            "usual_index_url; usual_index_url(); print('pip' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert imported == "False"
    with pytest.raises(TypeError, match="mapping"):
        usual_index_url("PIP_INDEX_URL=x")  # type: ignore[arg-type]


def test_classic_wheels_get_one_index_per_torch_and_arch(tmp_path):
    dist = tmp_path / "dist"
    for label in ("pt214.cu130.sm80", "pt214.cu130.sm90", "pt213.cu130.sm90"):
        fake_wheel(dist, f"1.0.0+{label}", name="fused_ssim")
    indexes = build_index(dist, tmp_path / "site")
    assert sorted(k for k in indexes if k) == [
        "pt213-cu130-sm90",
        "pt214-cu130-sm80",
        "pt214-cu130-sm90",
    ]
    data = json.loads((tmp_path / "site" / "index.json").read_text())
    assert data["indexes"]["pt214-cu130-sm90"]["torch_tag"] == "pt214"
    assert (
        tmp_path / "site" / "pt214-cu130-sm90" / "simple" / "fused-ssim" / "index.html"
    ).is_file()
    # The command printed per index key names the project that index holds.
    result = runner.invoke(
        app,
        ["index", str(dist), "--out", str(tmp_path / "site")],
        env={"COLUMNS": "80", "PIP_INDEX_URL": "https://usual/simple"},
    )
    assert result.exit_code == 0, result.output
    commands = [
        line.strip()
        for line in result.output.splitlines()
        if line.strip().startswith("pip install")
    ]
    assert len(commands) == 3 and all(
        c.startswith("pip install fused-ssim --index-url ") for c in commands
    ), commands


def test_a_host_wheel_is_listed_in_every_index_of_its_torch(tmp_path):
    """A wheel with no GPU code (+pt214.cu130.host) serves every GPU: whoever installs from the
    index of their GPU and torch finds it there, and in an index of its own."""
    dist = tmp_path / "dist"
    for label in ("pt214.cu130.sm80", "pt214.cu130.sm90", "pt213.cu130.sm90"):
        fake_wheel(dist, f"1.0.0+{label}", name="fused_ssim")
    fake_wheel(dist, "0.0.10+pt214.cu130.host", name="tms")
    fake_wheel(dist, "0.0.5+pt214.cpu", name="tss")
    indexes = build_index(dist, tmp_path / "site")
    listed = {key: sorted(w.filename.split("-")[0] for w in ws) for key, ws in indexes.items()}
    assert listed == {
        ALL: ["fused_ssim", "fused_ssim", "fused_ssim", "tms", "tss"],
        "pt213-cu130-sm90": ["fused_ssim"],
        "pt214-cpu": ["tss"],
        "pt214-cu130-host": ["tms", "tss"],
        "pt214-cu130-sm80": ["fused_ssim", "tms", "tss"],
        "pt214-cu130-sm90": ["fused_ssim", "tms", "tss"],
    }
    page = tmp_path / "site" / "pt214-cu130-sm90" / "simple" / "tms" / "index.html"
    assert "tms-0.0.10+pt214.cu130.host" in unquote(page.read_text())
    data = json.loads((tmp_path / "site" / "index.json").read_text())
    assert data["indexes"]["pt214-cu130-host"]["sass_archs"] == []
    assert data["indexes"]["pt214-cpu"]["cuda_tag"] == "cpu"


def test_the_uv_command_searches_the_site_before_the_usual_index():
    """uv searches --extra-index-url before --index-url and stops at the first index holding a
    project: with the site as --index-url, gsplat would come from PyPI (checked by hand with a
    stand-in index holding gsplat 1.5.3). The site goes in --index, searched before the default."""
    from prebuild.tool.index import variant_commands

    uv, pip = variant_commands("https://x.example/site", "gsplat", "https://pypi.org/simple")
    assert uv == (
        "uv pip install --preview-features wheel-variants gsplat "
        "--index https://x.example/site/simple --default-index https://pypi.org/simple"
    )
    # pip has no order: it takes the highest version, and the site's local label is higher
    assert pip == (
        "pip install gsplat --index-url https://x.example/site/simple "
        "--extra-index-url https://pypi.org/simple"
    )
