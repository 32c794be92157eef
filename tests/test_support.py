"""prebuild.support: the one CUDA x arch table, the CI matrix and README's table from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prebuild.arch import parse_arch, parse_arch_list
from prebuild.build.flags import DEFAULT_ARCHS
from prebuild.cli import app
from prebuild.support import (
    ALL_ARCHS,
    CUDA_RELEASES,
    README_END,
    README_START,
    CudaRelease,
    matrix,
    readme_with_table,
    support_table,
    variant_name,
)

README = Path(__file__).resolve().parents[1] / "README.md"
runner = CliRunner()


def test_readme_support_table_is_the_generated_one():
    text = README.read_text(encoding="utf-8")
    assert text.count(README_START) == 1 and text.count(README_END) == 1
    assert readme_with_table(text) == text, (
        "README's support table is stale: regenerate it with "
        "python -c \"from pathlib import Path; from prebuild.support import readme_with_table; "
        "p = Path('README.md'); p.write_text(readme_with_table(p.read_text()))\""
    )


def test_readme_with_table_replaces_only_between_the_markers():
    text = f"a\n{README_START}\nold\n{README_END}\nb\n"
    assert readme_with_table(text, "NEW\n") == f"a\n{README_START}\nNEW\n{README_END}\nb\n"


def test_matrix_one_job_per_cuda_and_arch_with_ptx_on_the_newest():
    releases = (CudaRelease("12.8", parse_arch_list("sm_80,sm_90")), CudaRelease("13.0", parse_arch_list("sm_120")))
    jobs = matrix(releases)["include"]
    assert [(j["cuda"], j["arch"], j["ptx"], j["variant"], j["cuda_tag"]) for j in jobs] == [
        ("12.8", "sm_80", False, "cu128-sm80", "cu128"),
        ("12.8", "sm_90", True, "cu128-sm90", "cu128"),
        ("13.0", "sm_120", True, "cu130-sm120", "cu130"),
    ]


def test_the_real_table_covers_every_default_arch_for_cuda_12_and_13():
    assert {r.version.split(".")[0] for r in CUDA_RELEASES} == {"12", "13"}
    assert parse_arch_list(DEFAULT_ARCHS) == ALL_ARCHS
    jobs = matrix()["include"]
    assert len(jobs) == sum(len(r.archs) for r in CUDA_RELEASES)
    assert len({(j["cuda"], j["arch"]) for j in jobs}) == len(jobs)
    assert sum(j["ptx"] for j in jobs) == len(CUDA_RELEASES)


def test_support_table_marks_missing_archs_and_ptx():
    table = support_table((CudaRelease("12.8", parse_arch_list("sm_80")), CudaRelease("13.0", ALL_ARCHS)))
    row_75 = next(line for line in table.splitlines() if line.startswith("| `sm_75`"))
    assert row_75.endswith("| - | `cu130-sm75` |")
    assert "`cu128-sm80` + PTX" in table
    assert variant_name("cu130", (parse_arch("sm_90a"),)) == "cu130-sm90a"


def test_cli_matrix_json_and_markdown():
    result = runner.invoke(app, ["matrix"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == matrix()
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
