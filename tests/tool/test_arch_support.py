"""prebuild.tool.arch_support: the one CUDA x arch table, the CI matrix and the docs' support table
(docs/compatibility.md) from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prebuild.runtime.arch import parse_arch, parse_arch_list
from prebuild.tool.arch_support import (
    ALL_ARCHS,
    CUDA_RELEASES,
    TABLE_END,
    TABLE_START,
    CudaRelease,
    build_matrix,
    classic_matrix,
    page_with_table,
    support_table,
    torch_minor_of,
    torch_tag,
)
from prebuild.tool.builder.flags import DEFAULT_ARCHS
from prebuild.tool.cli import app
from prebuild.tool.index_keys import index_key_name, parse_index_key

SUPPORT_PAGE = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
runner = CliRunner()


def test_docs_support_table_is_the_generated_one():
    text = SUPPORT_PAGE.read_text(encoding="utf-8")
    assert text.count(TABLE_START) == 1 and text.count(TABLE_END) == 1
    assert page_with_table(text) == text, (
        "docs/compatibility.md's support table is stale: regenerate it with "
        'python -c "from pathlib import Path; from prebuild.tool.arch_support import page_with_table; '
        "p = Path('docs/compatibility.md'); p.write_text(page_with_table(p.read_text()))\""
    )


def test_page_with_table_replaces_only_between_the_markers():
    text = f"a\n{TABLE_START}\nold\n{TABLE_END}\nb\n"
    assert page_with_table(text, "NEW\n") == f"a\n{TABLE_START}\nNEW\n{TABLE_END}\nb\n"
    for bad in ("no markers\n", f"{TABLE_END}\n{TABLE_START}\n", f"{TABLE_START} only\n"):
        with pytest.raises(ValueError, match="support-table:start"):
            page_with_table(bad, "NEW\n")


def test_matrix_one_job_per_cuda_and_arch_with_ptx_on_the_newest():
    releases = (
        CudaRelease("12.8", parse_arch_list("sm_80,sm_90")),
        CudaRelease("13.0", parse_arch_list("sm_120")),
    )
    jobs = build_matrix(releases)["include"]
    assert [(j["cuda"], j["arch"], j["ptx"], j["index_key"], j["cuda_tag"]) for j in jobs] == [
        ("12.8", "sm_80", False, "cu128-sm80", "cu128"),
        ("12.8", "sm_90", True, "cu128-sm90", "cu128"),
        ("13.0", "sm_120", True, "cu130-sm120", "cu130"),
    ]


def test_the_real_table_covers_every_default_arch_for_cuda_12_and_13():
    assert {r.version.split(".")[0] for r in CUDA_RELEASES} == {"12", "13"}
    assert parse_arch_list(DEFAULT_ARCHS) == ALL_ARCHS
    jobs = build_matrix()["include"]
    assert len(jobs) == sum(len(r.archs) for r in CUDA_RELEASES)
    assert len({(j["cuda"], j["arch"]) for j in jobs}) == len(jobs)
    assert sum(j["ptx"] for j in jobs) == len(CUDA_RELEASES)


def test_support_table_marks_missing_archs_and_ptx():
    table = support_table(
        (CudaRelease("12.8", parse_arch_list("sm_80")), CudaRelease("13.0", ALL_ARCHS))
    )
    row_75 = next(line for line in table.splitlines() if line.startswith("| `sm_75`"))
    assert row_75.endswith("| - | `cu130-sm75` |")
    assert "`cu128-sm80` + PTX" in table
    assert index_key_name("cu130", (parse_arch("sm_90a"),)) == "cu130-sm90a"


def test_cli_matrix_json_and_markdown():
    result = runner.invoke(app, ["matrix"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == build_matrix()
    assert "\n" not in result.stdout.strip()  # one line for $GITHUB_OUTPUT
    result = runner.invoke(app, ["matrix", "--cuda", "13.0"])
    assert {j["cuda"] for j in json.loads(result.stdout)["include"]} == {"13.0"}
    result = runner.invoke(app, ["matrix", "--markdown"])
    assert result.stdout == support_table()


@pytest.mark.parametrize("bad", ["11.8", "13.0,99.9"])
def test_cli_matrix_unknown_cuda_is_refused(bad):
    result = runner.invoke(app, ["matrix", "--cuda", bad])
    assert result.exit_code == 2
    assert "no CUDA" in result.output and "13.0" in result.output


def test_matrix_for_some_archs_puts_ptx_on_the_newest_of_them():
    jobs = build_matrix(CUDA_RELEASES[-1:], parse_arch_list("sm_90,sm_80"))["include"]
    assert [(j["arch"], j["ptx"]) for j in jobs] == [("sm_80", False), ("sm_90", True)]


def test_classic_matrix_adds_a_torch_axis_and_how_each_job_gets_that_torch():
    releases = (
        CudaRelease("12.8", parse_arch_list("sm_80")),
        CudaRelease("13.0", parse_arch_list("sm_80,sm_90")),
    )
    jobs = classic_matrix(("2.14.1", "2.13", "2.14"), releases)[
        "include"
    ]  # 2.14.1 and 2.14: one torch
    assert [(j["torch"], j["cuda"], j["arch"], j["ptx"], j["index_key"]) for j in jobs] == [
        ("2.14", "12.8", "sm_80", True, "pt214-cu128-sm80"),
        ("2.14", "13.0", "sm_80", False, "pt214-cu130-sm80"),
        ("2.14", "13.0", "sm_90", True, "pt214-cu130-sm90"),
        ("2.13", "12.8", "sm_80", True, "pt213-cu128-sm80"),
        ("2.13", "13.0", "sm_80", False, "pt213-cu130-sm80"),
        ("2.13", "13.0", "sm_90", True, "pt213-cu130-sm90"),
    ]
    assert jobs[2]["torch_tag"] == "pt214"
    assert (
        jobs[2]["torch_install"]
        == "pip install 'torch==2.14.*' --index-url https://download.pytorch.org/whl/cu130"
    )
    # The entry's index key is the one the wheel's label parses to (prebuild index's directories).
    assert parse_index_key("pt214.cu130.sm90").name == jobs[2]["index_key"]
    assert torch_tag("2.14.1+cu130") == "pt214" and torch_minor_of("pt214") == "2.14"
    for bad in ("2", "two"):
        with pytest.raises(ValueError, match="2.14"):
            classic_matrix((bad,), releases)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--torch", "2"], "give torch's minor release too"),
        (["--torch", "abc"], "not a torch version"),
        (["--arch", "sm_61"], "sm_61 is not in the support table"),
        (["--arch", "sm_6"], "sm_6"),
        (["--markdown", "--torch", "2.14"], "takes --cuda only"),
    ],
)
def test_cli_matrix_refuses_bad_torch_and_arch(args, message):
    result = runner.invoke(app, ["matrix", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and message in result.output, result.output


def test_cli_matrix_torch_axis():
    result = runner.invoke(
        app, ["matrix", "--torch", "2.14", "--cuda", "13.0", "--arch", "sm_80,sm_90"]
    )
    assert result.exit_code == 0, result.output
    assert [j["index_key"] for j in json.loads(result.stdout)["include"]] == [
        "pt214-cu130-sm80",
        "pt214-cu130-sm90",
    ]
