"""Fused SSIM: ``fused_ssim(img1, img2, padding="same", train=True)``.

A drop-in for fused-ssim's function of the same name, with gradients for both images.
The kernels are ``torch.ops.prebuild.fused_ssim_forward`` / ``fused_ssim_backward``
(csrc/ssim/); autograd and fake kernels are registered here.
"""

from __future__ import annotations

import warnings

import torch

from prebuild.ops._checks import (
    check_bool,
    check_float32,
    check_float_input,
    check_same_devices,
)
from prebuild.ops._library import LIBRARY, below_autograd, below_autograd_in_backward, namespace
from prebuild.ops._registration import register_ops

_PADDINGS = ("same", "valid")
_WINDOW = 11
_CROP = _WINDOW // 2  # "valid" drops the pixels whose window leaves the image
# Larger derivatives are recomputed in the CPU backward instead of stored: beyond 32 MiB,
# glibc's malloc returns freed blocks to the OS, so each call would fault in (and the kernel
# zero) fresh pages: at 1080p more time than the whole backward (docs/benchmarks-history.md).
_CPU_STORED_DS_MAX_BYTES = 32 << 20


class ChannelsLastWarning(UserWarning):
    """fused_ssim got images that look (B, H, W, C), e.g. ``rasterization``'s [C, H, W, D]
    output passed without ``.permute(0, 3, 1, 2)``. Silence it with
    ``warnings.filterwarnings("ignore", category=prebuild.ops.ssim.ChannelsLastWarning)``."""


def looks_channels_last(shape: tuple[int, ...]) -> bool:
    """A (B, C, H, W) image whose "width" could be a channel count (1-4) while its "channel"
    and "height" dimensions are larger: almost surely (B, H, W, C). A real image of width 4
    or less is too narrow for the 11x11 window to mean much."""
    return len(shape) == 4 and 1 <= shape[3] <= 4 and shape[1] > 4 and shape[2] > 4


def _check_image(name: str, img: object) -> torch.Tensor:
    img = check_float_input("fused_ssim", name, img)
    if img.dim() != 4:
        raise ValueError(
            f"fused_ssim: {name} must be a 4-D (B, C, H, W) tensor, got shape {tuple(img.shape)}"
        )
    return img


def _check_inputs(img1: object, img2: object, padding: object, train: object) -> None:
    a = _check_image("img1", img1)
    b = _check_image("img2", img2)
    if a.shape != b.shape:
        raise ValueError(
            f"fused_ssim: img1 and img2 must have the same shape, got {tuple(a.shape)} "
            f"and {tuple(b.shape)}"
        )
    if a.device != b.device:
        raise ValueError(
            f"fused_ssim: img1 is on {a.device} but img2 is on {b.device}; "
            "move both to the same device"
        )
    if a.numel() == 0:
        raise ValueError(f"fused_ssim: the images are empty (shape {tuple(a.shape)})")
    if padding not in _PADDINGS:
        raise ValueError(f"fused_ssim: padding must be 'same' or 'valid', got {padding!r}")
    if padding == "valid" and (a.shape[2] < _WINDOW or a.shape[3] < _WINDOW):
        raise ValueError(
            f"fused_ssim: padding='valid' needs images of at least {_WINDOW}x{_WINDOW} pixels "
            f"(the window size), got {a.shape[2]}x{a.shape[3]}; use padding='same'"
        )
    check_bool("fused_ssim", "train", train)


def fused_ssim(
    img1: torch.Tensor, img2: torch.Tensor, padding: str = "same", train: bool = True
) -> torch.Tensor:
    """Mean SSIM of two batches of images, computed by one fused kernel.

    Args:
        img1, img2: (B, C, H, W) images of the same shape on the same device (CPU or CUDA).
            Any layout is accepted (non-contiguous inputs are copied). float32 is the compute
            type: float16, bfloat16 and float64 inputs are converted to float32, so the
            result is a float32 scalar computed with float32 accumulation, and gradients are
            converted back to each input's dtype. Integer images are refused.
        padding: "same" (zero padding outside the image, every pixel counts) or "valid"
            (the mean skips the 5-pixel border where the 11x11 window leaves the image).
        train: when True and a gradient is wanted, the forward stores the derivatives the
            backward needs (3 images' worth, 4 when img2 wants a gradient too); on the CPU
            with padding "same" it computes the gradients right away instead, in the same
            pass as the SSIM, and the backward only scales them. When
            False the forward computes and stores nothing for a backward; one, if it happens
            anyway, recomputes what it needs, so gradients are always correct. On the CPU,
            images whose derivatives would take more than 32 MiB (3 or 4 images' worth) get
            them recomputed inside the backward's own pass: storing them costs more time
            than the arithmetic it saves there.

    Returns:
        A 0-dim float32 tensor: the mean SSIM (1 for identical images). Gradients flow to
        both images. The window is an 11-tap Gaussian (sigma 1.5), C1 = 0.01^2, C2 = 0.03^2.
    """
    _check_inputs(img1, img2, padding, train)
    if looks_channels_last(tuple(img1.shape)):
        b, h, w, c = img1.shape
        warnings.warn(
            f"fused_ssim: the images have shape {tuple(img1.shape)}, read as (B, C, H, W) = ({b}, {h}, {w}, {c}): "
            f"{h} channels of {w}x{c} pixels. If they are (B, H, W, C) images (such as rasterization()'s "
            "colors), pass img.permute(0, 3, 1, 2). Silence with warnings.filterwarnings('ignore', "
            "category=prebuild.ops.ssim.ChannelsLastWarning).",
            ChannelsLastWarning,
            stacklevel=2,
        )
    if img1.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(img1.device)
    x = img1.to(torch.float32).contiguous()
    y = img2.to(torch.float32).contiguous()
    if torch.is_grad_enabled() and (x.requires_grad or y.requires_grad):
        return _FusedSSIM.apply(x, y, padding == "valid", train, namespace())
    ssim_map, _ = _ops(namespace()).fused_ssim_forward(x, y, False, False)
    return _mean(ssim_map, padding == "valid")


def _mean(ssim_map: torch.Tensor, valid: bool) -> torch.Tensor:
    """The mean of the map (inside the crop with "valid"), as sum / count: mean's own arithmetic
    (the same bits), whose count the backward reuses."""
    if valid:
        ssim_map = ssim_map[:, :, _CROP:-_CROP, _CROP:-_CROP]
    return ssim_map.sum() / ssim_map.numel()


def _ops(ns: str):
    """The kernels of op namespace ``ns`` (prebuild, or prebuild_simt in tests)."""
    return getattr(torch.ops, ns)


class _FusedSSIM(torch.autograd.Function):
    """fused_ssim's autograd: one node from the images to the mean SSIM, over the kernels of
    op namespace ``ns`` (its inputs checked once, by fused_ssim). The ops' own autograd
    formulas (registered below) serve callers of the ops; this one node keeps a training
    step's host time down (~40 % less than the ops' formulas plus the mean's nodes: measured
    on a CPU, where the host path is the same Python)."""

    @staticmethod
    def forward(ctx, x, y, valid: bool, train: bool, ns: str):
        with below_autograd():
            return _FusedSSIM._forward(ctx, x, y, valid, train, ns)

    @staticmethod
    def _forward(ctx, x, y, valid: bool, train: bool, ns: str):
        ops = _ops(ns)
        ctx.ns, ctx.valid = ns, valid
        wants = ctx.needs_input_grad[:2]
        on_cpu = x.device.type == "cpu"
        if train and any(wants) and not valid and on_cpu:
            # The gradients now, in the forward's own pass: the backward only scales them (no
            # second run of the forward on the CPU, no dS kept until the backward). On a GPU
            # the stored dS is cheaper: its backward kernel reads the mean's dL/dmap in place,
            # where scaling stored gradients would be one more pass over two images.
            ssim_map, grad1, grad2 = ops.fused_ssim_forward_backward(x, y, wants[1])
            ctx.save_for_backward(x, y, None, grad1, grad2)
            return ssim_map.sum() / ssim_map.numel()
        # dS only for a backward that can happen, and img2's maps only if it wants a gradient.
        maps = 4 if wants[1] else 3
        store = (
            train
            and any(wants)
            and (not on_cpu or maps * 4 * x.numel() <= _CPU_STORED_DS_MAX_BYTES)
        )
        ssim_map, dS = ops.fused_ssim_forward(x, y, store, wants[1])
        ctx.save_for_backward(x, y, dS, None, None)
        return _mean(ssim_map, valid)

    @staticmethod
    def backward(ctx, grad):
        with below_autograd_in_backward():
            return _FusedSSIM._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        x, y, dS, grad1, grad2 = ctx.saved_tensors
        wants = ctx.needs_input_grad[:2]
        h, w = x.shape[2:]
        crop = 2 * _CROP if ctx.valid else 0
        scale = grad / (x.shape[0] * x.shape[1] * (h - crop) * (w - crop))  # the mean's
        if grad1 is not None and not torch.is_grad_enabled():
            # The forward's gradients are those of sum(ssim_map). (Under create_graph the
            # kernel path below runs: its op refuses a double backward, where scaling these
            # would silently drop the second-order term.)
            return (
                grad1 * scale if wants[0] else None,
                grad2 * scale if wants[1] else None,
                None,
                None,
                None,
            )
        ops = _ops(ctx.ns)
        if ctx.valid:  # dL/dmap: the scale inside the crop, zero on the border
            grad_map = x.new_zeros(x.shape)
            grad_map[:, :, _CROP:-_CROP, _CROP:-_CROP] = scale
        else:  # one value at every pixel, read in place by the kernels
            grad_map = scale.expand(x.shape)
        if dS is None:  # the forward_backward path stored none
            dS = x.new_empty((0,))
        return (*_image_grads(ops, ctx, grad_map, x, y, dS), None, None)


def _check_fake_images(op: str, img1: torch.Tensor, img2: torch.Tensor) -> None:
    torch._check(img1.dim() == 4, lambda: f"{op}: img1 must have 4 dimensions, got {img1.dim()}")
    torch._check(img1.shape == img2.shape, lambda: f"{op}: img1 and img2 must have the same shape")
    check_same_devices(op, img1=img1, img2=img2)
    check_float32(op, img1=img1, img2=img2)


def _forward_fake(img1: torch.Tensor, img2: torch.Tensor, train: bool, grad_img2: bool = True):
    _check_fake_images("prebuild::fused_ssim_forward", img1, img2)
    ssim_map = img1.new_empty(img1.shape)
    maps = 4 if grad_img2 else 3  # dS's distinct maps (csrc/ssim/ssim.h)
    dS = img1.new_empty((maps, *img1.shape)) if train else img1.new_empty((0,))
    return ssim_map, dS


def _backward_fake(grad_map, img1, img2, dS, grad_img2=True):
    op = "prebuild::fused_ssim_backward"
    _check_fake_images(op, img1, img2)
    torch._check(
        grad_map.shape == img1.shape, lambda: f"{op}: grad_map and img1 must have the same shape"
    )
    torch._check(
        dS.shape in ((4, *img1.shape), (3, *img1.shape))
        or (dS.shape == (0,) and img1.device.type in ("cpu", "meta")),
        lambda: (
            f"{op}: dS must have shape (4, B, C, H, W) or (3, B, C, H, W) matching img1 "
            "(or (0,) on the CPU)"
        ),
    )
    torch._check(
        not grad_img2 or dS.shape[0] != 3,
        lambda: (
            f"{op}: img2's gradient needs the 4 maps of fused_ssim_forward(train=True, "
            "grad_img2=True); this dS has 3 (img1's gradient only)"
        ),
    )
    check_same_devices(op, grad_map=grad_map, img1=img1, img2=img2, dS=dS)
    check_float32(op, grad_map=grad_map, img1=img1, img2=img2, dS=dS)
    return img1.new_empty(img1.shape), img1.new_empty(img1.shape if grad_img2 else (0,))


def _is_broadcast_scalar(t: torch.Tensor) -> bool:
    """One value seen at every element (all strides 0: the backward of a mean or sum), or a
    single element; the kernels read such a dL/dmap as one value (csrc/ssim/ssim.h)."""
    return t.numel() == 1 or all(s == 0 for s in t.stride())


def _forward_backward_fake(img1: torch.Tensor, img2: torch.Tensor, grad_img2: bool = True):
    _check_fake_images("prebuild::fused_ssim_forward_backward", img1, img2)
    grad2 = img1.new_empty(img1.shape if grad_img2 else (0,))
    return img1.new_empty(img1.shape), img1.new_empty(img1.shape), grad2


def _setup_context(ctx, inputs, output) -> None:
    img1, img2 = inputs[:2]
    _, dS = output
    ctx.save_for_backward(img1, img2, dS)
    ctx.mark_non_differentiable(dS)
    # No zero-filled dL/d(dS) (three or four images' worth) for the backward to ignore.
    ctx.set_materialize_grads(False)


def _image_grads(ops, ctx, grad_map, img1, img2, dS):
    """The backward kernel's gradients, as the autograd formulas return them."""
    if (dS.numel() == 0 and img1.device.type != "cpu") or (
        ctx.needs_input_grad[1] and dS.dim() == 5 and dS.shape[0] == 3
    ):
        # The forward stored no dS (the CPU backward recomputes the derivatives on the fly,
        # the CUDA one needs them stored), or only img1's maps and img2 wants a gradient.
        _, dS = ops.fused_ssim_forward(img1, img2, True, True)
    # The kernels read a broadcast dL/dmap in place (no full image of it written first) and
    # skip img2's gradient when img2 (usually the target) does not need one.
    if not _is_broadcast_scalar(grad_map):
        grad_map = grad_map.contiguous()
    grad1, grad2 = ops.fused_ssim_backward(grad_map, img1, img2, dS, ctx.needs_input_grad[1])
    return (
        grad1 if ctx.needs_input_grad[0] else None,
        grad2 if ctx.needs_input_grad[1] else None,
        None,
    )


def _backward(ops, ctx, grad_map, _grad_dS):
    if grad_map is None:  # the map was not used
        return None, None, None
    img1, img2, dS = ctx.saved_tensors
    return _image_grads(ops, ctx, grad_map, img1, img2, dS)


def _setup_context_forward_backward(ctx, inputs, output) -> None:
    img1, img2, _grad_img2 = inputs
    _, grad1, grad2 = output
    ctx.save_for_backward(img1, img2, grad1, grad2)
    ctx.mark_non_differentiable(grad1, grad2)
    ctx.set_materialize_grads(False)  # no zero-filled gradients of the gradients


def _backward_forward_backward(ops, ctx, grad_map, _grad1, _grad2):
    if grad_map is None:
        return None, None, None
    img1, img2, grad1, grad2 = ctx.saved_tensors
    have2 = grad2.numel() > 0 or not ctx.needs_input_grad[1]
    # Under create_graph the kernel path below runs, whose own backward refuses a double
    # backward (scaling the stored gradients would silently drop the second-order term).
    if _is_broadcast_scalar(grad_map) and have2 and not torch.is_grad_enabled():
        # The forward's gradients are those of sum(ssim_map): dL/dmap is one value here.
        return (
            grad1 * grad_map if ctx.needs_input_grad[0] else None,
            grad2 * grad_map if ctx.needs_input_grad[1] else None,
            None,
        )
    # The map went elsewhere than into a (weighted) mean: the backward kernel proper.
    return _image_grads(ops, ctx, grad_map, img1, img2, img1.new_empty((0,)))


register_ops(
    fakes={
        "fused_ssim_forward": _forward_fake,
        "fused_ssim_backward": _backward_fake,
        "fused_ssim_forward_backward": _forward_backward_fake,
    },
    formulas={
        "fused_ssim_forward": (_setup_context, _backward),
        "fused_ssim_forward_backward": (
            _setup_context_forward_backward,
            _backward_forward_backward,
        ),
    },
    no_double_backward=("fused_ssim_backward",),
    double_backward_error="fused_ssim does not support double backward (second derivatives of "
    "SSIM); compute them with a plain-PyTorch SSIM instead",
)
