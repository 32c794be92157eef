"""EWA projection of 3D Gaussians: ``fully_fused_projection`` (gsplat 1.5.3, pinhole cameras).

A drop-in for ``gsplat.fully_fused_projection`` with ``packed=False`` and
``camera_model="pinhole"``: one kernel computes, per (camera, Gaussian) pair, the 3D
covariance (from ``covars``, or from ``quats`` and ``scales``), its camera-space transform,
the perspective Jacobian (with gsplat's clamp of x/z, y/z to the frustum widened by
0.3 tan(fov/2) on each side), the 2D covariance plus ``eps2d``, its inverse (the conic), the
per-axis radius ``ceil(3.33 sqrt(cov2d_ii))`` and, if asked, the anti-aliasing compensation
``sqrt(max(0, det(cov2d) / det(cov2d + eps2d I)))``. The kernels are
``torch.ops.prebuild.fully_fused_projection_forward`` / ``_backward`` (csrc/gsplat/); autograd
and fake kernels are registered here.

Deliberate differences from gsplat 1.5.3 (all documented on the function too):

* Culled pairs (radii 0, 0) get zeros in means2d, depths, conics and compensations; gsplat
  leaves means2d, depths and conics uninitialised there (``at::empty``).
* No gradient for ``viewmats`` or ``Ks``: their gradients are None.
* No batch dimensions, no ``packed``/``sparse_grad``, no ``opacities``, pinhole only: the
  keyword arguments exist for call compatibility and refuse any other value.
* float16, bfloat16 and float64 inputs are converted to float32 (the compute type); the
  outputs are float32 and gradients flow back in each input's dtype.
* Radii saturate at 2^31 - 128 (CUDA's float-to-int conversion saturates too).
* The backward gets the compensation term only when ``calc_compensations=True`` (as gsplat).
"""

from __future__ import annotations

from typing import Optional

import torch

from prebuild.ops._checks import (
    check_bool,
    check_dtype,
    check_float32,
    check_float_input,
    check_int,
    check_real,
    check_same_devices,
)
from prebuild.ops._library import LIBRARY

_NAME = "fully_fused_projection"


def _check_tensor(name: str, t: object, cols: int, rows: Optional[int] = None) -> torch.Tensor:
    t = check_float_input(_NAME, name, t)
    if t.dim() != 2 or t.shape[1] != cols or (rows is not None and t.shape[0] != rows):
        want = f"({rows if rows is not None else 'N'}, {cols})"
        hint = " (batch dimensions are not supported)" if t.dim() > 2 else ""
        raise ValueError(f"{_NAME}: {name} must have shape {want}, got {tuple(t.shape)}{hint}")
    return t


def _check_cameras(viewmats: object, Ks: object) -> None:
    for name, t, size in (("viewmats", viewmats, 4), ("Ks", Ks, 3)):
        check_float_input(_NAME, name, t)
        if t.dim() != 3 or t.shape[1:] != (size, size):
            raise ValueError(
                f"{_NAME}: {name} must have shape (C, {size}, {size}), got {tuple(t.shape)}"
            )
    if viewmats.shape[0] != Ks.shape[0]:
        raise ValueError(
            f"{_NAME}: viewmats has {viewmats.shape[0]} cameras but Ks has {Ks.shape[0]}"
        )


def _check_finite_cameras(viewmats: torch.Tensor, Ks: torch.Tensor) -> None:
    """ValueError naming the first camera whose viewmat or K has a NaN or infinity."""
    for name, t in (("viewmats", viewmats), ("Ks", Ks)):
        bad = ~torch.isfinite(t).flatten(1).all(dim=1)
        if bool(bad.any()):
            camera = int(bad.nonzero()[0, 0])
            raise ValueError(f"{_NAME}: {name}[{camera}] (camera {camera}) is not finite")


def _check_inputs(means, covars, quats, scales, viewmats, Ks, width, height) -> None:
    m = _check_tensor("means", means, 3)
    N = m.shape[0]
    if covars is not None and (quats is not None or scales is not None):
        raise ValueError(f"{_NAME}: give either covars or (quats and scales), not both")
    if covars is None and (quats is None or scales is None):
        raise ValueError(
            f"{_NAME}: give either covars (N, 6) or both quats (N, 4) and scales (N, 3)"
        )
    gaussians = {"means": m}
    if covars is not None:
        gaussians["covars"] = _check_tensor("covars", covars, 6, N)
    else:
        gaussians["quats"] = _check_tensor("quats", quats, 4, N)
        gaussians["scales"] = _check_tensor("scales", scales, 3, N)
    _check_cameras(viewmats, Ks)
    tensors = {**gaussians, "viewmats": viewmats, "Ks": Ks}
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        where = ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
        raise ValueError(f"{_NAME}: all tensors must be on the same device, got {where}")
    check_int(_NAME, "width", width)
    check_int(_NAME, "height", height)


def fully_fused_projection(
    means: torch.Tensor,
    covars: Optional[torch.Tensor],
    quats: Optional[torch.Tensor],
    scales: Optional[torch.Tensor],
    viewmats: torch.Tensor,
    Ks: torch.Tensor,
    width: int,
    height: int,
    eps2d: float = 0.3,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
    radius_clip: float = 0.0,
    packed: bool = False,
    sparse_grad: bool = False,
    calc_compensations: bool = False,
    camera_model: str = "pinhole",
    opacities: Optional[torch.Tensor] = None,
):
    """Projects N Gaussians into C pinhole cameras (gsplat 1.5.3 conventions).

    Args:
        means: (N, 3) Gaussian centres in world space.
        covars: (N, 6) covariances as upper triangles (xx, xy, xz, yy, yz, zz), or None.
        quats: (N, 4) rotations (w, x, y, z), normalised inside, or None.
        scales: (N, 3) scales, or None. Give either covars or both quats and scales.
        viewmats: (C, 4, 4) world-to-camera matrices.
        Ks: (C, 3, 3) intrinsics (fx = K[0, 0], fy = K[1, 1], cx = K[0, 2], cy = K[1, 2]).
        width, height: image size in pixels (positive ints).
        eps2d: added to the 2D covariance's diagonal (anti-aliasing blur).
        near_plane, far_plane: pairs with camera z < near_plane or z > far_plane are culled.
        radius_clip: pairs whose radii are both <= radius_clip are culled.
        packed, sparse_grad, camera_model, opacities: gsplat's; only the defaults
            (False, False, "pinhole", None) are supported (NotImplementedError otherwise).
        calc_compensations: also return the compensation factors.

    All tensors must be on one device (CPU or CUDA). float32 is the compute type: float16,
    bfloat16 and float64 inputs are converted to float32 and the outputs are float32.
    A viewmat or K with a NaN or infinity raises ValueError naming the camera (checked in
    eager mode; skipped while torch.compile traces, since it reads the values).

    Returns:
        (radii, means2d, depths, conics, compensations):
        radii (C, N, 2) int32 per-axis radius in pixels, (0, 0) for culled pairs (behind the
        near plane, beyond the far plane, det <= 0, below radius_clip, or box outside the
        image); means2d (C, N, 2); depths (C, N) camera z; conics (C, N, 3) inverse 2D
        covariance (a, b, c); compensations (C, N) or None. Culled pairs have zeros in all
        outputs (gsplat leaves means2d, depths and conics uninitialised there).

    Gradients flow to means and to covars or quats and scales, from all four float outputs;
    culled pairs contribute nothing. viewmats and Ks get no gradient (None).
    """
    if packed or sparse_grad:
        raise NotImplementedError(f"{_NAME}: packed=True / sparse_grad=True are not supported")
    if camera_model != "pinhole":
        raise NotImplementedError(
            f"{_NAME}: only camera_model='pinhole' is supported, got {camera_model!r}"
        )
    if opacities is not None:
        raise NotImplementedError(f"{_NAME}: opacities (opacity-aware radii) are not supported")
    _check_inputs(means, covars, quats, scales, viewmats, Ks, width, height)
    for name, value in (
        ("eps2d", eps2d),
        ("near_plane", near_plane),
        ("far_plane", far_plane),
        ("radius_clip", radius_clip),
    ):
        check_real(_NAME, name, value)
    check_bool(_NAME, "calc_compensations", calc_compensations)
    if not torch.compiler.is_compiling() and viewmats.device.type != "meta":
        _check_finite_cameras(viewmats, Ks)
        if means.is_cuda:
            LIBRARY.ensure_device(means.device)

    def f32(t):
        return None if t is None else t.to(torch.float32).contiguous()

    means2d, depths, conics, compensations, radii = (
        torch.ops.prebuild.fully_fused_projection_forward(
            f32(means),
            f32(covars),
            f32(quats),
            f32(scales),
            f32(viewmats),
            f32(Ks),
            int(width),
            int(height),
            float(eps2d),
            float(near_plane),
            float(far_plane),
            float(radius_clip),
            calc_compensations,
        )
    )
    return radii, means2d, depths, conics, compensations if calc_compensations else None


# ------------------------------------------------------------------------ fake kernels

_FWD = "prebuild::fully_fused_projection_forward"
_BWD = "prebuild::fully_fused_projection_backward"


def _check_scene_fake(op, means, covars, quats, scales, viewmats, Ks):
    """The shape/dtype/device checks of projection.h's check_scene; returns (C, N)."""
    torch._check(
        means.dim() == 2 and means.shape[1] == 3, lambda: f"{op}: means must have shape (N, 3)"
    )
    N = means.shape[0]
    torch._check(
        (covars is None) != (quats is None and scales is None) and (quats is None) == (scales is None),
        lambda: f"{op}: give either covars or (quats and scales), not both and not neither",
    )
    tensors = {"means": means, "viewmats": viewmats, "Ks": Ks}
    for name, t, cols in (("covars", covars, 6), ("quats", quats, 4), ("scales", scales, 3)):
        if t is not None:
            torch._check(
                t.dim() == 2 and t.shape[0] == N and t.shape[1] == cols,
                lambda name=name, cols=cols: f"{op}: {name} must have shape (N, {cols})",
            )
            tensors[name] = t
    torch._check(
        viewmats.dim() == 3 and viewmats.shape[1:] == (4, 4),
        lambda: f"{op}: viewmats must have shape (C, 4, 4)",
    )
    C = viewmats.shape[0]
    torch._check(
        Ks.dim() == 3 and Ks.shape[0] == C and Ks.shape[1:] == (3, 3),
        lambda: f"{op}: Ks must have shape (C, 3, 3) with C = viewmats.size(0)",
    )
    check_same_devices(op, **tensors)
    check_float32(op, **tensors)
    return C, N


@torch.library.register_fake(_FWD)
def _forward_fake(
    means, covars, quats, scales, viewmats, Ks, width, height, eps2d, near_plane, far_plane,
    radius_clip, calc_compensations,
):
    C, N = _check_scene_fake(_FWD, means, covars, quats, scales, viewmats, Ks)
    torch._check(width > 0 and height > 0, lambda: f"{_FWD}: width and height must be positive")
    return (
        means.new_empty((C, N, 2)),
        means.new_empty((C, N)),
        means.new_empty((C, N, 3)),
        means.new_empty((C, N) if calc_compensations else (0,)),
        means.new_empty((C, N, 2), dtype=torch.int32),
    )


@torch.library.register_fake(_BWD)
def _backward_fake(
    means, covars, quats, scales, viewmats, Ks, width, height, eps2d, radii, conics,
    compensations, v_means2d, v_depths, v_conics, v_compensations,
):
    C, N = _check_scene_fake(_BWD, means, covars, quats, scales, viewmats, Ks)
    for name, t, shape in (
        ("radii", radii, (C, N, 2)),
        ("conics", conics, (C, N, 3)),
        ("v_means2d", v_means2d, (C, N, 2)),
        ("v_depths", v_depths, (C, N)),
        ("v_conics", v_conics, (C, N, 3)),
    ):
        torch._check(t.shape == shape, lambda name=name: f"{_BWD}: {name} does not match (C, N)")
    check_dtype(_BWD, torch.int32, radii=radii)
    check_float32(_BWD, conics=conics, v_means2d=v_means2d, v_depths=v_depths, v_conics=v_conics)
    check_same_devices(
        _BWD, means=means, radii=radii, conics=conics, v_means2d=v_means2d, v_depths=v_depths,
        v_conics=v_conics,
    )
    by_covars = covars is not None
    return (
        means.new_empty((N, 3)),
        means.new_empty((N, 6) if by_covars else (0,)),
        means.new_empty((0,) if by_covars else (N, 4)),
        means.new_empty((0,) if by_covars else (N, 3)),
    )


# ---------------------------------------------------------------------------- autograd


def _setup_context(ctx, inputs, output) -> None:
    means, covars, quats, scales, viewmats, Ks, width, height, eps2d = inputs[:9]
    _means2d, _depths, conics, compensations, radii = output
    ctx.save_for_backward(means, covars, quats, scales, viewmats, Ks, radii, conics, compensations)
    ctx.width, ctx.height, ctx.eps2d = width, height, eps2d
    ctx.calc_compensations = inputs[12]
    ctx.mark_non_differentiable(radii)


def _backward(ctx, v_means2d, v_depths, v_conics, v_compensations, _v_radii):
    means, covars, quats, scales, viewmats, Ks, radii, conics, compensations = ctx.saved_tensors

    def grad(g, last):  # incoming gradient of a (C, N[, last]) output, zeros when None
        if g is not None:
            return g.contiguous()
        return conics.new_zeros(conics.shape[:2] + ((last,) if last else ()))

    if ctx.calc_compensations and v_compensations is not None:
        v_comp = v_compensations.contiguous()
    else:
        v_comp = means.new_empty((0,))
    v_means, v_covars, v_quats, v_scales = torch.ops.prebuild.fully_fused_projection_backward(
        means, covars, quats, scales, viewmats, Ks, ctx.width, ctx.height, ctx.eps2d,
        radii, conics, compensations,
        grad(v_means2d, 2), grad(v_depths, 0), grad(v_conics, 3), v_comp,
    )
    need = ctx.needs_input_grad
    return (
        v_means if need[0] else None,
        v_covars if need[1] and covars is not None else None,
        v_quats if need[2] and quats is not None else None,
        v_scales if need[3] and scales is not None else None,
        *([None] * 9),  # viewmats and Ks (no gradient), then the non-tensor arguments
    )


def _no_double_backward(ctx, *grads):
    raise NotImplementedError(
        f"{_NAME} does not support double backward; use gsplat's plain-PyTorch projection "
        "for second derivatives"
    )


torch.library.register_autograd(_FWD, _backward, setup_context=_setup_context)
# Without an autograd kernel, a double backward would silently drop the second-order term.
torch.library.register_autograd(
    _BWD, _no_double_backward, setup_context=lambda ctx, inputs, output: None
)
