"""Compatibility rules between a built wheel and the running torch and GPU.

Pure functions over versions, capabilities and the manifest; the loader feeds them facts it
reads from torch. Each returns nothing when things fit and an error describing the misfit
otherwise, so tests exercise every rule with made-up values and no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from .arch import Arch, CodeKind, arch_for_capability, format_capability, select_code
from .errors import (
    CudaUnavailableError,
    LibraryLoadError,
    PrebuildError,
    TorchVersionError,
    UnsupportedGPUError,
)
from .manifest import Manifest
from .versions import release


def torch_version_error(manifest: Manifest, torch_version: str) -> PrebuildError | None:
    """The stable ABI loads in every torch >= the target; older ones lack shim symbols."""
    target = release(manifest.torch_target)[:2]
    have = release(torch_version)[:2]
    if not have or have >= target:
        return None
    return TorchVersionError(
        f"this build of {manifest.package} {manifest.package_version} needs torch >= "
        f"{manifest.torch_target} (it uses PyTorch's stable ABI of that version), but torch "
        f"{torch_version} is installed. Upgrade torch: pip install 'torch>={manifest.torch_target}'"
    )


def load_failure_error(
    manifest: Manifest, library: str, torch_version: str, message: str
) -> PrebuildError:
    """Translate the dynamic loader's message (``undefined symbol: aoti_torch_...``)."""
    too_old = torch_version_error(manifest, torch_version)
    if too_old is not None:
        return too_old
    hint = ""
    if "undefined symbol" in message:
        hint = (
            f" The library was built against torch {manifest.built_with_torch}'s stable ABI "
            f"(target {manifest.torch_target}); a symbol it needs is missing from torch "
            f"{torch_version}. Reinstall torch, or a {manifest.package} wheel built for this torch."
        )
    elif "cannot open shared object" in message or "No such file" in message:
        hint = " A library it depends on is missing: is torch installed correctly?"
    else:
        from .c_runtimes import machine_glibc, version_problem

        problem = version_problem(
            message, f"`prebuild wheel` in {manifest.package}'s source", machine_glibc()
        )
        hint = f" The wheel is not for this machine: {problem}" if problem else ""
    return LibraryLoadError(f"cannot load {library}: {message}.{hint}")


def same_cuda_major(wheel_cuda: str, torch_cuda: str) -> bool:
    """CUDA kernels run only with a torch of the same CUDA major as the nvcc that built them."""
    ours, theirs = release(wheel_cuda)[:1], release(torch_cuda)[:1]
    return bool(ours) and ours == theirs


def driver_supports(wheel_cuda: str, driver_cuda: str) -> bool:
    """The wheel links the CUDA runtime statically: the driver (whose CUDA version, e.g.
    NVML's, is the newest it supports) must be of that CUDA major or newer; within a major,
    CUDA's minor-version compatibility lets a 13.2 runtime run on a 13.0 driver."""
    need, have = release(wheel_cuda)[:1], release(driver_cuda)[:1]
    return not need or not have or have >= need


def cuda_major_error(manifest: Manifest, torch_cuda: str | None) -> PrebuildError | None:
    """CUDA kernels run only with a torch of the same CUDA major as the nvcc that built them."""
    if torch_cuda is None or manifest.cuda_version is None:
        return None
    if same_cuda_major(manifest.cuda_version, torch_cuda):
        return None
    ours, theirs = release(manifest.cuda_version)[:1], release(torch_cuda)[:1]
    ours_major = ours[0] if ours else manifest.cuda_version
    theirs_major = theirs[0] if theirs else torch_cuda
    return CudaUnavailableError(
        f"this {manifest.package} wheel's CUDA kernels were built with CUDA {manifest.cuda_version}, but "
        f"torch uses CUDA {torch_cuda}. Install a {manifest.package} wheel built for CUDA {theirs_major} "
        f"(run `prebuild wheel` with a CUDA {theirs_major} nvcc), or a torch built for CUDA "
        f"{ours_major}. CPU ops are unaffected."
    )


def cuda_torch_command(wheel_cuda: str, torch_target: str, same_minor: bool = False) -> str:
    """How to get a torch that runs a CUDA ``wheel_cuda`` wheel: ``torch_command`` for
    ``torch_target`` or newer, or (``same_minor``) exactly that minor release (a classic
    extension's)."""
    return torch_command(wheel_cuda, f"=={torch_target}.*" if same_minor else f">={torch_target}")


def torch_command(wheel_cuda: str, spec: str) -> str:
    """``pip install 'torch<spec>'`` from PyTorch's own index for that CUDA release
    (``.../whl/cu130``), which serves CUDA builds of every torch release; ``spec`` a pip
    specifier (``>=2.10``, ``==2.14.*``, "" for any release: ``ProjectManifest.torch_spec``)."""
    tag = "cu" + "".join(str(n) for n in release(wheel_cuda)[:2])
    return f"pip install 'torch{spec}' --index-url https://download.pytorch.org/whl/{tag}"


def cpu_torch_note(torch_version: str, wheel_cuda: str, archs: str) -> str:
    """Why a CUDA wheel's kernels do not run with a CPU build of torch (the fix:
    ``cuda_torch_command``)."""
    return (
        f"torch {torch_version} is a CPU build: it cannot run the wheel's CUDA kernels ({archs}, "
        f"CUDA {wheel_cuda}); the ops run on the CPU only"
    )


def no_cuda_kernels_error(manifest: Manifest) -> PrebuildError:
    return CudaUnavailableError(
        f"this install of {manifest.package} {manifest.package_version} has no CUDA kernels (it was "
        "built with an empty arch list). Install a CUDA wheel, built with "
        "`prebuild wheel --arch sm_XY` for your GPU; kernels are never compiled at run time."
    )


@dataclass(frozen=True)
class DeviceVerdict:
    """What happens on one GPU: ``error`` to raise, or ``warning`` to show once, or neither."""

    error: PrebuildError | None = None
    warning: str | None = None


def device_verdict(
    manifest: Manifest, index: int, name: str, capability: tuple[int, int], strict: bool
) -> DeviceVerdict:
    """What prebuild's own kind of wheel (a native one) does on GPU ``index``."""
    fix = f"prebuild wheel --arch {arch_for_capability(capability).sm}"
    return gpu_verdict(
        manifest.package,
        manifest.package_version,
        manifest.sass_archs,
        manifest.ptx_archs,
        f"cuda:{index} ({name}, compute capability {format_capability(capability)})",
        capability,
        strict,
        fix,
    )


def gpu_verdict(
    package: str,
    version: str,
    sass: tuple[Arch, ...],
    ptx: tuple[Arch, ...],
    where: str,
    capability: tuple[int, int],
    strict: bool,
    fix: str,
) -> DeviceVerdict:
    """Whether code for ``sass``/``ptx`` runs on the GPU ``where`` of ``capability``: its own
    machine code fits; PTX only is a warning (an error when ``strict``); nothing is an error.
    ``package`` and ``version``: whose code (gsplat, 1.5.3); ``fix``: the command that builds a
    wheel for this GPU."""
    choice = select_code(capability, sass, ptx)
    archs = ", ".join([a.sm for a in sass] + [a.compute for a in ptx])
    what = f"{package} {version}"
    if choice.kind is CodeKind.SASS:
        return DeviceVerdict()
    if choice.kind is CodeKind.PTX:
        text = (
            f"{package} has no machine code for {where}; the driver JIT-compiles the wheel's "
            f"PTX ({choice.arch.compute}) for it instead, which is slower to start. For "
            f"native code, build and install: {fix}"
        )
        if strict:
            return DeviceVerdict(
                error=UnsupportedGPUError(text + " (refused because PREBUILD_STRICT=1)")
            )
        return DeviceVerdict(warning=text)
    return DeviceVerdict(
        error=UnsupportedGPUError(
            f"{what} cannot run on {where}: the wheel holds code for {archs or 'no GPU arch'} "
            f"only. Build and install a wheel for this GPU: {fix}  (then pip install the wheel "
            "it writes to dist/)"
        )
    )
