"""The GPUs CUDA will see, asked of the driver's NVML library through ctypes: no CUDA context,
no dependency, fork-safe (NVML is not CUDA: a process that forks afterwards can still start
CUDA). What a wheel's import-time check reads (classic_guard.py) and what ``prebuild install``
and ``doctor`` filter their own NVML answers with (``filter_visible``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

LIBRARY = "libnvidia-ml.so.1"  # the driver's: present wherever an NVIDIA driver is


@dataclass(frozen=True)
class Gpu:
    index: int  # as CUDA will number it (after CUDA_VISIBLE_DEVICES)
    name: str
    capability: tuple[int, int]
    uuid: str = ""


def filter_visible(gpus: list[Gpu], visible: str | None) -> tuple[Gpu, ...]:
    """Pure: apply a ``CUDA_VISIBLE_DEVICES`` value; CUDA stops at the first invalid entry
    and renumbers the devices it keeps from 0."""
    if visible is None:
        return tuple(gpus)
    kept: list[Gpu] = []
    for item in (s.strip() for s in visible.split(",")):
        match = None
        if item.isdigit() or (item.startswith("-") and item[1:].isdigit()):
            match = next((g for g in gpus if g.index == int(item)), None)
        elif item:
            match = next((g for g in gpus if g.uuid and g.uuid.startswith(item)), None)
        if match is None or match in kept:
            break
        kept.append(match)
    return tuple(Gpu(i, g.name, g.capability, g.uuid) for i, g in enumerate(kept))


class NvmlUnavailable(Exception):
    """No NVIDIA driver here (no NVML library), or NVML failed: the GPUs cannot be listed."""


def _call(lib, name: str, *args) -> None:
    status = getattr(lib, name)(*args)
    if status != 0:
        raise NvmlUnavailable(f"{name} returned NVML error {status}")


def all_gpus(library: str = LIBRARY) -> list[Gpu]:
    """Every GPU the driver has (before CUDA_VISIBLE_DEVICES); NvmlUnavailable when there is
    no driver or NVML fails."""
    try:
        lib = ctypes.CDLL(library)
    except OSError as exc:
        raise NvmlUnavailable(f"no NVIDIA driver ({library}: {exc})") from None
    _call(lib, "nvmlInit_v2")
    try:
        count = ctypes.c_uint()
        _call(lib, "nvmlDeviceGetCount_v2", ctypes.byref(count))
        found = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            _call(lib, "nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(handle))
            major, minor = ctypes.c_int(), ctypes.c_int()
            _call(
                lib,
                "nvmlDeviceGetCudaComputeCapability",
                handle,
                ctypes.byref(major),
                ctypes.byref(minor),
            )
            name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            _call(lib, "nvmlDeviceGetName", handle, name, 96)
            _call(lib, "nvmlDeviceGetUUID", handle, uuid, 96)
            found.append(
                Gpu(index, name.value.decode(), (major.value, minor.value), uuid.value.decode())
            )
        return found
    finally:
        lib.nvmlShutdown()


def visible_gpus(environ: dict[str, str], library: str = LIBRARY) -> tuple[Gpu, ...]:
    """The GPUs CUDA will number, as CUDA will number them; NvmlUnavailable as all_gpus."""
    return filter_visible(all_gpus(library), environ.get("CUDA_VISIBLE_DEVICES"))


def any_gpu_visible(environ: dict[str, str], library: str = LIBRARY) -> bool:
    """Whether CUDA would see a GPU: False also where NVML is unavailable (no driver)."""
    try:
        return bool(visible_gpus(environ, library))
    except NvmlUnavailable:
        return False
