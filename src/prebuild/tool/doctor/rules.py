"""Pure: ``prebuild doctor``'s verdicts from the facts gathered about this machine, through the
loader's own rules (``prebuild.runtime.compat``): the checks (python, torch, prebuild's install,
the driver, the GPUs, JIT locks, and every other installed project prebuild built) and, for every
op and device, what code runs there. Nothing here reads the machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prebuild.runtime import compat
from prebuild.runtime.arch import CodeKind, arch_for_capability, format_capability, select_code
from prebuild.runtime.c_runtimes import GLIBC, beyond
from prebuild.runtime.manifest import Manifest
from prebuild.tool.builder.config import MIN_TORCH_TARGET
from prebuild.tool.doctor.first_use import CompilesAtFirstUse
from prebuild.tool.doctor.jit_locks import JitLock, clear_command
from prebuild.tool.gpus import GpuQuery, TorchInfo
from prebuild.tool.installed import InstalledProject

OK, WARN, FAIL = "ok", "warn", "fail"
UNKNOWN = "unknown"  # could not be found out here; the fix says how


@dataclass(frozen=True)
class Check:
    area: str
    status: str  # ok, warn or fail
    message: str
    fix: str = ""


@dataclass
class Facts:
    """What ``gather`` found out about this machine and prebuild's install; the rules' input."""

    python: str
    torch: TorchInfo
    package_dir: Path
    manifest: Manifest | None
    install_error: str  # manifest unreadable or libraries damaged; "" when fine
    gpus: GpuQuery
    locks: list[JitLock] = field(default_factory=list)
    load_error: str | None = None  # None: not checked; "": loaded fine
    ops: tuple[str, ...] = ()
    strict: bool = False
    projects: list[InstalledProject] = field(default_factory=list)
    variant: str | None = None  # the PEP 825 variant wheel prebuild was installed from
    # torch's JIT extension directories, each with its network file system type ("" if local)
    extension_dirs: list[tuple[Path, str]] = field(default_factory=list)
    first_use: list[CompilesAtFirstUse] = field(default_factory=list)  # will compile when used
    glibc: str | None = None  # this machine's C library's version ("2.36"), None if not glibc


@dataclass(frozen=True)
class OpVerdict:
    op: str
    device: str
    code: str  # "SASS sm_80", "PTX compute_90 (driver JIT)", "not covered"
    status: str
    reason: str


def _require_facts(facts: object, function: str) -> None:
    if not isinstance(facts, Facts):
        raise TypeError(f"{function} takes the gathered Facts, got {type(facts).__name__}")


def _archs(m: Manifest) -> str:
    return ", ".join([a.sm for a in m.sass_archs] + [a.compute for a in m.ptx_archs]) or "none"


def _cpu_torch_note(facts: Facts) -> str | None:
    """Set when torch is a CPU build but the wheel carries CUDA kernels."""
    m, t = facts.manifest, facts.torch
    if (
        m is None
        or not m.has_cuda
        or t.version is None
        or t.cuda is not None
        or m.cuda_version is None
    ):
        return None
    return compat.cpu_torch_note(t.version, m.cuda_version, _archs(m))


def op_verdicts(facts: Facts) -> list[OpVerdict]:
    """For each op: whether it runs on the CPU, and for each GPU what the driver will run,
    by the loader's own rules."""
    _require_facts(facts, "op_verdicts")
    m = facts.manifest
    if m is None:
        return []
    cpu_fails = bool(facts.install_error or facts.load_error)
    out = [
        OpVerdict(
            op,
            "cpu",
            "CPU kernel",
            FAIL if cpu_fails else OK,
            (facts.install_error or facts.load_error or "") if cpu_fails else "",
        )
        for op in facts.ops
    ]
    cpu_torch = _cpu_torch_note(facts)
    for gpu in facts.gpus.gpus:
        device = f"cuda:{gpu.index} {gpu.name} ({format_capability(gpu.capability)})"
        choice = select_code(gpu.capability, m.sass_archs, m.ptx_archs)
        verdict = compat.device_verdict(m, gpu.index, gpu.name, gpu.capability, facts.strict)
        if choice.kind is CodeKind.SASS:
            code, status, reason = f"SASS {choice.arch.sm}", OK, "machine code for this GPU"  # type: ignore[union-attr]
        elif choice.kind is CodeKind.PTX:
            code = f"PTX {choice.arch.compute} (driver JIT)"  # type: ignore[union-attr]
            status = FAIL if verdict.error else WARN
            reason = str(verdict.error or verdict.warning)
        else:
            code, status, reason = "not covered", FAIL, str(verdict.error)
        if not m.has_cuda:
            code, status, reason = "no CUDA kernels", FAIL, str(compat.no_cuda_kernels_error(m))
        elif cpu_torch:
            status = FAIL
            reason = f"{cpu_torch}. For the GPU: {compat.cuda_torch_command(m.cuda_version or '', m.torch_target)}"
        for op in facts.ops:
            out.append(OpVerdict(op, device, code, status, reason))
    return out


def diagnose(facts: Facts) -> list[Check]:
    """Every check of this machine and of prebuild's install, then each other project's."""
    _require_facts(facts, "diagnose")
    checks = [Check("python", OK, facts.python)]
    t, m, g = facts.torch, facts.manifest, facts.gpus
    if t.version is None:
        checks.append(
            Check(
                "torch",
                FAIL,
                t.note,
                f"pip install 'torch>={m.torch_target if m else MIN_TORCH_TARGET}'",
            )
        )
    else:
        abi = {True: "cxx11 ABI", False: "pre-cxx11 ABI", None: "ABI unknown"}[t.cxx11_abi]
        checks.append(
            Check("torch", OK, f"{t.version}, CUDA {t.cuda or 'none (CPU build)'}, {abi}")
        )
    if m is None:
        checks.append(
            Check(
                "install",
                FAIL,
                f"{facts.package_dir}: {facts.install_error}",
                "pip install --force-reinstall --no-deps <the prebuild .whl>",
            )
        )
    else:
        archs = ", ".join([a.sm for a in m.sass_archs] + [a.compute for a in m.ptx_archs]) or "none"
        checks.append(
            Check(
                "install",
                FAIL if facts.install_error else OK,
                f"prebuild {m.package_version}"
                + (f" (variant {facts.variant})" if facts.variant else "")
                + f" in {facts.package_dir}: CUDA {m.cuda_version or 'none'}, "
                f"archs {archs}, torch target {m.torch_target}"
                + (f"; {facts.install_error}" if facts.install_error else ""),
                "pip install --force-reinstall --no-deps <the prebuild .whl>"
                if facts.install_error
                else "",
            )
        )
        if t.version is not None:
            too_old = compat.torch_version_error(m, t.version)
            if too_old:
                checks.append(
                    Check(
                        "torch vs wheel",
                        FAIL,
                        str(too_old),
                        f"pip install 'torch>={m.torch_target}'",
                    )
                )
            cpu_torch = _cpu_torch_note(facts)
            if cpu_torch and m.cuda_version and not too_old:
                checks.append(
                    Check(
                        "torch vs wheel",
                        WARN,
                        cpu_torch,
                        compat.cuda_torch_command(m.cuda_version, m.torch_target),
                    )
                )
            cuda_error = compat.cuda_major_error(m, t.cuda)
            if cuda_error:
                checks.append(
                    Check("torch vs wheel", FAIL, str(cuda_error), "prebuild install --dry-run")
                )
        if m.cuda_version and g.driver_cuda:
            fits = compat.driver_supports(m.cuda_version, g.driver_cuda)
            checks.append(
                Check(
                    "driver vs wheel",
                    OK if fits else FAIL,
                    f"driver {g.driver_version} supports CUDA {g.driver_cuda}; the wheel is CUDA {m.cuda_version}",
                    ""
                    if fits
                    else f"update the NVIDIA driver to one for CUDA {m.cuda_version}, "
                    "or install a wheel for an older CUDA (prebuild install)",
                )
            )
    if facts.load_error is not None:
        checks.append(
            Check(
                "load",
                FAIL if facts.load_error else OK,
                facts.load_error or "the libraries load (checked in a child process)",
            )
        )
    if g.gpus:
        names = ", ".join(
            f"cuda:{x.index} {x.name} ({format_capability(x.capability)})" for x in g.gpus
        )
        checks.append(Check("gpus", OK, names))
    elif not g.listed:
        fix = (
            "pip install nvidia-ml-py (lists GPUs through the driver, without a CUDA context)"
            if g.source == "none"
            else "on a machine with an NVIDIA GPU, install or repair its driver (nvidia-smi must work); "
            "on a machine without one there is nothing to do"
        )
        checks.append(Check("gpus", UNKNOWN, f"cannot be listed: {g.note}", fix))
    else:
        checks.append(Check("gpus", OK, f"none visible: {g.note}" if g.note else "none visible"))
    stale = [lock for lock in facts.locks if lock.stale]
    if stale:
        checks.append(
            Check(
                "jit locks",
                WARN,
                f"{len(stale)} stale torch JIT lock file(s), held by no process: other packages' "
                "JIT builds will wait on them forever (prebuild never uses them)",
                clear_command(facts.locks),
            )
        )
    elif facts.locks:
        checks.append(
            Check(
                "jit locks",
                OK,
                f"{len(facts.locks)} JIT lock file(s), held by a live or recent build",
            )
        )
    for directory, fstype in facts.extension_dirs:
        if fstype:
            checks.append(
                Check(
                    "jit locks",
                    WARN,
                    f"torch's JIT extensions directory {directory} is on {fstype}, a network "
                    "file system: its lock files do not hold across nodes, so JIT builds of one "
                    "extension on two nodes at once can corrupt each other or wait forever, and "
                    "a lock held on another node cannot be told from a dead one",
                    "give each node its own: export "
                    "TORCH_EXTENSIONS_DIR=/tmp/torch_extensions-$(hostname); better, install "
                    "prebuilt wheels (prebuild wheel), which never compile",
                )
            )
    arch = arch_for_capability(g.gpus[0].capability).sm if g.gpus else "sm_XY"
    for project in facts.first_use:
        checks.append(
            Check(
                f"{project.name} {project.version}",
                WARN,
                f"compiles its CUDA extension when first used ({len(project.sites)} JIT call(s): "
                f"{', '.join(project.sites)}; {project.cuda_sources} CUDA sources): on every "
                "machine and in every fresh environment, racing other processes for the "
                "extensions directory's lock",
                f"prebuild wheel --arch {arch} {project.name}=={project.version} && "
                f"pip install dist/{project.name.replace('-', '_')}-*.whl",
            )
        )
    for project in facts.projects:
        checks.extend(project_checks(project, t, g, facts.glibc))
    return checks


def c_runtime_check(
    area: str, needs: Mapping[str, str], glibc: str | None, rebuild: str
) -> list[Check]:
    """Pure: a FAIL row where a project's libraries need a newer glibc than this machine's
    (built on a newer distribution): the loader would refuse them with "version `GLIBC_2.38'
    not found". The C++ runtime is left to the load check: which libstdc++ loads depends on the
    process (a conda environment's comes first)."""
    need = needs.get(GLIBC)
    if need is None or glibc is None or not beyond({GLIBC: need}, {GLIBC: glibc}):
        return []
    return [
        Check(
            area,
            FAIL,
            f"its libraries need glibc {need} (GLIBC_{need}), and this machine's is {glibc}: "
            f'importing fails with "version `GLIBC_{need}\' not found" (the wheel was built on '
            "a newer distribution)",
            f"build it on this machine, or on one whose glibc is no newer than {glibc} (a "
            f"manylinux_2_28 container, as torch's own wheels are built): {rebuild}",
        )
    ]


def _driver_check(area: str, wheel_cuda: str | None, gpus: GpuQuery) -> list[Check]:
    """A FAIL row when the driver is older than the CUDA the wheel was built with."""
    if (
        not wheel_cuda
        or not gpus.driver_cuda
        or compat.driver_supports(wheel_cuda, gpus.driver_cuda)
    ):
        return []
    return [
        Check(
            area,
            FAIL,
            f"built with CUDA {wheel_cuda}; the driver supports CUDA {gpus.driver_cuda} at most",
            f"update the NVIDIA driver to one for CUDA {wheel_cuda}",
        )
    ]


def project_checks(
    p: InstalledProject, torch: TorchInfo, gpus: GpuQuery, glibc: str | None = None
) -> list[Check]:
    """Pure: whether another project's prebuilt wheel runs here. Its libraries use torch's C++
    ABI, so they need the torch minor release they were built against (using only the stable
    ABI: its target or a newer torch), a CUDA build of it with the same CUDA major, a driver
    for that CUDA, SASS (or PTX) for every GPU, and a glibc no older than they need
    (``glibc``: this machine's)."""
    if not isinstance(p, InstalledProject):
        raise TypeError(f"project_checks takes an InstalledProject, got {type(p).__name__}")
    area = p.name
    reinstall = (
        f"pip install --force-reinstall --no-deps <the {p.name} wheel>, "
        f"or prebuild install {p.name} --from SITE"
    )
    m = p.manifest
    if m is None:
        return [Check(area, FAIL, f"{p.name} {p.version}: {p.problem}", reinstall)]
    if isinstance(m, Manifest):
        return native_checks(p, m, torch, gpus, reinstall, glibc)
    archs = m.holds() or "none"
    checks = [
        Check(
            area,
            FAIL if p.problem else OK,
            f"{p.title}: {m.kind} build for torch {m.torch_needed}"
            + (f" ({m.abi_name}, " if m.abi_name else " (")
            + f"built with {m.torch}), CUDA {m.cuda}, "
            + (archs if m.host_only else f"archs {archs}")
            + (f"; {p.problem}" if p.problem else ""),
            reinstall if p.problem else "",
        )
    ]
    need_archs = (
        ",".join(sorted({arch_for_capability(g.capability).sm for g in gpus.gpus})) or "sm_XX"
    )
    rebuild = f"prebuild wheel --arch {need_archs} {p.name}"
    spec = m.torch_spec
    get_torch = compat.torch_command(m.cuda, spec)
    if torch.version is None:
        checks.append(
            Check(
                area,
                FAIL,
                f"torch is not installed; {p.name} needs torch {m.torch_needed}",
                f"pip install 'torch{spec}'",
            )
        )
        return checks
    if m.stable_abi and not m.torch_fits(torch.version):
        checks.append(
            Check(
                area,
                FAIL,
                f"built for PyTorch's stable ABI of torch {m.torch_target}; torch {torch.version} "
                "predates it, so importing fails (undefined symbol)",
                f"pip install 'torch{spec}', or build it for this torch: {rebuild}",
            )
        )
    elif not m.torch_fits(torch.version):
        checks.append(
            Check(
                area,
                FAIL,
                f"built for torch {m.torch_minor}; torch {torch.version} is installed: its C++ ABI "
                "differs, so importing fails (undefined symbol) or misbehaves",
                f"pip install 'torch=={m.torch_minor}.*', or build it for this torch: {rebuild}",
            )
        )
    elif not m.needs_cuda:
        pass  # CPU code: any build of that torch loads it
    elif torch.cuda is None:
        checks.append(
            Check(
                area,
                FAIL,
                f"torch {torch.version} is a CPU build: {p.name}'s CUDA extension links the CUDA "
                "libraries a CUDA build of torch brings, and cannot load with it",
                get_torch,
            )
        )
    elif not compat.same_cuda_major(m.cuda, torch.cuda):
        checks.append(
            Check(
                area,
                FAIL,
                f"built with CUDA {m.cuda}; torch uses CUDA {torch.cuda} (the majors must match)",
                f"install a torch {m.torch_needed} for CUDA {m.cuda}, or build it with this torch: {rebuild}",
            )
        )
    checks += c_runtime_check(area, p.runtime_needs, glibc, rebuild)
    if not m.needs_cuda:  # CPU code: no CUDA, no driver, no GPU to check
        return checks + _load_check(area, p, rebuild)
    checks += _driver_check(area, m.cuda, gpus)
    for gpu in () if m.host_only else gpus.gpus:
        device = f"cuda:{gpu.index} {gpu.name} ({format_capability(gpu.capability)})"
        choice = select_code(gpu.capability, m.sass_archs, m.ptx_archs)
        if choice.kind is CodeKind.SASS:
            checks.append(Check(area, OK, f"{device}: SASS {choice.arch.sm}"))  # type: ignore[union-attr]
        elif choice.kind is CodeKind.PTX:
            checks.append(
                Check(
                    area,
                    WARN,
                    f"{device}: PTX {choice.arch.compute} only, compiled by the driver's "  # type: ignore[union-attr]
                    "JIT at first use (slow start, cached per user)",
                    f"prebuild install {p.name} --from SITE, or {rebuild}",
                )
            )
        else:
            checks.append(
                Check(
                    area,
                    FAIL,
                    f"{device}: no code for this GPU (the wheel holds {archs}): CUDA "
                    "calls fail with 'no kernel image is available'",
                    f"prebuild install {p.name} --from SITE, or {rebuild}",
                )
            )
    return checks + _load_check(area, p, rebuild)


def _load_check(area: str, p: InstalledProject, rebuild: str) -> list[Check]:
    """Whether the project's modules import (checked in a child process), when it was asked."""
    if p.load_error is None:
        return []
    modules = ", ".join(p.modules)
    return [
        Check(
            area,
            FAIL if p.load_error else OK,
            f"import {modules}: {p.load_error}"
            if p.load_error
            else f"{modules} import (checked in a child process)",
            rebuild if p.load_error else "",
        )
    ]


def native_checks(
    p: InstalledProject,
    m: Manifest,
    torch: TorchInfo,
    gpus: GpuQuery,
    reinstall: str,
    glibc: str | None = None,
) -> list[Check]:
    """Pure: a native project's stable-ABI wheel, by its own loader's rules (torch from the
    target on, the CUDA major, the driver, code per GPU), and the glibc it needs."""
    if not isinstance(p, InstalledProject) or not isinstance(m, Manifest):
        raise TypeError("native_checks takes an InstalledProject and its native Manifest")
    area = p.name
    archs = _archs(m)
    checks = [
        Check(
            area,
            FAIL if p.problem else OK,
            f"{p.title}: native build for torch >= {m.torch_target}, CUDA {m.cuda_version or 'none'}, "
            f"archs {archs}" + (f"; {p.problem}" if p.problem else ""),
            reinstall if p.problem else "",
        )
    ]
    if torch.version is None:
        return checks + [
            Check(
                area,
                FAIL,
                f"torch is not installed; {p.name} needs torch >= {m.torch_target}",
                f"pip install 'torch>={m.torch_target}'",
            )
        ]
    too_old = compat.torch_version_error(m, torch.version)
    if too_old:
        checks.append(Check(area, FAIL, str(too_old), f"pip install 'torch>={m.torch_target}'"))
    elif m.has_cuda and torch.cuda is None and m.cuda_version:
        checks.append(
            Check(
                area,
                WARN,
                compat.cpu_torch_note(torch.version, m.cuda_version, archs),
                compat.cuda_torch_command(m.cuda_version, m.torch_target),
            )
        )
    cuda_error = compat.cuda_major_error(m, torch.cuda)
    if cuda_error:
        checks.append(Check(area, FAIL, str(cuda_error), f"prebuild install {p.name} --from SITE"))
    checks += c_runtime_check(area, p.runtime_needs, glibc, f"prebuild wheel in {p.name}'s source")
    checks += _driver_check(area, m.cuda_version, gpus)
    for gpu in gpus.gpus:
        device = f"cuda:{gpu.index} {gpu.name} ({format_capability(gpu.capability)})"
        if not m.has_cuda:
            checks.append(Check(area, FAIL, f"{device}: {compat.no_cuda_kernels_error(m)}"))
            continue
        verdict = compat.device_verdict(m, gpu.index, gpu.name, gpu.capability, strict=False)
        if verdict.error:
            checks.append(
                Check(area, FAIL, str(verdict.error), f"prebuild install {p.name} --from SITE")
            )
        elif verdict.warning:
            checks.append(Check(area, WARN, verdict.warning))
        else:
            choice = select_code(gpu.capability, m.sass_archs, m.ptx_archs)
            checks.append(Check(area, OK, f"{device}: SASS {choice.arch.sm}"))  # type: ignore[union-attr]
    if p.load_error is not None:
        checks.append(
            Check(
                area,
                FAIL if p.load_error else OK,
                f"loading its libraries: {p.load_error}"
                if p.load_error
                else "its libraries load (its own loader, in a child process)",
            )
        )
    return checks
