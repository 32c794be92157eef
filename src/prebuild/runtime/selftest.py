"""Self-test cases: how a package says which of its ops ``prebuild selftest`` runs, and the
comparison that decides whether a run passed.

A package declares a hook in ``[tool.prebuild] selftest = "package.module:function"``; the
build records it in the package's manifest, and the function returns a list of
``SelftestCase``. ``run(device)`` builds its seeded inputs on that device, calls the op
(forward and, where the op has one, backward) and returns named outputs, gradients
included. ``prebuild selftest`` compares what a run gives with the case's plain-PyTorch
``reference``, with the same case run by the CPU kernels (on a GPU), or with a second run
(on the CPU, when there is no reference).

The comparison functions are pure (tensors in, verdicts out) so they are tested without
hardware. Self-contained like the rest of the runtime (a native project's wheel carries a
copy as ``_prebuild_runtime.selftest``): it needs nothing but torch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass

import torch

Outputs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class SelftestCase:
    """One op checked on one small, seeded input.

    ``run(device)`` and ``reference(device)`` return the same names; an output passes when
    every element satisfies ``|actual - expected| <= atol + rtol * |expected|`` (and both
    are finite). ``atol`` and ``rtol`` are what the op's float32 kernels may differ by:
    from the reference (often float64), and between the CUDA and the CPU kernels.
    """

    op: str  # what the rows show: the op's name, with its settings when a package checks several
    run: Callable[[torch.device], Outputs]
    _: KW_ONLY
    reference: Callable[[torch.device], Outputs] | None = None
    atol: float
    rtol: float

    def __post_init__(self) -> None:
        if not isinstance(self.op, str) or not self.op.strip():
            raise ValueError(f"SelftestCase: op must be a non-empty string, got {self.op!r}")
        if not callable(self.run):
            raise TypeError(
                f"SelftestCase {self.op!r}: run must be callable (device -> outputs), got {self.run!r}"
            )
        if self.reference is not None and not callable(self.reference):
            raise TypeError(
                f"SelftestCase {self.op!r}: reference must be callable or None, got {self.reference!r}"
            )
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Real)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"SelftestCase {self.op!r}: {name} must be a finite number >= 0, got {value!r}"
                )


CASE_FIELDS = ("op", "run", "reference", "atol", "rtol")


def as_case(value: object) -> SelftestCase:
    """``value`` as this module's ``SelftestCase``. A native project's cases are built with
    the copy of this module its wheel carries, a class of the same fields but not this one,
    so they are taken by their fields and validated again; anything else is a TypeError."""
    if isinstance(value, SelftestCase):
        return value
    missing = [name for name in CASE_FIELDS if not hasattr(value, name)]
    if missing:
        raise TypeError(
            f"a self-test case must be a SelftestCase, got {type(value).__name__} "
            f"(it has no {', '.join(missing)})"
        )
    fields = {name: getattr(value, name) for name in CASE_FIELDS}
    return SelftestCase(fields.pop("op"), fields.pop("run"), **fields)


def as_cases(value: object) -> list[SelftestCase]:
    """What a hook returned, as a list of cases: a list (or tuple) of at least one
    SelftestCase with distinct ops; TypeError or ValueError naming what is wrong."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"a selftest hook must return a list of SelftestCase, got {type(value).__name__}"
        )
    if not value:
        raise ValueError("the selftest hook returned no case")
    cases = [as_case(item) for item in value]
    ops = [case.op for case in cases]
    repeated = sorted({op for op in ops if ops.count(op) > 1})
    if repeated:
        raise ValueError(
            f"the selftest hook returned several cases named {', '.join(map(repr, repeated))}: "
            "the rows could not tell them apart"
        )
    return cases


def check_outputs(outputs: object, what: str) -> Outputs:
    """A run's (or a reference's) return value: a non-empty dict of tensors by name. ``what``
    names the function in the error ("run on cuda:0", "reference")."""
    if not isinstance(outputs, Mapping):
        raise TypeError(f"{what} must return a dict of named tensors, got {type(outputs).__name__}")
    if not outputs:
        raise ValueError(f"{what} returned no output")
    for name, tensor in outputs.items():
        if not isinstance(name, str):
            raise TypeError(f"{what} returned an output named {name!r}: names must be strings")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{what} returned {type(tensor).__name__} for {name!r}, not a tensor")
        if tensor.is_complex():
            raise TypeError(
                f"{what} returned a complex tensor for {name!r}: compare its real and imaginary parts"
            )
    return dict(outputs)


def _as_float64(t: torch.Tensor) -> torch.Tensor:
    # float64 on the CPU: exact for every float32, integer (< 2**53) and bool element, so
    # the comparison itself adds no error and works across devices.
    return t.detach().to(device="cpu", dtype=torch.float64)


def max_abs_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest ``|actual - expected|`` over the elements (0.0 for empty tensors); ``inf``
    where either holds a non-finite value. The shapes must be equal: nothing is broadcast."""
    if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
        raise TypeError(
            f"max_abs_error compares two tensors, got {type(actual).__name__} and {type(expected).__name__}"
        )
    if actual.shape != expected.shape:
        raise ValueError(
            f"max_abs_error: shapes differ, {tuple(actual.shape)} and {tuple(expected.shape)}"
        )
    if actual.numel() == 0:
        return 0.0
    a, e = _as_float64(actual), _as_float64(expected)
    if not (torch.isfinite(a).all() and torch.isfinite(e).all()):
        return math.inf
    return float((a - e).abs().max())


@dataclass(frozen=True)
class OutputCheck:
    """The verdict on one named output."""

    name: str
    passed: bool
    max_error: float  # inf when not comparable (non-finite values, shape, missing)
    problem: str = ""  # why it failed; "" when it passed


def compare_output(
    name: str, actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float
) -> OutputCheck:
    """One output against its expected value: passes when the shapes are equal, every value
    of both is finite, and ``|actual - expected| <= atol + rtol * |expected|`` everywhere."""
    for label, tolerance in (("atol", atol), ("rtol", rtol)):
        if (
            isinstance(tolerance, bool)
            or not isinstance(tolerance, numbers.Real)
            or not tolerance >= 0
        ):
            raise ValueError(f"compare_output: {label} must be a number >= 0, got {tolerance!r}")
    if actual.shape != expected.shape:
        return OutputCheck(
            name, False, math.inf, f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
        )
    a, e = _as_float64(actual), _as_float64(expected)
    for label, t in (("", a), ("expected ", e)):
        bad = int((~torch.isfinite(t)).sum())
        if bad:
            return OutputCheck(
                name, False, math.inf, f"{bad} non-finite {label}value(s) of {t.numel()}"
            )
    error = max_abs_error(a, e)
    allowed = atol + rtol * e.abs()
    over = int(((a - e).abs() > allowed).sum())
    if over:
        return OutputCheck(
            name,
            False,
            error,
            f"{over} of {a.numel()} value(s) off by more than "
            f"atol {atol:g} + rtol {rtol:g} * |expected|",
        )
    return OutputCheck(name, True, error)


def compare_outputs(
    actual: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    atol: float,
    rtol: float,
) -> list[OutputCheck]:
    """Every output of ``expected`` against ``actual``'s of the same name, in ``expected``'s
    order; an output only one of them has fails."""
    actual = check_outputs(actual, "the run")
    expected = check_outputs(expected, "the expected side")
    checks = []
    for name, want in expected.items():
        if name not in actual:
            checks.append(OutputCheck(name, False, math.inf, "missing from the run's outputs"))
        else:
            checks.append(compare_output(name, actual[name], want, atol, rtol))
    checks += [
        OutputCheck(name, False, math.inf, "not among the expected outputs")
        for name in actual
        if name not in expected
    ]
    return checks


def row_verdict(checks: list[OutputCheck]) -> tuple[bool, float, str]:
    """One row's verdict from its outputs' checks: (passed, the largest error, the failing
    outputs with their problems, or ""). The largest error is 0.0 for no checks."""
    if not isinstance(checks, list) or not all(isinstance(c, OutputCheck) for c in checks):
        raise TypeError("row_verdict takes a list of OutputCheck")
    failed = [c for c in checks if not c.passed]
    error = max((c.max_error for c in checks), default=0.0)
    return not failed, error, "; ".join(f"{c.name}: {c.problem}" for c in failed)
