"""`prebuild selftest`, run in-process against the installed development package (prebuild
itself, its manifest naming prebuild.ops.selftest:cases) and a made-up installed native
project: the no-GPU line, one passing row per case, --json, and every way a row fails (a
wrong reference, a case or a hook that raises, a hook that cannot be imported, outputs that
are not repeatable or not finite) with exit code 1 and no traceback."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import prebuild.ops.selftest as own_cases
from prebuild.runtime.manifest import Library, Manifest
from prebuild.runtime.selftest import SelftestCase
from prebuild.tool import selftest as tool
from prebuild.tool.cli import app
from prebuild.tool.selftest import (
    FAIL,
    NONE,
    PASS,
    KernelPackage,
    SelftestError,
    run_case,
    select_packages,
)

ROOT = Path(__file__).resolve().parents[2]
HOOK = "prebuild.ops.selftest:cases"
runner = CliRunner()

if torch.version.cuda is None:
    NO_GPU_LINE = f"No GPU checked: torch {torch.__version__} is a CPU build, so only the CPU kernels are checked."
else:
    NO_GPU_LINE = (
        f"No GPU visible to torch {torch.__version__} (CUDA {torch.version.cuda}), so only the CPU "
        "kernels are checked."
    )
no_gpu = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the machine without a GPU; one is visible"
)


def selftest(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["selftest", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def selftest_json(*args: str) -> tuple[int, dict]:
    code, output = selftest(*args, "--json")
    return code, json.loads(output)


def flat(text: str) -> str:
    return " ".join(text.split())


# --- prebuild's own cases -----------------------------------------------------------------------


@no_gpu
def test_prebuilds_own_cases_pass_on_the_cpu():
    code, data = selftest_json("prebuild")
    assert code == 0, data
    assert data["ok"] and data["devices"] == ["cpu"] and data["note"] == NO_GPU_LINE
    expected = own_cases.cases()
    assert [(r["package"], r["device"], r["op"], r["status"]) for r in data["rows"]] == [
        ("prebuild", "cpu", c.op, PASS) for c in expected
    ]
    for row, case in zip(data["rows"], expected):
        if case.reference is not None:  # the plain-PyTorch reference, within the case's tolerance
            assert (
                row["against"] == "reference" and 0 < row["max_error"] <= case.atol + case.rtol
            ), row
        else:  # two runs, the same bits
            assert row["against"] == "repeat" and row["max_error"] == 0.0, row
        assert 0 < row["seconds"] < 5 and row["detail"] == "", row
    assert {r["op"].split("(")[0] for r in data["rows"]} == {
        "fused_ssim",
        "quat_scale_to_covar_preci",
        "spherical_harmonics",
        "rasterization",
    }


@no_gpu
def test_the_table_says_there_is_no_gpu_and_shows_a_row_per_case():
    code, output = selftest()  # every package: prebuild is the one installed here
    assert code == 0, output
    assert NO_GPU_LINE in flat(output)
    n = len(own_cases.cases())
    assert len(re.findall(r"│ pass │", output)) == n, output
    assert f"{n} passed, 0 failed" in output and "Traceback" not in output


def test_the_installed_package_names_its_hook_in_its_manifest():
    (own,) = [p for p in tool.installed_kernel_packages() if p.name == "prebuild"]
    assert (own.package, own.hook, own.problem) == ("prebuild", HOOK, ""), (
        "the development install's manifest names no selftest hook: run scripts/bootstrap.sh"
    )


# --- failures -----------------------------------------------------------------------------------


def test_a_wrong_reference_fails_its_row_and_the_exit_code(monkeypatch):
    real_cases = own_cases.cases

    def cases():
        real = real_cases()
        covariance = next(c for c in real if c.op == "quat_scale_to_covar_preci")
        wrong = dataclasses.replace(
            covariance,
            reference=lambda d: {k: v * 1.01 for k, v in covariance.reference(d).items()},
        )
        return [wrong if c is covariance else c for c in real]

    monkeypatch.setattr(own_cases, "cases", cases)
    code, data = selftest_json("prebuild")
    assert code == 1 and not data["ok"]
    statuses = {r["op"]: r["status"] for r in data["rows"] if r["device"] == "cpu"}
    assert statuses.pop("quat_scale_to_covar_preci") == FAIL and set(statuses.values()) == {PASS}
    (row,) = [r for r in data["rows"] if r["status"] == FAIL]
    assert (
        row["max_error"] > 1e-3
        and "covars: " in row["detail"]
        and "off by more than atol 0.0001" in row["detail"]
    )
    code, output = selftest("prebuild")
    assert code == 1 and "FAIL" in output and "1 failed" in output and "Traceback" not in output


def test_a_hook_that_raises_is_one_failed_row(monkeypatch):
    def cases():
        raise RuntimeError("the cases could not be built\non this machine")

    monkeypatch.setattr(own_cases, "cases", cases)
    code, data = selftest_json("prebuild")
    assert code == 1
    assert [(r["op"], r["status"], r["detail"]) for r in data["rows"]] == [
        (
            HOOK,
            FAIL,
            f"selftest hook {HOOK} failed: RuntimeError: the cases could not be built on this machine",
        )
    ]
    code, output = selftest("prebuild")
    assert code == 1 and "Traceback" not in output


@pytest.mark.parametrize(
    "hook, message",
    [
        (
            "prebuild.no_such_module:cases",
            "cannot import prebuild.no_such_module (selftest hook "
            "prebuild.no_such_module:cases): ModuleNotFoundError: No module named",
        ),
        ("prebuild.ops.selftest:no_cases", "prebuild.ops.selftest has no function no_cases"),
        (
            "prebuild.ops.selftest:SSIM_SHAPE",
            "prebuild.ops.selftest has no function SSIM_SHAPE",
        ),  # not callable
    ],
)
def test_a_hook_that_cannot_be_loaded_is_one_failed_row(monkeypatch, hook, message):
    monkeypatch.setattr(
        tool,
        "installed_kernel_packages",
        lambda: [KernelPackage("prebuild", "0.1.0", "prebuild", hook)],
    )
    code, data = selftest_json()
    assert code == 1
    ((row),) = data["rows"]
    assert (row["op"], row["status"], row["device"]) == (hook, FAIL, "-") and message in row[
        "detail"
    ], row


def constant(value: float):
    return lambda device: {"y": torch.full((4,), value, device=device)}


def test_a_case_that_raises_or_returns_bad_outputs_fails_and_the_others_still_run(monkeypatch):
    def raises(device):
        raise ValueError("scale_add: x must be float32, got torch.float64")

    runs = iter(range(100))

    def cases():
        return [
            SelftestCase("raises", raises, atol=0, rtol=0),
            SelftestCase("not a dict", lambda d: [torch.ones(1)], atol=0, rtol=0),
            SelftestCase(
                "differs each run",
                lambda d: {"y": torch.full((2,), float(next(runs)))},
                atol=0,
                rtol=0,
            ),
            SelftestCase("not finite", constant(math.nan), atol=1, rtol=1),
            SelftestCase("reference raises", constant(1.0), reference=raises, atol=0, rtol=0),
            SelftestCase(
                "fine", constant(1.0), reference=constant(1.0 + 2**-20), atol=1e-6, rtol=0
            ),
        ]

    monkeypatch.setattr(own_cases, "cases", cases)
    code, data = selftest_json("prebuild")
    assert code == 1
    rows = {r["op"]: r for r in data["rows"]}
    assert {op: r["status"] for op, r in rows.items()} == {
        "raises": FAIL,
        "not a dict": FAIL,
        "differs each run": FAIL,
        "not finite": FAIL,
        "reference raises": FAIL,
        "fine": PASS,
    }
    assert rows["raises"]["detail"] == "ValueError: scale_add: x must be float32, got torch.float64"
    assert (
        rows["not a dict"]["detail"]
        == "TypeError: not a dict on cpu must return a dict of named tensors, got list"
    )
    assert rows["differs each run"]["detail"].startswith(
        "two runs differ or are not finite: y: 2 of 2 value(s) off"
    )
    assert rows["differs each run"]["max_error"] == 1.0
    assert (
        rows["not finite"]["detail"]
        == "two runs differ or are not finite: y: 4 non-finite value(s) of 4"
    )
    assert rows["not finite"]["max_error"] is None  # inf has no JSON spelling
    assert rows["reference raises"]["detail"].startswith("ValueError: ")
    assert rows["fine"]["against"] == "reference" and rows["fine"]["max_error"] == 2**-20


def test_packages_without_cases_classic_builds_and_damaged_installs_are_rows(monkeypatch):
    packages = [
        KernelPackage("plain-kernels", "1.0+cpu", "plain_kernels", None),
        KernelPackage("fused-ssim", "1.0+pt213.cu130.sm90", "", None, classic=True),
        KernelPackage(
            "broken-kernels",
            "2.0+cpu",
            "broken_kernels",
            "broken_kernels.checks:cases",
            "_C.abi3.so: listed in the manifest but missing",
        ),
    ]
    monkeypatch.setattr(tool, "installed_kernel_packages", lambda: packages)
    code, data = selftest_json("plain-kernels", "fused_ssim")
    assert code == 0, data
    assert [(r["package"], r["status"]) for r in data["rows"]] == [
        ("plain-kernels", NONE),
        ("fused-ssim", NONE),
    ]
    assert "declares no selftest cases ([tool.prebuild] selftest" in data["rows"][0]["detail"]
    assert "a classic (torch/extension.h) build" in data["rows"][1]["detail"]
    code, data = selftest_json("broken_kernels")  # by its import name
    assert code == 1
    assert [(r["package"], r["status"], r["detail"]) for r in data["rows"]] == [
        (
            "broken-kernels",
            FAIL,
            "cannot be checked: _C.abi3.so: listed in the manifest but missing",
        )
    ]
    code, output = selftest("plain-kernels")
    assert code == 0 and "0 passed, 0 failed, 1 package(s) without cases" in output


def test_an_unknown_package_is_refused_naming_the_installed_ones():
    code, output = selftest("no-such-kernels", "prebuild")
    assert code == 2 and "no installed package prebuild built is named no-such-kernels" in flat(
        output
    )
    assert "installed: prebuild" in flat(output) and "Traceback" not in output


def test_select_packages():
    a, b = (
        KernelPackage("My-Kernels", "1", "my_kernels", None),
        KernelPackage("prebuild", "1", "prebuild", HOOK),
    )
    assert select_packages([a, b], []) == [a, b]
    assert select_packages([a, b], ["prebuild", "my.kernels", "my_kernels"]) == [
        b,
        a,
    ]  # names canonicalised, once each
    with pytest.raises(SelftestError, match="named x, y; installed: My-Kernels, prebuild"):
        select_packages([a, b], ["x", "prebuild", "y"])
    with pytest.raises(TypeError, match="list of names"):
        select_packages([a], "prebuild")  # type: ignore[arg-type]


def test_a_gpu_row_without_a_cpu_result_fails_without_running_the_case():
    def run(device):
        raise AssertionError("not to be run")

    row, outputs = run_case(
        "p", SelftestCase("op", run, atol=0, rtol=0), torch.device("cuda", 0), None
    )
    assert (row.status, row.device, row.detail, outputs) == (
        FAIL,
        "cuda:0",
        "its CPU run failed: nothing to compare with",
        None,
    )
    with pytest.raises(TypeError, match="takes a torch.device"):
        run_case("p", SelftestCase("op", run, atol=0, rtol=0), "cpu")  # type: ignore[arg-type]


# --- an installed native project ----------------------------------------------------------------

CHECKS = """
import torch

from selftest_demo._prebuild_runtime.selftest import SelftestCase


def run(device):
    x = torch.arange(6.0, device=device).requires_grad_()
    y = (x * x).sum()
    y.backward()
    return {"y": y.detach(), "grad_x": x.grad}


def cases():
    expected = lambda d: {"y": torch.tensor(55.0), "grad_x": 2 * torch.arange(6.0)}
    return [SelftestCase("square_sum", run, reference=expected, atol=0, rtol=0)]
"""


def test_an_installed_native_project_is_found_and_its_cases_built_with_its_own_runtime_copy_run(
    tmp_path, monkeypatch
):
    """A made-up installed native project (prebuild's CPU library under another package name,
    the runtime copied in as a build does, its hook recorded in its manifest), found through
    its files (RECORD) as `prebuild doctor` finds it."""
    from prebuild.tool.builder.setuptools_ext import vendor_runtime

    site = tmp_path / "site"
    package = site / "selftest_demo"
    package.mkdir(parents=True)
    data = (ROOT / "src" / "prebuild" / "_C.abi3.so").read_bytes()
    (package / "_C.abi3.so").write_bytes(data)
    (package / "__init__.py").write_text("")
    (package / "checks.py").write_text(CHECKS)
    vendor_runtime(package)
    Manifest(
        package_version="0.3.0+cpu",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=None,
        package="selftest_demo",
        op_namespace="selftest_demo",
        selftest="selftest_demo.checks:cases",
        libraries=(Library("_C.abi3.so", "cpu", hashlib.sha256(data).hexdigest(), len(data)),),
    ).write(package)
    info = site / "selftest_demo-0.3.0+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: selftest-demo\nVersion: 0.3.0+cpu\n"
    )
    files = [p.relative_to(site) for p in package.rglob("*") if p.is_file()]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files) + f"{info.name}/RECORD,,\n")
    monkeypatch.syspath_prepend(str(site))
    try:
        (found,) = [p for p in tool.installed_kernel_packages() if p.name == "selftest-demo"]
        assert (found.package, found.hook, found.problem) == (
            "selftest_demo",
            "selftest_demo.checks:cases",
            "",
        )
        code, result = selftest_json("selftest-demo")
        assert code == 0, result
        assert [
            (r["package"], r["device"], r["op"], r["status"], r["against"], r["max_error"])
            for r in result["rows"]
        ] == [("selftest-demo", "cpu", "square_sum", PASS, "reference", 0.0)]
        (package / "checks.py").write_text(
            CHECKS.replace("torch.tensor(55.0)", "torch.tensor(55.0) + 1")
        )
        del sys.modules["selftest_demo.checks"]
        code, result = selftest_json("selftest-demo")
        assert (
            code == 1
            and result["rows"][0]["detail"]
            == "y: 1 of 1 value(s) off by more than atol 0 + rtol 0 * |expected|"
        )
    finally:
        for name in [m for m in sys.modules if m.startswith("selftest_demo")]:
            del sys.modules[name]
