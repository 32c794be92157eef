"""Checks shared by the ops' fake (meta) kernels.

The fake kernels are also the Meta kernels: the dispatcher picks them whenever an argument
is on "meta", so they must refuse what the real kernels refuse (mixed devices, wrong dtypes,
wrong shapes). ``torch._check`` keeps them traceable under ``torch.compile``.
"""

from __future__ import annotations

import torch


def check_same_devices(op: str, **tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors.values()}
    torch._check(
        len(devices) == 1,
        lambda: f"{op}: {', '.join(tensors)} must be on the same device, got "
        + ", ".join(f"{n} on {t.device}" for n, t in tensors.items()),
    )


def check_dtype(op: str, dtype: torch.dtype, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        torch._check(t.dtype == dtype, lambda: f"{op}: {name} must be {dtype}, got {t.dtype}")


def check_float32(op: str, **tensors: torch.Tensor) -> None:
    check_dtype(op, torch.float32, **tensors)


_INPUT_DEVICE_TYPES = ("cpu", "cuda", "meta")


def check_float_input(op: str, name: str, t: object) -> torch.Tensor:
    """The public wrappers' check of a tensor argument: TypeError unless it is a floating-point
    tensor (float32 is the compute type; other float dtypes are converted by the caller),
    ValueError unless it is on the CPU, CUDA or meta."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise TypeError(
            f"{op}: {name} has dtype {t.dtype}; it must be floating point "
            "(float32 is the compute type; float16, bfloat16 and float64 are converted)"
        )
    if t.device.type not in _INPUT_DEVICE_TYPES:
        raise ValueError(f"{op}: {name} is on {t.device}; only CPU and CUDA are supported")
    return t
