"""``scale_add(x, y, alpha)``: ``x + alpha * y``, one fused kernel (CPU and CUDA).

The kernel is ``torch.ops.${namespace}.scale_add`` (csrc/scale_add/); its autograd and fake
(meta) kernels are registered here, so it works with ``torch.compile`` and ``opcheck``.
"""

from __future__ import annotations

import numbers

import torch

from ${package}._library import LIBRARY


def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """``x + alpha * y`` for two float32 tensors of the same shape on the same device.

    Non-contiguous inputs are copied; gradients flow to both. Raises ``TypeError`` or
    ``ValueError`` naming the argument for anything else.
    """
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"scale_add: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"scale_add: {name} must be float32, got {t.dtype}")
    if x.shape != y.shape:
        raise ValueError(f"scale_add: x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.device != y.device:
        raise ValueError(f"scale_add: x is on {x.device} but y is on {y.device}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"scale_add: alpha must be a real number, got {type(alpha).__name__}")
    if x.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(x.device)  # a wheel without code for this GPU says which to build
    return torch.ops.${namespace}.scale_add(x.contiguous(), y.contiguous(), float(alpha))


@torch.library.register_fake("${namespace}::scale_add")
def _scale_add_fake(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    torch._check(x.shape == y.shape, lambda: "${namespace}::scale_add: x and y must have the same shape")
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output) -> None:
    ctx.alpha = inputs[2]


def _backward(ctx, grad):
    return grad, grad * ctx.alpha, None


torch.library.register_autograd("${namespace}::scale_add", _backward, setup_context=_setup_context)
