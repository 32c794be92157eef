"""``prebuild selftest``: run each installed kernel package's self-test cases on the CPU and on
every visible GPU, and say which agree.

The packages are the ones ``prebuild doctor`` checks (``prebuild.tool.installed``): prebuild's
own (``installed_package``) and every installed native project (``installed_projects``); each
names its hook in its manifest (``selftest``, from ``[tool.prebuild] selftest``). Each case runs
once as a warm-up and once timed (synchronised on CUDA). The timed run is compared with the
case's reference on the CPU (with a second, identical run when it has none) and with the CPU run
on each GPU, by ``prebuild.runtime.selftest``'s comparison. A hook that cannot be loaded, or a
case that raises, is a failed row carrying the error, never a traceback.
"""

from __future__ import annotations

import importlib
import math
import time
from dataclasses import dataclass

import torch
from packaging.utils import canonicalize_name

from prebuild.runtime.arch import format_capability
from prebuild.runtime.manifest import Manifest, ProjectManifest, split_hook
from prebuild.runtime.selftest import (
    Outputs,
    SelftestCase,
    as_cases,
    check_outputs,
    compare_outputs,
    row_verdict,
)
from prebuild.tool.installed import installed_package, installed_projects

PASS, FAIL, NONE = "pass", "fail", "none"  # NONE: a package that declares no cases
# What a row's outputs were compared with.
REFERENCE, CPU_KERNELS, REPEAT = "reference", "cpu", "repeat"
CPU = torch.device("cpu")


class SelftestError(ValueError):
    """A package named on the command line is not installed, or a hook cannot be used."""


@dataclass(frozen=True)
class KernelPackage:
    """An installed package prebuild built, as far as its self-test is concerned."""

    name: str  # the distribution ("prebuild", "my-kernels")
    version: str
    package: str  # its import package ("my_kernels"); "" when its manifest cannot be read
    hook: str | None  # "package.module:function", None when it declares none
    problem: str = ""  # why its cases cannot run (manifest unreadable, libraries damaged)
    classic: bool = False  # another project's classic build: it has no way to declare cases


@dataclass(frozen=True)
class SelftestRow:
    package: str
    device: str  # "cpu", "cuda:0"; "-" when nothing ran
    op: str  # the case; "-" when nothing ran
    status: str  # PASS, FAIL or NONE
    against: str = ""  # REFERENCE, CPU_KERNELS or REPEAT; "" when nothing was compared
    max_error: float | None = None  # inf when not comparable (non-finite values, shapes)
    seconds: float | None = None  # the timed run
    detail: str = ""  # why it failed, or what it declares

    def to_dict(self) -> dict:
        error = self.max_error if self.max_error is None or math.isfinite(self.max_error) else None
        return {
            "package": self.package,
            "device": self.device,
            "op": self.op,
            "status": self.status,
            "against": self.against,
            "max_error": error,
            "seconds": self.seconds,
            "detail": self.detail,
        }


# --- what is installed ------------------------------------------------------------------------


def installed_kernel_packages() -> list[KernelPackage]:
    """prebuild itself, then every other installed distribution carrying a prebuild manifest
    (``prebuild.tool.installed``, as ``prebuild doctor`` finds them; their libraries checked, not
    loaded)."""
    directory, manifest, problem = installed_package()
    own = KernelPackage(
        "prebuild",
        manifest.package_version if manifest else "?",
        "prebuild",
        manifest.selftest if manifest else None,
        f"{directory}: {problem}" if problem else "",
    )
    found = [own]
    for project in installed_projects():
        m = project.manifest
        if isinstance(m, Manifest):
            found.append(
                KernelPackage(project.name, project.version, m.package, m.selftest, project.problem)
            )
        elif isinstance(m, ProjectManifest):
            found.append(KernelPackage(project.name, project.version, "", None, classic=True))
        else:  # its manifest cannot be read: whatever it is, it cannot be checked
            found.append(KernelPackage(project.name, project.version, "", None, project.problem))
    return found


def select_packages(packages: list[KernelPackage], names: list[str]) -> list[KernelPackage]:
    """The packages ``names`` asks for (distribution or import names, in the order given;
    every one when empty); SelftestError naming the unknown ones and the installed ones."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"select_packages takes a list of names, got {names!r}")
    if not names:
        return list(packages)
    chosen: list[KernelPackage] = []
    unknown = []
    for name in names:
        match = next(
            (
                p
                for p in packages
                if canonicalize_name(p.name) == canonicalize_name(name)
                or (p.package and p.package == name)
            ),
            None,
        )
        if match is None:
            unknown.append(name)
        elif match not in chosen:
            chosen.append(match)
    if unknown:
        raise SelftestError(
            f"no installed package prebuild built is named {', '.join(unknown)}; "
            f"installed: {', '.join(p.name for p in packages)}"
        )
    return chosen


def visible_devices() -> tuple[list[torch.device], str]:
    """The CPU and every CUDA device torch sees; with no GPU, the one line that says why."""
    if torch.version.cuda is None:
        return (
            [CPU],
            f"No GPU checked: torch {torch.__version__} is a CPU build, so only the CPU kernels are checked.",
        )
    count = torch.cuda.device_count()
    if count == 0:
        return [CPU], (
            f"No GPU visible to torch {torch.__version__} (CUDA {torch.version.cuda}), "
            "so only the CPU kernels are checked."
        )
    return [CPU, *(torch.device("cuda", i) for i in range(count))], ""


def describe_device(device: torch.device) -> str:
    """``cuda:0 NVIDIA H100 80GB HBM3 (9.0)`` for a GPU, ``cpu`` for the CPU."""
    if device.type != "cuda":
        return str(device)
    capability = format_capability(torch.cuda.get_device_capability(device))
    return f"{device} {torch.cuda.get_device_name(device)} ({capability})"


# --- running ------------------------------------------------------------------------------------


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def load_cases(hook: str) -> list[SelftestCase]:
    """Import the hook's module, call its function, and check what it returns; SelftestError
    naming the hook and the error for anything that goes wrong on the way."""
    try:
        module_name, function_name = split_hook(hook)
    except ValueError as exc:
        raise SelftestError(str(exc)) from None
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise SelftestError(
            f"cannot import {module_name} (selftest hook {hook}): {_error_text(exc)}"
        ) from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise SelftestError(f"{module_name} has no function {function_name} (selftest hook {hook})")
    try:
        return as_cases(function())
    except Exception as exc:
        raise SelftestError(f"selftest hook {hook} failed: {_error_text(exc)}") from exc


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(
    package: str, case: SelftestCase, device: torch.device, cpu_outputs: Outputs | None = None
) -> tuple[SelftestRow, Outputs | None]:
    """One case on one device: a warm-up run, a timed run, and the comparison (with
    ``cpu_outputs``, the case's outputs on the CPU, on any other device). Returns the row and
    the timed run's outputs (None when a run raised or returned something else)."""
    if not isinstance(case, SelftestCase):
        raise TypeError(f"run_case takes a SelftestCase, got {type(case).__name__}")
    if not isinstance(device, torch.device):
        raise TypeError(f"run_case takes a torch.device, got {device!r}")
    if device.type != "cpu" and cpu_outputs is None:
        return SelftestRow(
            package,
            str(device),
            case.op,
            FAIL,
            detail="its CPU run failed: nothing to compare with",
        ), None
    where = f"{case.op} on {device}"
    outputs = None
    try:
        first = check_outputs(
            case.run(device), where
        )  # the warm-up: loads, allocates, JIT-compiles PTX
        _synchronize(device)
        start = time.perf_counter()
        timed = check_outputs(case.run(device), where)
        _synchronize(device)
        seconds = time.perf_counter() - start
        outputs = timed  # what the GPUs are compared with, even if the reference fails below
        if device.type != "cpu":
            against, atol, rtol = CPU_KERNELS, case.atol, case.rtol
            expected = cpu_outputs
        elif case.reference is not None:
            against, atol, rtol = REFERENCE, case.atol, case.rtol
            expected = check_outputs(case.reference(device), f"the reference of {case.op}")
        else:  # nothing to compare with on the CPU but itself: the same bits, every value finite
            against, atol, rtol = REPEAT, 0.0, 0.0
            expected = first
        passed, error, problems = row_verdict(compare_outputs(timed, expected, atol, rtol))
    except Exception as exc:
        return SelftestRow(package, str(device), case.op, FAIL, detail=_error_text(exc)), outputs
    detail = (
        problems
        if against != REPEAT or not problems
        else f"two runs differ or are not finite: {problems}"
    )
    return SelftestRow(
        package, str(device), case.op, PASS if passed else FAIL, against, error, seconds, detail
    ), outputs


def run_package(package: KernelPackage, devices: list[torch.device]) -> list[SelftestRow]:
    """Every case of ``package`` on every device (the CPU first: the GPUs are compared with
    it), one row each, case by case; one row when it declares none or cannot be checked."""
    if not devices or devices[0] != CPU:
        raise ValueError(f"run_package needs the CPU first among the devices, got {devices!r}")
    if package.classic:
        return [
            SelftestRow(
                package.name,
                "-",
                "-",
                NONE,
                detail="a classic (torch/extension.h) build: only native "
                "projects declare selftest cases ([tool.prebuild] selftest)",
            )
        ]
    if package.problem:
        return [
            SelftestRow(
                package.name, "-", "-", FAIL, detail=f"cannot be checked: {package.problem}"
            )
        ]
    if package.hook is None:
        return [
            SelftestRow(
                package.name,
                "-",
                "-",
                NONE,
                detail="declares no selftest cases ([tool.prebuild] "
                'selftest = "package.module:function" in its pyproject.toml)',
            )
        ]
    try:
        cases = load_cases(package.hook)
    except SelftestError as exc:
        return [SelftestRow(package.name, "-", package.hook, FAIL, detail=str(exc))]
    rows = []
    for case in cases:
        cpu_outputs = None
        for device in devices:
            row, outputs = run_case(package.name, case, device, cpu_outputs)
            if device == CPU:
                cpu_outputs = outputs
            rows.append(row)
    return rows


def selftest_json(rows: list[SelftestRow], devices: list[str], note: str) -> dict:
    """The run as plain JSON data: "ok" (no row failed), torch, the devices, the note and the rows."""
    if not all(isinstance(r, SelftestRow) for r in rows):
        raise TypeError("selftest_json takes a list of SelftestRow")
    return {
        "ok": not any(r.status == FAIL for r in rows),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "devices": devices,
        "note": note,
        "rows": [r.to_dict() for r in rows],
    }
