"""EWA projection of 3D Gaussians: ``fully_fused_projection`` and ``proj`` (gsplat 1.5.3).

Drop-ins for gsplat's functions of the same names, pinhole, orthographic and fisheye cameras,
leading batch dimensions, ``packed`` and ``sparse_grad``: one kernel computes, per (camera,
Gaussian) pair, the 3D covariance (from ``covars``, or from ``quats`` and ``scales``), its
camera-space transform, the camera model's projection and Jacobian (pinhole: with gsplat's
clamp of x/z, y/z to the frustum widened by 0.3 tan(fov/2) on each side), the 2D covariance
plus ``eps2d``, its inverse (the conic), the per-axis radius ``ceil(e sqrt(cov2d_ii))``
(e = 3.33, or with ``opacities`` gsplat's opacity-aware ``min(3.33, sqrt(2 ln(255 o)))``) and,
if asked, the anti-aliasing compensation ``sqrt(max(0, det(cov2d) / det(cov2d + eps2d
I)))``. The kernels are ``torch.ops.prebuild.fully_fused_projection_forward`` /
``_backward`` and ``proj_forward`` / ``_backward`` (csrc/gsplat/projection*); autograd and
fake kernels are registered here.

Deliberate differences from gsplat 1.5.3 (all documented on the functions too):

* Culled pairs (radii 0, 0) get zeros in means2d, depths, conics and compensations; gsplat
  leaves means2d, depths and conics uninitialised there (``at::empty``).
* No gradient for ``Ks`` (as gsplat); ``viewmats`` get one when they require it (as gsplat).
* ``packed=True`` computes the dense pairs and then gathers the visible ones: the same
  values, order and gradients as gsplat's packed kernels, but the memory of the dense pass.
* No ``"ftheta"`` camera (NotImplementedError).
* ``opacities`` with batch dimensions and ``packed=True``: each batch's own opacities bound
  its radii, as in dense mode (gsplat's packed kernel reads the first batch's for every batch).
* A pair whose opacity (times its compensation) is exactly 1/255 has a zero extent: culled
  whatever ``radius_clip`` (gsplat keeps it with radii 0 when ``radius_clip < 0``).
* float16, bfloat16 and float64 inputs are converted to float32 (the compute type); the
  outputs are float32 and gradients flow back in each input's dtype.
* Radii saturate at 2^31 - 128 (CUDA's float-to-int conversion saturates too).
* The backward gets the compensation term only when ``calc_compensations=True`` (as gsplat).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from prebuild.ops._checks import (
    check_bool,
    check_dtype,
    check_float32,
    check_float_input,
    check_int,
    check_real,
    check_same_devices,
    shape_error,
)
from prebuild.ops._library import LIBRARY, kernels
from prebuild.ops._registration import call, register_ops
from prebuild.ops.pack import pack

_NAME = "fully_fused_projection"
# gsplat's camera models, in the order of the kernels' CameraModel (projection_math.h).
CAMERA_MODELS = ("pinhole", "ortho", "fisheye")


def camera_model_index(op: str, camera_model: object) -> int:
    """The kernels' number for gsplat's ``camera_model`` name."""
    if camera_model == "ftheta":
        raise NotImplementedError(
            f"{op}: camera_model='ftheta' (gsplat's unscented-transform path) is not supported"
        )
    if camera_model not in CAMERA_MODELS:
        raise ValueError(f"{op}: camera_model must be one of {CAMERA_MODELS}, got {camera_model!r}")
    return CAMERA_MODELS.index(camera_model)


def _f32(t: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor | None:
    """``t`` as a contiguous float32 tensor of ``shape`` (None stays None); ``t`` itself when
    it already is one (no op dispatched)."""
    if t is None:
        return None
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    if t.shape != shape:
        t = t.reshape(shape)
    return t.contiguous()


def _check_gaussian(name: str, t: object, batch: tuple[int, ...], N: int, cols: int) -> None:
    t = check_float_input(_NAME, name, t)
    if tuple(t.shape) != (*batch, N, cols):
        raise shape_error(_NAME, name, f"{(*batch, N, cols)} (like means: [..., N, {cols}])", t)


def _check_inputs(means, covars, quats, scales, opacities, viewmats, Ks, width, height):
    """Validates the arguments; returns (batch dims, C, N)."""
    m = check_float_input(_NAME, "means", means)
    if m.dim() < 2 or m.shape[-1] != 3:
        raise shape_error(_NAME, "means", "(..., N, 3)", m)
    batch, N = tuple(m.shape[:-2]), m.shape[-2]
    if covars is not None and (quats is not None or scales is not None):
        raise ValueError(f"{_NAME}: give either covars or (quats and scales), not both")
    if covars is None and (quats is None or scales is None):
        raise ValueError(
            f"{_NAME}: give either covars [..., N, 6] or both quats [..., N, 4] and scales [..., N, 3]"
        )
    tensors = {"means": m}
    if covars is not None:
        _check_gaussian("covars", covars, batch, N, 6)
        tensors["covars"] = covars
    else:
        _check_gaussian("quats", quats, batch, N, 4)
        _check_gaussian("scales", scales, batch, N, 3)
        tensors.update(quats=quats, scales=scales)
    if opacities is not None:
        o = check_float_input(_NAME, "opacities", opacities)
        if tuple(o.shape) != (*batch, N):
            raise shape_error(_NAME, "opacities", f"{(*batch, N)} (like means: [..., N])", o)
        tensors["opacities"] = o
    C = _check_cameras(viewmats, Ks, batch)
    tensors.update(viewmats=viewmats, Ks=Ks)
    _check_devices(tensors)
    check_int(_NAME, "width", width)
    check_int(_NAME, "height", height)
    return batch, C, N


def _check_cameras(viewmats: object, Ks: object, batch: tuple[int, ...]) -> int:
    """Checks viewmats [..., C, 4, 4] and Ks [..., C, 3, 3]; returns C."""
    C = None
    for name, t, size in (("viewmats", viewmats, 4), ("Ks", Ks, 3)):
        t = check_float_input(_NAME, name, t)
        if (
            t.dim() != len(batch) + 3
            or t.shape[-2:] != (size, size)
            or tuple(t.shape[:-3]) != batch
        ):
            dims = ", ".join(str(d) for d in (*batch, "C", size, size))
            raise shape_error(_NAME, name, f"({dims}) (the batch dimensions of means)", t)
        if C is not None and t.shape[-3] != C:
            raise ValueError(f"{_NAME}: viewmats has {C} cameras but Ks has {t.shape[-3]}")
        C = t.shape[-3]
    return C


def _check_devices(tensors: dict) -> None:
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        where = ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
        raise ValueError(f"{_NAME}: all tensors must be on the same device, got {where}")


def check_finite_cameras(op: str, **cameras: torch.Tensor) -> None:
    """ValueError naming the first camera whose viewmat or K has a NaN or infinity.

    Only for CPU tensors: on CUDA, reading the answer would make the host wait for the GPU
    at every call (the kernels cull every pair of a camera whose read entries are not
    finite instead). One sum per tensor in the common case; the search for the camera runs
    only when a sum is not finite (a NaN or infinity, or finite entries that overflow)."""
    if any(t.device.type != "cpu" for t in cameras.values()):
        return
    if all(math.isfinite(t.detach().sum()) for t in cameras.values()):
        return
    for name, t in cameras.items():
        bad = ~torch.isfinite(t).flatten(-2).all(dim=-1)
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            where = ", ".join(map(str, index))
            raise ValueError(f"{op}: {name}[{where}] (camera {index[-1]}) is not finite")


def fully_fused_projection(
    means: torch.Tensor,
    covars: torch.Tensor | None,
    quats: torch.Tensor | None,
    scales: torch.Tensor | None,
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
    opacities: torch.Tensor | None = None,
):
    """Projects N Gaussians into C cameras (gsplat 1.5.3 conventions).

    Args:
        means: [..., N, 3] Gaussian centres in world space; ``...`` are batch dimensions,
            shared by every tensor argument.
        covars: [..., N, 6] covariances as upper triangles (xx, xy, xz, yy, yz, zz), or None.
        quats: [..., N, 4] rotations (w, x, y, z), normalised inside, or None.
        scales: [..., N, 3] scales, or None. Give either covars or both quats and scales.
        viewmats: [..., C, 4, 4] world-to-camera matrices.
        Ks: [..., C, 3, 3] intrinsics (fx = K[0, 0], fy = K[1, 1], cx = K[0, 2], cy = K[1, 2]).
        width, height: image size in pixels (positive ints).
        eps2d: added to the 2D covariance's diagonal (anti-aliasing blur).
        near_plane, far_plane: pairs with camera z < near_plane or z > far_plane are culled.
        radius_clip: pairs whose radii are both <= radius_clip are culled.
        packed: return only the visible pairs, with their batch, camera and Gaussian indices.
        sparse_grad: with ``packed`` and no batch dimensions, the gradients of means and
            covars or quats and scales are sparse COO tensors (one row per visible Gaussian).
        calc_compensations: also return the compensation factors.
        camera_model: "pinhole", "ortho" or "fisheye" (gsplat's equidistant fisheye).
        opacities: [..., N] opacities, or None. Given, they tighten each pair's radii as
            gsplat's do: the extent is ``min(3.33, sqrt(2 ln(o / (1/255))))`` sigmas instead
            of 3.33, where ``o exp(-extent^2 / 2)`` falls to 1/255 (o the opacity, times the
            compensation when ``calc_compensations``); pairs with o < 1/255 are culled. Not
            differentiable (the radii are not).

    All tensors must be on one device (CPU or CUDA). float32 is the compute type: float16,
    bfloat16 and float64 inputs are converted to float32 and the outputs are float32.
    On the CPU, a viewmat or K with a NaN or infinity raises ValueError naming the camera
    (in eager mode; skipped while torch.compile traces, since it reads the values). On CUDA
    it is not looked for (reading the answer would make the host wait for the GPU at every
    call): the kernel culls every pair of a camera whose R, t, fx, fy, cx or cy is not
    finite, so that camera sees nothing and passes no gradient.

    Returns:
        ``packed=False``: (radii, means2d, depths, conics, compensations): radii
        [..., C, N, 2] int32 per-axis radius in pixels, (0, 0) for culled pairs (behind the
        near plane, beyond the far plane, det <= 0, an opacity below 1/255, below
        radius_clip, or box outside the image); means2d [..., C, N, 2]; depths [..., C, N]
        camera z; conics [..., C, N, 3] inverse 2D covariance (a, b, c); compensations
        [..., C, N] or None. Culled pairs have zeros in all outputs (gsplat leaves means2d,
        depths and conics uninitialised there).
        ``packed=True``: (batch_ids, camera_ids, gaussian_ids, radii, means2d, depths,
        conics, compensations), each with one row per visible pair in (batch, camera,
        Gaussian) order; the ids are int64 (as gsplat's) and batch_ids index the flattened
        batch dimensions.

    Gradients flow to means, to covars or quats and scales, and to viewmats, from all four
    float outputs; culled pairs contribute nothing. Ks get no gradient (None).
    """
    args = check_projection(
        means=means,
        covars=covars,
        quats=quats,
        scales=scales,
        viewmats=viewmats,
        Ks=Ks,
        width=width,
        height=height,
        eps2d=eps2d,
        near_plane=near_plane,
        far_plane=far_plane,
        radius_clip=radius_clip,
        packed=packed,
        sparse_grad=sparse_grad,
        calc_compensations=calc_compensations,
        camera_model=camera_model,
        opacities=opacities,
    )
    out = project(args)
    if packed:
        packed_out = pack(*out)
        return packed_out[:3] + packed_out[4:9]  # image_ids are rasterization's own
    return tuple(None if t is None else t.reshape(*args.batch, *t.shape[1:]) for t in out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Projection:
    """The arguments ``check_projection`` passed, as ``project`` takes them: the tensors as
    given (``project`` makes the float32 contiguous copies it needs), the camera model as the
    kernels' index, and the sizes the checks found."""

    means: torch.Tensor
    covars: torch.Tensor | None
    quats: torch.Tensor | None
    scales: torch.Tensor | None
    opacities: torch.Tensor | None
    viewmats: torch.Tensor
    Ks: torch.Tensor
    width: int
    height: int
    eps2d: float
    near_plane: float
    far_plane: float
    radius_clip: float
    sparse_grad: bool
    calc_compensations: bool
    model: int  # camera_model_index's
    batch: tuple[int, ...]  # the batch dimensions
    C: int
    N: int


def check_projection(
    *,
    means,
    covars,
    quats,
    scales,
    viewmats,
    Ks,
    width,
    height,
    eps2d,
    near_plane,
    far_plane,
    radius_clip,
    packed,
    sparse_grad,
    calc_compensations,
    camera_model,
    opacities,
) -> Projection:
    """Every check of ``fully_fused_projection``'s arguments (``rasterization`` runs it once
    for the whole chain); returns what ``project`` takes. Keyword-only: its callers name
    each argument, so that none can shift into another's place."""
    check_bool(_NAME, "packed", packed)
    check_bool(_NAME, "sparse_grad", sparse_grad)
    model = camera_model_index(_NAME, camera_model)
    batch, C, N = _check_inputs(
        means, covars, quats, scales, opacities, viewmats, Ks, width, height
    )
    if sparse_grad and not packed:
        raise ValueError(f"{_NAME}: sparse_grad=True needs packed=True (as gsplat)")
    if sparse_grad and batch:
        raise ValueError(f"{_NAME}: sparse_grad=True does not support batch dimensions (as gsplat)")
    for name, value in (
        ("eps2d", eps2d),
        ("near_plane", near_plane),
        ("far_plane", far_plane),
        ("radius_clip", radius_clip),
    ):
        check_real(_NAME, name, value)
    check_bool(_NAME, "calc_compensations", calc_compensations)
    if not torch.compiler.is_compiling() and viewmats.device.type != "meta":
        check_finite_cameras(_NAME, viewmats=viewmats, Ks=Ks)
        if means.is_cuda:
            LIBRARY.ensure_device(means.device)
    return Projection(
        means=means,
        covars=covars,
        quats=quats,
        scales=scales,
        opacities=opacities,
        viewmats=viewmats,
        Ks=Ks,
        width=width,
        height=height,
        eps2d=eps2d,
        near_plane=near_plane,
        far_plane=far_plane,
        radius_clip=radius_clip,
        sparse_grad=sparse_grad,
        calc_compensations=calc_compensations,
        model=model,
        batch=batch,
        C=C,
        N=N,
    )


def project(p: Projection):
    """The projection ``check_projection`` passed: (radii, means2d, depths, conics,
    compensations or None), each [B, C, N, ...] with the batch dimensions flattened into B."""
    B, N, C = math.prod(p.batch), p.N, p.C
    means, covars, quats, scales = p.means, p.covars, p.quats, p.scales
    if p.sparse_grad:
        # Gradients of the Gaussians' parameters become sparse rows once autograd gets there.
        means, covars, quats, scales = (_SparseRows.wrap(t) for t in (means, covars, quats, scales))
    means2d, depths, conics, compensations, radii = call(
        "fully_fused_projection_forward",
        _f32(means, (B, N, 3)),
        _f32(covars, (B, N, 6)),
        _f32(quats, (B, N, 4)),
        _f32(scales, (B, N, 3)),
        _f32(p.opacities, (B, N)),
        _f32(p.viewmats, (B, C, 4, 4)),
        _f32(p.Ks, (B, C, 3, 3)),
        int(p.width),
        int(p.height),
        float(p.eps2d),
        float(p.near_plane),
        float(p.far_plane),
        float(p.radius_clip),
        p.calc_compensations,
        p.model,
    )
    return radii, means2d, depths, conics, compensations if p.calc_compensations else None


class _SparseRows(torch.autograd.Function):
    """Identity on a [N, k] tensor whose gradient is returned as a sparse COO tensor of its
    non-zero rows (gsplat's ``sparse_grad``: optimizers such as SparseAdam take it)."""

    @staticmethod
    def forward(t):
        return t.view_as(t)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        rows = grad.ne(0).any(-1).nonzero().flatten()
        return torch.sparse_coo_tensor(
            rows[None], grad[rows], grad.shape, is_coalesced=True, check_invariants=False
        )

    @classmethod
    def wrap(cls, t: torch.Tensor | None) -> torch.Tensor | None:
        return cls.apply(t) if t is not None and t.requires_grad else t


# ------------------------------------------------------------------------------ proj

_PROJ = "proj"


def proj(
    means: torch.Tensor,
    covars: torch.Tensor,
    Ks: torch.Tensor,
    width: int,
    height: int,
    camera_model: str = "pinhole",
):
    """gsplat 1.5.3's ``proj``: camera-space Gaussians to the image, no culling and no blur.

    Args:
        means: [..., C, N, 3] means in camera space.
        covars: [..., C, N, 3, 3] covariances in camera space.
        Ks: [..., C, 3, 3] intrinsics.
        width, height: image size (the pinhole Jacobian's clamp uses it).
        camera_model: "pinhole", "ortho" or "fisheye".

    Returns:
        (means2d [..., C, N, 2], covars2d [..., C, N, 2, 2]) as float32; gradients flow to
        means and covars (Ks get none).
    """
    model = camera_model_index(_PROJ, camera_model)
    m = check_float_input(_PROJ, "means", means)
    if m.dim() < 3 or m.shape[-1] != 3:
        raise shape_error(_PROJ, "means", "(..., C, N, 3)", m)
    lead, N = tuple(m.shape[:-2]), m.shape[-2]
    c = check_float_input(_PROJ, "covars", covars)
    if tuple(c.shape) != (*lead, N, 3, 3):
        raise shape_error(_PROJ, "covars", f"{(*lead, N, 3, 3)}", c)
    k = check_float_input(_PROJ, "Ks", Ks)
    if tuple(k.shape) != (*lead, 3, 3):
        raise shape_error(_PROJ, "Ks", f"{(*lead, 3, 3)}", k)
    if len({m.device, c.device, k.device}) > 1:
        raise ValueError(f"{_PROJ}: means, covars and Ks must be on the same device")
    check_int(_PROJ, "width", width)
    check_int(_PROJ, "height", height)
    if not torch.compiler.is_compiling() and k.device.type != "meta":
        check_finite_cameras(_PROJ, Ks=k)
        if m.is_cuda:
            LIBRARY.ensure_device(m.device)
    I = math.prod(lead)
    means2d, covars2d = kernels().proj_forward(
        _f32(m, (I, N, 3)),
        _f32(c, (I, N, 3, 3)),
        _f32(k, (I, 3, 3)),
        int(width),
        int(height),
        model,
    )
    return means2d.reshape(*lead, N, 2), covars2d.reshape(*lead, N, 2, 2)


# ------------------------------------------------------------------------ fake kernels

_FWD = "prebuild::fully_fused_projection_forward"
_BWD = "prebuild::fully_fused_projection_backward"
_PROJ_FWD = "prebuild::proj_forward"
_PROJ_BWD = "prebuild::proj_backward"


def _check_scene_fake(op, means, covars, quats, scales, viewmats, Ks):
    """The shape/dtype/device checks of projection.h's check_scene; returns (B, C, N)."""
    torch._check(
        means.dim() == 3 and means.shape[2] == 3, lambda: f"{op}: means must have shape (B, N, 3)"
    )
    B, N = means.shape[0], means.shape[1]
    torch._check(
        (covars is None) != (quats is None and scales is None)
        and (quats is None) == (scales is None),
        lambda: f"{op}: give either covars or (quats and scales), not both and not neither",
    )
    tensors = {"means": means, "viewmats": viewmats, "Ks": Ks}
    for name, t, cols in (("covars", covars, 6), ("quats", quats, 4), ("scales", scales, 3)):
        if t is not None:
            torch._check(
                t.dim() == 3 and t.shape == (B, N, cols),
                lambda name=name, cols=cols: f"{op}: {name} must have shape (B, N, {cols})",
            )
            tensors[name] = t
    torch._check(
        viewmats.dim() == 4 and viewmats.shape[0] == B and viewmats.shape[2:] == (4, 4),
        lambda: f"{op}: viewmats must have shape (B, C, 4, 4)",
    )
    C = viewmats.shape[1]
    torch._check(
        Ks.dim() == 4 and Ks.shape == (B, C, 3, 3),
        lambda: f"{op}: Ks must have shape (B, C, 3, 3) with C = viewmats.size(1)",
    )
    check_same_devices(op, **tensors)
    check_float32(op, **tensors)
    return B, C, N


def _check_camera_model_fake(op, camera_model):
    torch._check(
        0 <= camera_model < len(CAMERA_MODELS),
        lambda: f"{op}: camera_model must be 0 (pinhole), 1 (ortho) or 2 (fisheye)",
    )


def _forward_fake(
    means,
    covars,
    quats,
    scales,
    opacities,
    viewmats,
    Ks,
    width,
    height,
    eps2d,
    near_plane,
    far_plane,
    radius_clip,
    calc_compensations,
    camera_model,
):
    B, C, N = _check_scene_fake(_FWD, means, covars, quats, scales, viewmats, Ks)
    if opacities is not None:
        torch._check(opacities.shape == (B, N), lambda: f"{_FWD}: opacities must have shape (B, N)")
        check_same_devices(_FWD, means=means, opacities=opacities)
        check_float32(_FWD, opacities=opacities)
    torch._check(width > 0 and height > 0, lambda: f"{_FWD}: width and height must be positive")
    _check_camera_model_fake(_FWD, camera_model)
    return (
        means.new_empty((B, C, N, 2)),
        means.new_empty((B, C, N)),
        means.new_empty((B, C, N, 3)),
        means.new_empty((B, C, N) if calc_compensations else (0,)),
        means.new_empty((B, C, N, 2), dtype=torch.int32),
    )


def _backward_fake(
    means,
    covars,
    quats,
    scales,
    viewmats,
    Ks,
    width,
    height,
    eps2d,
    camera_model,
    radii,
    conics,
    compensations,
    v_means2d,
    v_depths,
    v_conics,
    v_compensations,
    viewmats_requires_grad,
):
    B, C, N = _check_scene_fake(_BWD, means, covars, quats, scales, viewmats, Ks)
    _check_camera_model_fake(_BWD, camera_model)
    for name, t, shape in (
        ("radii", radii, (B, C, N, 2)),
        ("conics", conics, (B, C, N, 3)),
        ("v_means2d", v_means2d, (B, C, N, 2)),
        ("v_conics", v_conics, (B, C, N, 3)),
    ):
        torch._check(t.shape == shape, lambda name=name: f"{_BWD}: {name} does not match (B, C, N)")
    torch._check(
        v_depths.shape in ((B, C, N), (0,)),
        lambda: f"{_BWD}: v_depths must have shape (B, C, N) or (0,) (no gradient)",
    )
    check_dtype(_BWD, torch.int32, radii=radii)
    check_float32(_BWD, conics=conics, v_means2d=v_means2d, v_depths=v_depths, v_conics=v_conics)
    check_same_devices(
        _BWD,
        means=means,
        radii=radii,
        conics=conics,
        v_means2d=v_means2d,
        v_depths=v_depths,
        v_conics=v_conics,
    )
    by_covars = covars is not None
    return (
        means.new_empty((B, N, 3)),
        means.new_empty((B, N, 6) if by_covars else (0,)),
        means.new_empty((0,) if by_covars else (B, N, 4)),
        means.new_empty((0,) if by_covars else (B, N, 3)),
        means.new_empty((B, C, 4, 4) if viewmats_requires_grad else (0,)),
    )


def _check_proj_fake(op, means, covars, Ks, camera_model):
    torch._check(
        means.dim() == 3 and means.shape[2] == 3, lambda: f"{op}: means must have shape (I, N, 3)"
    )
    I, N = means.shape[0], means.shape[1]
    torch._check(covars.shape == (I, N, 3, 3), lambda: f"{op}: covars must have shape (I, N, 3, 3)")
    torch._check(Ks.shape == (I, 3, 3), lambda: f"{op}: Ks must have shape (I, 3, 3)")
    _check_camera_model_fake(op, camera_model)
    check_same_devices(op, means=means, covars=covars, Ks=Ks)
    check_float32(op, means=means, covars=covars, Ks=Ks)
    return I, N


def _proj_forward_fake(means, covars, Ks, width, height, camera_model):
    I, N = _check_proj_fake(_PROJ_FWD, means, covars, Ks, camera_model)
    return means.new_empty((I, N, 2)), means.new_empty((I, N, 2, 2))


def _proj_backward_fake(means, covars, Ks, width, height, camera_model, v_means2d, v_covars2d):
    I, N = _check_proj_fake(_PROJ_BWD, means, covars, Ks, camera_model)
    torch._check(v_means2d.shape == (I, N, 2), lambda: f"{_PROJ_BWD}: v_means2d must be (I, N, 2)")
    torch._check(
        v_covars2d.shape == (I, N, 2, 2), lambda: f"{_PROJ_BWD}: v_covars2d must be (I, N, 2, 2)"
    )
    check_float32(_PROJ_BWD, v_means2d=v_means2d, v_covars2d=v_covars2d)
    return means.new_empty((I, N, 3)), means.new_empty((I, N, 3, 3))


# ---------------------------------------------------------------------------- autograd


def _setup_context(ctx, inputs, output) -> None:
    # opacities (inputs[4]) only bound the radii: the backward needs nothing of them.
    means, covars, quats, scales, _opacities, viewmats, Ks, width, height, eps2d = inputs[:10]
    _means2d, _depths, conics, compensations, radii = output
    ctx.save_for_backward(means, covars, quats, scales, viewmats, Ks, radii, conics, compensations)
    ctx.width, ctx.height, ctx.eps2d = width, height, eps2d
    ctx.calc_compensations, ctx.camera_model = inputs[13], inputs[14]
    ctx.mark_non_differentiable(radii)
    ctx.set_materialize_grads(False)  # unused outputs: no zeros written (the backward handles None)


def _backward(ops, ctx, v_means2d, v_depths, v_conics, v_compensations, _v_radii):
    means, covars, quats, scales, viewmats, Ks, radii, conics, compensations = ctx.saved_tensors

    def grad(g, last):  # incoming gradient of a (B, C, N[, last]) output, zeros when None
        if g is not None:
            return g.contiguous()
        return conics.new_zeros(conics.shape[:3] + ((last,) if last else ()))

    # (0,): no gradient (the kernel's zeros, no tensor of them written): the compensations'
    # without calc_compensations or when unused, the depths' when the loss does not use them
    # (rasterization() only sorts by them, in the usual RGB modes).
    none = means.new_empty((0,))
    if ctx.calc_compensations and v_compensations is not None:
        v_comp = v_compensations.contiguous()
    else:
        v_comp = none
    need = ctx.needs_input_grad
    v_means, v_covars, v_quats, v_scales, v_viewmats = ops.fully_fused_projection_backward(
        means,
        covars,
        quats,
        scales,
        viewmats,
        Ks,
        ctx.width,
        ctx.height,
        ctx.eps2d,
        ctx.camera_model,
        radii,
        conics,
        compensations,
        grad(v_means2d, 2),
        none if v_depths is None else v_depths.contiguous(),
        grad(v_conics, 3),
        v_comp,
        need[5],
    )
    return (
        v_means if need[0] else None,
        v_covars if need[1] and covars is not None else None,
        v_quats if need[2] and quats is not None else None,
        v_scales if need[3] and scales is not None else None,
        None,  # opacities: the radii they bound are not differentiable (as gsplat)
        v_viewmats if need[5] else None,
        *([None] * 9),  # Ks (no gradient), then the non-tensor arguments
    )


def _proj_setup_context(ctx, inputs, output) -> None:
    means, covars, Ks, width, height, camera_model = inputs
    ctx.save_for_backward(means, covars, Ks)
    ctx.width, ctx.height, ctx.camera_model = width, height, camera_model


def _proj_backward(ops, ctx, v_means2d, v_covars2d):
    means, covars, Ks = ctx.saved_tensors
    if v_means2d is None:
        v_means2d = means.new_zeros(means.shape[:2] + (2,))
    if v_covars2d is None:
        v_covars2d = means.new_zeros(means.shape[:2] + (2, 2))
    v_means, v_covars = ops.proj_backward(
        means,
        covars,
        Ks,
        ctx.width,
        ctx.height,
        ctx.camera_model,
        v_means2d.contiguous(),
        v_covars2d.contiguous(),
    )
    need = ctx.needs_input_grad
    return v_means if need[0] else None, v_covars if need[1] else None, None, None, None, None


register_ops(
    fakes={
        "fully_fused_projection_forward": _forward_fake,
        "fully_fused_projection_backward": _backward_fake,
        "proj_forward": _proj_forward_fake,
        "proj_backward": _proj_backward_fake,
    },
    formulas={
        "fully_fused_projection_forward": (_setup_context, _backward),
        "proj_forward": (_proj_setup_context, _proj_backward),
    },
    no_double_backward=(
        "fully_fused_projection_backward",
        "proj_backward",
    ),
    double_backward_error="prebuild's projection ops do not support double backward; use "
    "gsplat's plain-PyTorch projection for second derivatives",
    fast=("fully_fused_projection_forward",),
)
