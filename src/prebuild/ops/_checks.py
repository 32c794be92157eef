"""Every input check the ops share: the one home of Python input validation.

- The public wrappers' checks (``check_tensor``, ``check_float_input``, ``check_int``,
  ``check_real``, ``check_bool``, ``shape_error``) raise TypeError or ValueError naming the
  op and the argument.
- The fake (meta) kernels' checks (``check_same_devices``, ``check_dtype``,
  ``check_float32``): the fake kernels are also the Meta kernels, picked whenever an argument
  is on "meta", so they must refuse what the real kernels refuse; ``torch._check`` keeps them
  traceable under ``torch.compile``.
- ``tile_grid`` and ``TILE_GRID_MISMATCH``: the tile grid of the rasterization ops, checked by
  the wrapper, the fake kernel and the C++ host code alike.
"""

from __future__ import annotations

import math
import numbers

import torch

_DEVICE_TYPES = ("cpu", "cuda", "meta")
TILE_GRID_MISMATCH = "tile_size does not match the tile grid of isect_offsets"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_tensor(op: str, name: str, t: object, dtype: torch.dtype | None = None) -> torch.Tensor:
    """TypeError unless ``t`` is a tensor (of ``dtype`` when given), ValueError unless it is
    on the CPU, CUDA or meta."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in _DEVICE_TYPES:
        raise ValueError(f"{op}: {name} is on {t.device}; only CPU and CUDA are supported")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{op}: {name} must be {_dtype_name(dtype)}, got {t.dtype}")
    return t


def check_int(op: str, name: str, value: object, minimum: int = 1) -> int:
    """TypeError unless an int (not a bool), ValueError below ``minimum`` (1: "positive",
    0: "non-negative")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__}")
    if value < minimum:
        kind = "positive" if minimum == 1 else "non-negative" if minimum == 0 else f">= {minimum}"
        raise ValueError(f"{op}: {name} must be {kind}, got {value}")
    return int(value)


def check_real(op: str, name: str, value: object) -> float:
    """TypeError unless a real number (not a bool), ValueError for NaN."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {name} must be a float, got {type(value).__name__}")
    if math.isnan(value):
        raise ValueError(f"{op}: {name} is NaN")
    return float(value)


def check_bool(op: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool, got {type(value).__name__}")
    return value


def shape_error(op: str, name: str, expected: str, t: torch.Tensor) -> ValueError:
    return ValueError(f"{op}: {name} must have shape {expected}, got {tuple(t.shape)}")


def tile_grid(n_images: int, height: int, width: int, tile_size: int) -> tuple[int, int, int]:
    """The shape of ``isect_offsets``: ``(I, ceil(H / tile_size), ceil(W / tile_size))``."""
    return (n_images, -(-height // tile_size), -(-width // tile_size))


def check_same_devices(op: str, **tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors.values()}
    torch._check(
        len(devices) == 1,
        lambda: (
            f"{op}: {', '.join(tensors)} must be on the same device, got "
            + ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
        ),
    )


def check_dtype(op: str, dtype: torch.dtype, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        torch._check(
            t.dtype == dtype,
            lambda name=name, t=t: f"{op}: {name} must be {_dtype_name(dtype)}, got {t.dtype}",
        )


def check_float32(op: str, **tensors: torch.Tensor) -> None:
    check_dtype(op, torch.float32, **tensors)


def check_float_input(op: str, name: str, t: object) -> torch.Tensor:
    """A tensor argument of any floating-point dtype (float32 is the compute type; the caller
    converts the others): TypeError otherwise, ValueError unless on the CPU, CUDA or meta."""
    t = check_tensor(op, name, t)
    if not t.dtype.is_floating_point:
        raise TypeError(
            f"{op}: {name} has dtype {t.dtype}; it must be floating point "
            "(float32 is the compute type; float16, bfloat16 and float64 are converted)"
        )
    return t
