"""The GPUs of this machine, asked of NVML (``nvidia-ml-py``) -- never through CUDA.

NVML reads the driver's view of the devices without creating a CUDA context, so ``prebuild
install`` and ``prebuild doctor`` can run anywhere, fork-safe, and do not hold GPU memory.
Without ``nvidia-ml-py`` or without a driver the answer is "no GPU", with the reason.
``CUDA_VISIBLE_DEVICES`` is honoured (indices or ``GPU-`` UUID prefixes), as CUDA would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from prebuild.runtime.nvml import Gpu, filter_visible

__all__ = ["Gpu", "GpuQuery", "TorchInfo", "filter_visible", "query_gpus", "torch_info"]


@dataclass(frozen=True)
class GpuQuery:
    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None  # "580.65.06"
    driver_cuda: str | None = None  # the newest CUDA the driver supports, "13.0"
    note: str = ""  # why there are none, when there are none
    source: str = "nvml"
    listed: bool = True  # False: the GPUs could not be asked for (no nvidia-ml-py, no driver)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "listed": self.listed,
            "driver_version": self.driver_version,
            "driver_cuda": self.driver_cuda,
            "note": self.note,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "capability": f"{g.capability[0]}.{g.capability[1]}",
                    "uuid": g.uuid,
                }
                for g in self.gpus
            ],
        }


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def query_gpus(env: dict[str, str] | None = None) -> GpuQuery:
    """Every visible GPU, its compute capability, and the driver's CUDA version."""
    env = dict(os.environ if env is None else env)
    try:
        import pynvml
    except ImportError:
        return GpuQuery(
            note="nvidia-ml-py is not installed (pip install nvidia-ml-py), so GPUs "
            "cannot be listed without creating a CUDA context",
            source="none",
            listed=False,
        )
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuQuery(
            note=f"NVML is unavailable ({exc}): no NVIDIA driver here", source="nvml", listed=False
        )
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            found.append(
                Gpu(
                    i,
                    _text(pynvml.nvmlDeviceGetName(handle)),
                    (int(major), int(minor)),
                    _text(pynvml.nvmlDeviceGetUUID(handle)),
                )
            )
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError as exc:
        return GpuQuery(note=f"NVML failed: {exc}", listed=False)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    gpus = filter_visible(found, env.get("CUDA_VISIBLE_DEVICES"))
    note = (
        "" if gpus else ("no NVIDIA GPU" if not found else "CUDA_VISIBLE_DEVICES hides every GPU")
    )
    return GpuQuery(gpus, driver, f"{cuda // 1000}.{cuda % 1000 // 10}", note)


@dataclass(frozen=True)
class TorchInfo:
    version: str | None = None
    cuda: str | None = None
    cxx11_abi: bool | None = None
    note: str = ""


def torch_info() -> TorchInfo:
    """torch's version, CUDA and C++ ABI; importing torch creates no CUDA context."""
    try:
        import torch
    except ImportError as exc:
        return TorchInfo(note=f"torch is not importable: {exc}")
    return TorchInfo(torch.__version__, torch.version.cuda, bool(torch.compiled_with_cxx11_abi()))
