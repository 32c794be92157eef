"""prebuild.runtime.selftest: the case type, the comparison that decides a self-test row
(pure: tensors in, verdicts out, no hardware), cases built with the copy of the runtime a
native project's wheel carries, and the manifest's ``selftest`` hook written and read back."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import sys

import pytest
import torch

from prebuild.runtime.manifest import Library, Manifest, ManifestError, split_hook
from prebuild.runtime.selftest import (
    OutputCheck,
    SelftestCase,
    as_case,
    as_cases,
    check_outputs,
    compare_output,
    compare_outputs,
    max_abs_error,
    row_verdict,
)


def outputs(device: torch.device) -> dict[str, torch.Tensor]:
    return {"y": torch.ones(3, device=device)}


def case(**overrides) -> SelftestCase:
    fields = dict(reference=outputs, atol=1e-6, rtol=1e-5) | overrides
    return SelftestCase(fields.pop("op", "op"), fields.pop("run", outputs), **fields)


# --- the case type ------------------------------------------------------------------------------


def test_a_case_holds_what_it_was_given_and_is_frozen():
    c = case()
    assert (c.op, c.run, c.reference, c.atol, c.rtol) == ("op", outputs, outputs, 1e-6, 1e-5)
    assert SelftestCase("no reference", outputs, atol=0, rtol=0).reference is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.atol = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        SelftestCase("op", outputs, None, 1e-6, 1e-5)  # type: ignore[misc] - tolerances are keyword-only
    with pytest.raises(TypeError):
        SelftestCase("op", outputs, atol=1e-6)  # type: ignore[call-arg] - no default tolerance


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"op": ""}, ValueError, "op must be a non-empty string"),
        ({"op": 3}, ValueError, "op must be a non-empty string, got 3"),
        ({"run": "outputs"}, TypeError, "run must be callable"),
        ({"reference": 1.0}, TypeError, "reference must be callable or None"),
        ({"atol": -1e-6}, ValueError, "atol must be a finite number >= 0, got -1e-06"),
        ({"rtol": math.nan}, ValueError, "rtol must be a finite number >= 0"),
        ({"atol": math.inf}, ValueError, "atol must be a finite number >= 0"),
        ({"rtol": True}, ValueError, "rtol must be a finite number >= 0, got True"),
        ({"atol": "1e-6"}, ValueError, "atol must be a finite number >= 0"),
    ],
)
def test_a_bad_case_is_refused_naming_the_field(overrides, error, message):
    with pytest.raises(error, match=message):
        case(**overrides)


@dataclasses.dataclass(frozen=True)
class ForeignCase:
    """What a case built with another copy of the runtime looks like to this one."""

    op: str
    run: object
    reference: object = None
    atol: float = 1e-6
    rtol: float = 1e-5


def test_cases_of_another_runtime_copy_are_taken_by_their_fields_and_checked_again():
    taken = as_case(ForeignCase("foreign", outputs))
    assert isinstance(taken, SelftestCase) and (taken.op, taken.run, taken.atol) == (
        "foreign",
        outputs,
        1e-6,
    )
    own = case()
    assert as_case(own) is own
    with pytest.raises(ValueError, match="atol must be a finite number"):
        as_case(ForeignCase("foreign", outputs, atol=-1))
    with pytest.raises(
        TypeError,
        match="must be a SelftestCase, got dict .it has no op, run, reference, atol, rtol",
    ):
        as_case({"op": "x"})


def test_what_a_hook_returns():
    assert [c.op for c in as_cases((case(op="a"), ForeignCase("b", outputs)))] == ["a", "b"]
    with pytest.raises(TypeError, match="must return a list of SelftestCase, got SelftestCase"):
        as_cases(case())
    with pytest.raises(ValueError, match="returned no case"):
        as_cases([])
    with pytest.raises(ValueError, match="several cases named 'a'"):
        as_cases([case(op="a"), case(op="b"), case(op="a")])
    with pytest.raises(TypeError, match="got int"):
        as_cases([case(), 3])


def test_the_copy_a_native_wheel_carries_builds_cases_this_runtime_takes(tmp_path, monkeypatch):
    """The runtime as a build vendors it (``<package>/_prebuild_runtime/``): its selftest
    module imports (relative imports and torch only) and its cases pass ``as_case``."""
    from prebuild.tool.builder.setuptools_ext import VENDORED_RUNTIME, vendor_runtime

    package = tmp_path / "vendored_selftest_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    vendor_runtime(package)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        copy = importlib.import_module(f"vendored_selftest_pkg.{VENDORED_RUNTIME}.selftest")
        foreign = copy.SelftestCase("scale", outputs, reference=outputs, atol=0.5, rtol=0)
        assert type(foreign) is not SelftestCase
        taken = as_case(foreign)
        assert isinstance(taken, SelftestCase) and (taken.op, taken.atol, taken.reference) == (
            "scale",
            0.5,
            outputs,
        )
    finally:
        for name in [m for m in sys.modules if m.startswith("vendored_selftest_pkg")]:
            del sys.modules[name]


# --- outputs and their comparison ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value, error, message",
    [
        ([torch.ones(1)], TypeError, "must return a dict of named tensors, got list"),
        ({}, ValueError, "returned no output"),
        ({1: torch.ones(1)}, TypeError, "output named 1: names must be strings"),
        ({"y": [1.0]}, TypeError, "returned list for 'y', not a tensor"),
        ({"y": torch.ones(2, dtype=torch.complex64)}, TypeError, "complex tensor for 'y'"),
    ],
)
def test_outputs_must_be_named_tensors(value, error, message):
    with pytest.raises(error, match=message):
        check_outputs(value, "run on cpu")
    assert check_outputs({"y": torch.ones(1)}, "run on cpu").keys() == {"y"}


def test_max_abs_error():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert max_abs_error(a, a.double()) == 0.0
    assert max_abs_error(a, torch.tensor([1.0, 2.5, 2.0], dtype=torch.float64)) == 1.0
    assert (
        max_abs_error(torch.tensor([1, 5]), torch.tensor([1, 2])) == 3.0
    )  # integers compare exactly
    assert max_abs_error(torch.empty(0, 3), torch.empty(0, 3)) == 0.0
    assert max_abs_error(torch.tensor([1.0, math.nan]), torch.tensor([1.0, math.nan])) == math.inf
    assert max_abs_error(torch.tensor([math.inf]), torch.tensor([math.inf])) == math.inf
    with pytest.raises(ValueError, match=r"shapes differ, \(3,\) and \(1,\)"):
        max_abs_error(a, torch.ones(1))  # never broadcast
    with pytest.raises(TypeError, match="two tensors, got list and Tensor"):
        max_abs_error([1.0], a)


def test_an_output_passes_within_atol_plus_rtol_times_the_expected_value():
    want = torch.tensor([0.0, 100.0], dtype=torch.float64)
    inside = compare_output(
        "y", want + torch.tensor([0.9e-6, 0.9e-3], dtype=torch.float64), want, 1e-6, 1e-5
    )
    assert inside == OutputCheck("y", True, pytest.approx(0.9e-3))
    # Off by more than atol where the expected value is 0 (rtol gives nothing there).
    near_zero = compare_output(
        "y", want + torch.tensor([2e-6, 0.0], dtype=torch.float64), want, 1e-6, 1e-5
    )
    assert not near_zero.passed and near_zero.max_error == pytest.approx(2e-6)
    assert (
        near_zero.problem == "1 of 2 value(s) off by more than atol 1e-06 + rtol 1e-05 * |expected|"
    )
    exact = compare_output("y", torch.tensor([1.0]), torch.tensor([1.0 + 2**-23]), 0.0, 0.0)
    assert not exact.passed and exact.max_error == 2**-23


def test_non_finite_values_and_other_shapes_fail_whatever_the_tolerance():
    nan_run = compare_output("g", torch.tensor([1.0, math.nan, math.inf]), torch.ones(3), 1e9, 1e9)
    assert (nan_run.passed, nan_run.max_error, nan_run.problem) == (
        False,
        math.inf,
        "2 non-finite value(s) of 3",
    )
    nan_expected = compare_output("g", torch.ones(2), torch.tensor([math.nan, 1.0]), 1e9, 1e9)
    assert not nan_expected.passed and nan_expected.problem == "1 non-finite expected value(s) of 2"
    both_nan = compare_output("g", torch.tensor([math.nan]), torch.tensor([math.nan]), 1e9, 1e9)
    assert not both_nan.passed  # the same NaN twice is no finite output
    shape = compare_output("g", torch.ones(1), torch.ones(3), 1e9, 1e9)
    assert (shape.passed, shape.max_error, shape.problem) == (
        False,
        math.inf,
        "shape (1,), expected (3,)",
    )
    with pytest.raises(ValueError, match="rtol must be a number >= 0"):
        compare_output("g", torch.ones(1), torch.ones(1), 0.0, -1.0)


def test_outputs_are_matched_by_name_and_a_missing_or_extra_one_fails():
    expected = {"b": torch.ones(2), "a": torch.zeros(2)}
    checks = compare_outputs({"a": torch.zeros(2), "b": torch.ones(2)}, expected, 0.0, 0.0)
    assert [(c.name, c.passed) for c in checks] == [
        ("b", True),
        ("a", True),
    ]  # the expected side's order
    checks = compare_outputs({"a": torch.zeros(2), "extra": torch.ones(1)}, expected, 0.0, 0.0)
    assert [(c.name, c.passed, c.problem) for c in checks] == [
        ("b", False, "missing from the run's outputs"),
        ("a", True, ""),
        ("extra", False, "not among the expected outputs"),
    ]
    with pytest.raises(ValueError, match="the expected side returned no output"):
        compare_outputs({"a": torch.zeros(2)}, {}, 0.0, 0.0)


def test_row_verdict():
    assert row_verdict([]) == (True, 0.0, "")
    checks = [
        OutputCheck("a", True, 1e-7),
        OutputCheck("b", False, 0.5, "1 of 4 value(s) off"),
        OutputCheck("c", False, math.inf, "shape (1,), expected (2,)"),
    ]
    assert row_verdict(checks[:1]) == (True, 1e-7, "")
    assert row_verdict(checks) == (
        False,
        math.inf,
        "b: 1 of 4 value(s) off; c: shape (1,), expected (2,)",
    )
    with pytest.raises(TypeError, match="list of OutputCheck"):
        row_verdict([("a", True)])


# --- the hook in the manifest -------------------------------------------------------------------


def manifest(**overrides) -> Manifest:
    fields = dict(
        package_version="0.3.0+cpu",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=None,
        libraries=(Library("_C.abi3.so", "cpu", "a" * 64, 10),),
        package="demo",
        op_namespace="demo",
    )
    return Manifest(**(fields | overrides))


def test_the_selftest_hook_is_written_and_read_back(tmp_path):
    m = manifest(selftest="demo.checks.selftest:cases")
    assert json.loads(m.to_json())["selftest"] == "demo.checks.selftest:cases"
    assert Manifest.from_json(m.to_json()) == m
    assert Manifest.from_json(manifest().to_json()).selftest is None


def test_a_manifest_written_before_hooks_still_reads():
    data = json.loads(manifest().to_json())
    del data["selftest"]
    assert Manifest.from_json(json.dumps(data)) == manifest()


@pytest.mark.parametrize(
    "hook",
    [
        "demo.selftest",
        "demo.selftest:",
        ":cases",
        "demo-x.selftest:cases",
        "demo.selftest:cases()",
        "demo..selftest:cases",
        3,
    ],
)
def test_a_bad_hook_in_a_manifest_is_malformed(hook):
    data = json.loads(manifest().to_json()) | {"selftest": hook}
    with pytest.raises(
        ManifestError, match="malformed.*a selftest hook is 'package.module:function'"
    ):
        Manifest.from_json(json.dumps(data))


def test_split_hook():
    assert split_hook("demo.checks.selftest:cases") == ("demo.checks.selftest", "cases")
    assert split_hook("demo:cases") == ("demo", "cases")
    with pytest.raises(ValueError, match="got 'demo:a:b'"):
        split_hook("demo:a:b")
    with pytest.raises(ValueError, match="got None"):
        split_hook(None)
