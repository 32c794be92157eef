"""prebuild.spherical_harmonics and its ops against gsplat 1.5.3's plain-PyTorch oracle
(``_torch_impl._spherical_harmonics``).

Both backends run the same checks: the CPU library (torch.ops.prebuild) and the CUDA block
bodies run by the SIMT launcher (prebuild.testing.simt, marked simt). The central comparison
is gsplat's own test_sh: degrees 0-4, batch dims (), (2,), (1, 2) of 1000 directions with 25
coefficients each, values and gradients within rtol = atol = 1e-4.
"""

from __future__ import annotations

import math

import pytest
import torch
from compiled import assert_compiled_matches_eager
from gsplat_oracle import torch_impl
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import prebuild
from prebuild.ops.sh import spherical_harmonics
from prebuild.testing import simt

CPU = torch.ops.prebuild
BACKENDS = [
    pytest.param(CPU, id="cpu"),
    pytest.param(simt, id="simt", marks=pytest.mark.simt),
]
DEGREES = [0, 1, 2, 3, 4]
BATCH_DIMS = [(), (2,), (1, 2)]
TOL = dict(rtol=1e-4, atol=1e-4)  # gsplat's test_sh


def gsplat_data(batch_dims, N=1000, K=25, seed=42):
    """gsplat's test_sh inputs: N random directions and their K x 3 coefficients, expanded
    (stride 0, not copied) to ``batch_dims + (N, ...)``."""
    gen = torch.Generator().manual_seed(seed)
    coeffs = torch.randn(N, K, 3, generator=gen)
    dirs = torch.randn(N, 3, generator=gen)
    if batch_dims:
        coeffs = coeffs.expand(batch_dims + coeffs.shape)
        dirs = dirs.expand(batch_dims + dirs.shape)
    return dirs, coeffs


def oracle(degree, dirs, coeffs, v_colors, masks=None):
    """gsplat's _spherical_harmonics in the inputs' dtype, and its gradients for the incoming
    gradient v_colors: (colors, v_coeffs, v_dirs). Masked rows are zero; v_dirs is zero
    where the oracle does not use dirs (degree 0)."""
    d = dirs.detach().clone().requires_grad_(True)
    c = coeffs.detach().clone().requires_grad_(True)
    colors = torch_impl._spherical_harmonics(degree, d, c)
    if masks is not None:
        colors = torch.where(masks[..., None], colors, 0.0)
    v_coeffs, v_dirs = torch.autograd.grad((colors * v_colors).sum(), (c, d), allow_unused=True)
    return colors.detach(), v_coeffs, torch.zeros_like(d) if v_dirs is None else v_dirs


def randn_like(t, seed=7):
    return torch.randn(t.shape, generator=torch.Generator().manual_seed(seed), dtype=t.dtype)


# ----------------------------------------------------- 1. the ops against the oracle


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch_dims", BATCH_DIMS)
@pytest.mark.parametrize("degree", DEGREES)
def test_ops_match_the_oracle(backend, degree, batch_dims):
    dirs, coeffs = gsplat_data(batch_dims)
    d, c = dirs.contiguous(), coeffs.contiguous()
    colors = backend.spherical_harmonics_forward(degree, d, c, None)
    assert colors.shape == (*batch_dims, 1000, 3) and colors.dtype == torch.float32
    v = randn_like(colors)
    v_coeffs, v_dirs = backend.spherical_harmonics_backward(degree, d, c, None, v, True)
    ref_colors, ref_v_coeffs, ref_v_dirs = oracle(degree, dirs, coeffs, v)
    torch.testing.assert_close(colors, ref_colors, **TOL)
    assert v_coeffs.shape == coeffs.shape and v_dirs.shape == dirs.shape
    torch.testing.assert_close(v_coeffs, ref_v_coeffs, **TOL)
    torch.testing.assert_close(v_dirs, ref_v_dirs, **TOL)
    if degree == 0:  # gsplat's kernel: zeros for the direction, which degree 0 does not read
        assert (v_dirs == 0).all()
    # Coefficients past (degree + 1)^2 are not used: exactly zero gradient.
    assert (v_coeffs[..., (degree + 1) ** 2 :, :] == 0).all()


@pytest.mark.parametrize("batch_dims", BATCH_DIMS)
@pytest.mark.parametrize("degree", DEGREES)
def test_public_function_as_gsplat_test_sh(degree, batch_dims):
    """gsplat 1.5.3's test_sh with prebuild's function: expanded leaves, autograd."""
    torch.manual_seed(42)
    dirs, coeffs = gsplat_data(batch_dims)
    coeffs.requires_grad = True
    dirs.requires_grad = True
    colors = spherical_harmonics(degree, dirs, coeffs)
    _colors = torch_impl._spherical_harmonics(degree, dirs, coeffs)
    torch.testing.assert_close(colors, _colors, **TOL)
    v_colors = torch.randn_like(colors)
    v_coeffs, v_dirs = torch.autograd.grad(
        (colors * v_colors).sum(), (coeffs, dirs), retain_graph=True, allow_unused=True
    )
    _v_coeffs, _v_dirs = torch.autograd.grad(
        (_colors * v_colors).sum(), (coeffs, dirs), retain_graph=True, allow_unused=True
    )
    torch.testing.assert_close(v_coeffs, _v_coeffs, **TOL)
    if degree > 0:
        torch.testing.assert_close(v_dirs, _v_dirs, **TOL)
    else:
        assert _v_dirs is None and torch.equal(v_dirs, torch.zeros_like(dirs))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "degree, K", [(0, 1), (1, 4), (1, 7), (2, 9), (2, 10), (3, 16), (4, 25), (4, 30)]
)
def test_any_k_from_the_degree_up(backend, degree, K):
    """K = (degree + 1)^2 exactly, or more (square or not, as gsplat): the extra
    coefficients are ignored and get zero gradient."""
    dirs, coeffs = gsplat_data((), N=64, K=K, seed=degree * 100 + K)
    colors = backend.spherical_harmonics_forward(degree, dirs, coeffs, None)
    v = randn_like(colors)
    v_coeffs, v_dirs = backend.spherical_harmonics_backward(degree, dirs, coeffs, None, v, True)
    ref = oracle(degree, dirs.double(), coeffs.double(), v.double())
    for got, want in zip((colors, v_coeffs, v_dirs), ref):
        torch.testing.assert_close(got.double(), want, **TOL)
    nb = (degree + 1) ** 2
    same = backend.spherical_harmonics_forward(degree, dirs, coeffs[:, :nb].contiguous(), None)
    assert torch.equal(colors, same)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("degree", [0, 3])
def test_masks_skip_directions(backend, degree):
    dirs, coeffs = gsplat_data((2,), N=50)
    d, c = dirs.contiguous(), coeffs.contiguous()
    masks = torch.rand(2, 50, generator=torch.Generator().manual_seed(3)) < 0.6
    full = backend.spherical_harmonics_forward(degree, d, c, None)
    colors = backend.spherical_harmonics_forward(degree, d, c, masks)
    assert torch.equal(colors[masks], full[masks])
    assert (colors[~masks] == 0).all()  # gsplat leaves them uninitialised
    v = randn_like(colors)
    v_coeffs, v_dirs = backend.spherical_harmonics_backward(degree, d, c, masks, v, True)
    full_grads = backend.spherical_harmonics_backward(degree, d, c, None, v, True)
    assert (v_coeffs[~masks] == 0).all() and (v_dirs[~masks] == 0).all()
    assert torch.equal(v_coeffs[masks], full_grads[0][masks])
    assert torch.equal(v_dirs[masks], full_grads[1][masks])
    ref = oracle(degree, dirs, coeffs, v, masks)
    for got, want in zip((colors, v_coeffs, v_dirs), ref):
        torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_directions(backend):
    for batch_dims, N in (((), 0), ((2,), 0), ((0,), 5)):
        dirs, coeffs = gsplat_data((), N=N, K=9)
        dirs = dirs.expand(*batch_dims, N, 3).contiguous()
        coeffs = coeffs.expand(*batch_dims, N, 9, 3).contiguous()
        colors = backend.spherical_harmonics_forward(2, dirs, coeffs, None)
        assert colors.shape == dirs.shape
        v_coeffs, v_dirs = backend.spherical_harmonics_backward(2, dirs, coeffs, None, colors, True)
        assert v_coeffs.shape == coeffs.shape and v_dirs.shape == dirs.shape


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_without_v_dirs(backend):
    dirs, coeffs = gsplat_data((), N=20)
    v = randn_like(dirs)
    v_coeffs, v_dirs = backend.spherical_harmonics_backward(3, dirs, coeffs, None, v, False)
    assert v_dirs.shape == (0,)
    with_v_dirs = backend.spherical_harmonics_backward(3, dirs, coeffs, None, v, True)
    assert torch.equal(v_coeffs, with_v_dirs[0])


@pytest.mark.simt
@pytest.mark.parametrize("degree", DEGREES)
def test_simt_equals_cpu(degree):
    """The same per-direction code, one thread per direction, no atomics: bit for bit."""
    dirs, coeffs = gsplat_data((), N=700, seed=degree)
    masks = torch.rand(700, generator=torch.Generator().manual_seed(degree)) < 0.8
    v = randn_like(dirs)
    for m in (None, masks):
        assert torch.equal(
            CPU.spherical_harmonics_forward(degree, dirs, coeffs, m),
            simt.spherical_harmonics_forward(degree, dirs, coeffs, m),
        )
        for a, b in zip(
            CPU.spherical_harmonics_backward(degree, dirs, coeffs, m, v, True),
            simt.spherical_harmonics_backward(degree, dirs, coeffs, m, v, True),
        ):
            assert torch.equal(a, b)


# ------------------------------------------------------------ 2. special directions


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("degree", [1, 4])
def test_zero_tiny_and_huge_directions(backend, degree):
    """A zero or tiny (< 1e-12) direction is normalised as F.normalize does (gsplat's PyTorch
    implementation: the zero vector, not gsplat's kernel's NaN), gradients included; a
    direction whose squared norm overflows float32 still gets its unit vector."""
    dirs = torch.tensor(
        [
            [0.0, 0.0, 0.0],
            [1e-30, -2e-30, 0.0],
            [3e-13, 0.0, 4e-13],
            [1e30, -2e30, 3e30],
            [3e38, 3e38, -3e38],
            [0.3, -0.5, 0.8],
        ]
    )
    coeffs = torch.randn(len(dirs), 25, 3, generator=torch.Generator().manual_seed(1))
    v = randn_like(dirs)
    colors = backend.spherical_harmonics_forward(degree, dirs, coeffs, None)
    v_coeffs, v_dirs = backend.spherical_harmonics_backward(degree, dirs, coeffs, None, v, True)
    assert torch.isfinite(colors).all() and torch.isfinite(v_coeffs).all()
    ref = oracle(degree, dirs.double(), coeffs.double(), v.double())
    torch.testing.assert_close(colors.double(), ref[0], **TOL)
    torch.testing.assert_close(v_coeffs.double(), ref[1], **TOL)
    # The huge directions: the unit direction's colours, scaled-down gradients.
    unit = dirs[3:5].double() / dirs[3:5].double().norm(dim=-1, keepdim=True)
    torch.testing.assert_close(
        colors[3:5].double(), oracle(degree, unit, coeffs[3:5].double(), v[3:5].double())[0], **TOL
    )
    # Gradients are relative to 1 / max(|d|, 1e-12): up to 1e12 for the tiny ones.
    scale = ref[2].abs().amax(-1, keepdim=True).clamp_min(1e-30)
    torch.testing.assert_close(v_dirs.double() / scale, ref[2] / scale, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_directions_give_non_finite_colours(backend, value):
    dirs = torch.tensor([[value, 0.5, 0.5], [0.1, 0.2, 0.3]])
    coeffs = torch.randn(2, 16, 3, generator=torch.Generator().manual_seed(2))
    v = torch.ones(2, 3)
    for degree in (1, 2, 3):
        colors = backend.spherical_harmonics_forward(degree, dirs, coeffs, None)
        assert torch.isnan(colors[0]).all() and torch.isfinite(colors[1]).all()
        v_coeffs, v_dirs = backend.spherical_harmonics_backward(degree, dirs, coeffs, None, v, True)
        assert torch.isnan(v_dirs[0]).all() and torch.isfinite(v_dirs[1]).all()
    # Degree 0 does not read the direction (gsplat's kernel neither).
    colors = backend.spherical_harmonics_forward(0, dirs, coeffs, None)
    assert torch.isfinite(colors).all()
    # A masked direction is skipped, whatever its value.
    masks = torch.tensor([False, True])
    assert (backend.spherical_harmonics_forward(3, dirs, coeffs, masks)[0] == 0).all()


# ----------------------------------------------------------- 3. the public function


def test_public_function_is_exported():
    assert prebuild.spherical_harmonics is spherical_harmonics
    from prebuild.ops import spherical_harmonics as from_ops

    assert from_ops is spherical_harmonics


def test_public_function_with_masks_and_batch_dims():
    dirs, coeffs = gsplat_data((1, 2), N=30)
    masks = (torch.arange(60).reshape(1, 2, 30) % 3) > 0
    c = coeffs.clone().requires_grad_(True)
    d = dirs.clone().requires_grad_(True)
    colors = spherical_harmonics(3, d, c, masks)
    v = randn_like(colors)
    (colors * v).sum().backward()
    ref = oracle(3, dirs, coeffs, v, masks)
    for got, want in zip((colors, c.grad, d.grad), ref):
        torch.testing.assert_close(got, want, **TOL)
    assert (colors[~masks] == 0).all()


def test_degree_zero_gives_dirs_zero_gradient():
    dirs, coeffs = gsplat_data((), N=10)
    d = dirs.clone().requires_grad_(True)
    c = coeffs.clone().requires_grad_(True)
    spherical_harmonics(0, d, c).sum().backward()
    assert torch.equal(d.grad, torch.zeros_like(d))
    assert torch.equal(c.grad[:, 0], torch.full((10, 3), 0.2820947917738781))
    assert (c.grad[:, 1:] == 0).all()


def test_gradient_only_where_asked():
    dirs, coeffs = gsplat_data((), N=10)
    c = coeffs.clone().requires_grad_(True)
    spherical_harmonics(2, dirs, c).sum().backward()
    assert c.grad is not None and dirs.grad is None
    d = dirs.clone().requires_grad_(True)
    spherical_harmonics(2, d, coeffs).sum().backward()
    ref = oracle(2, dirs, coeffs, torch.ones(10, 3))
    torch.testing.assert_close(d.grad, ref[2], **TOL)


def test_float64_and_float16_inputs_are_converted():
    dirs, coeffs = gsplat_data((2,), N=40)
    ref = spherical_harmonics(4, dirs, coeffs)
    d64 = dirs.double().requires_grad_(True)
    c64 = coeffs.double().requires_grad_(True)
    out = spherical_harmonics(4, d64, c64)
    assert out.dtype == torch.float32 and torch.equal(out, ref)
    out.sum().backward()
    assert d64.grad.dtype == torch.float64 and c64.grad.dtype == torch.float64
    d16 = dirs.half().requires_grad_(True)
    c16 = coeffs.half().requires_grad_(True)
    half = spherical_harmonics(4, d16, c16)
    assert half.dtype == torch.float32
    assert torch.equal(half, spherical_harmonics(4, d16.float(), c16.float()))
    half.sum().backward()
    assert d16.grad.dtype == torch.float16 and c16.grad.dtype == torch.float16
    mixed = spherical_harmonics(4, dirs.bfloat16(), coeffs)
    assert mixed.dtype == torch.float32


def test_non_contiguous_inputs():
    dirs, coeffs = gsplat_data((), N=12)
    d_t = dirs.t().contiguous().t()  # same values, column-major
    c_t = coeffs.transpose(1, 2).contiguous().transpose(1, 2)
    masks = torch.ones(24, dtype=torch.bool)[::2]
    out = spherical_harmonics(2, d_t, c_t, masks)
    assert torch.equal(out, spherical_harmonics(2, dirs, coeffs))


def test_meta_tensors_give_shapes():
    dirs = torch.empty(2, 7, 3, device="meta")
    coeffs = torch.empty(2, 7, 16, 3, device="meta")
    out = spherical_harmonics(3, dirs, coeffs, torch.ones(2, 7, dtype=torch.bool, device="meta"))
    assert out.shape == (2, 7, 3) and out.device.type == "meta" and out.dtype == torch.float32


# ----------------------------------------------------------- 4. opcheck, torch.compile


OPCHECK_CASES = pytest.mark.parametrize(
    "degree, batch_dims, with_masks",
    [(0, (), False), (1, (2,), True), (3, (), True), (4, (1, 2), False), (2, (3,), False)],
)


def _opcheck_inputs(degree, batch_dims, with_masks):
    dirs, coeffs = gsplat_data(batch_dims, N=9, K=(degree + 1) ** 2 + 1, seed=degree)
    dirs, coeffs = dirs.contiguous(), coeffs.contiguous()
    masks = None
    if with_masks:
        masks = torch.rand(dirs.shape[:-1], generator=torch.Generator().manual_seed(0)) < 0.7
    return dirs, coeffs, masks


@OPCHECK_CASES
def test_opcheck_forward(degree, batch_dims, with_masks):
    dirs, coeffs, masks = _opcheck_inputs(degree, batch_dims, with_masks)
    args = (degree, dirs.requires_grad_(True), coeffs.requires_grad_(True), masks)
    torch.library.opcheck(CPU.spherical_harmonics_forward.default, args)


@OPCHECK_CASES
@pytest.mark.parametrize("compute_v_dirs", [True, False])
def test_opcheck_backward(degree, batch_dims, with_masks, compute_v_dirs):
    dirs, coeffs, masks = _opcheck_inputs(degree, batch_dims, with_masks)
    args = (degree, dirs, coeffs, masks, randn_like(dirs), compute_v_dirs)
    torch.library.opcheck(CPU.spherical_harmonics_backward.default, args)


def test_torch_compile_fullgraph_with_backward():
    dirs, coeffs = gsplat_data((2,), N=40)
    masks = torch.arange(40).expand(2, 40) % 5 > 0

    def loss_fn(d, c):
        colors = spherical_harmonics(3, d, c, masks)
        return (colors + 0.5).clamp(0, 1).square().sum()

    assert_compiled_matches_eager(loss_fn, dirs, coeffs)


def test_double_backward_is_refused():
    dirs, coeffs = gsplat_data((), N=5)
    c = coeffs.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(spherical_harmonics(2, dirs, c).square().sum(), c, create_graph=True)
    with pytest.raises(NotImplementedError, match="double backward"):
        g.sum().backward()


# ----------------------------------------------------------------------- 5. bad input


def _call(**changes):
    dirs, coeffs = gsplat_data((2,), N=6, K=9)
    kwargs = dict(degrees_to_use=2, dirs=dirs, coeffs=coeffs, masks=None)
    kwargs.update(changes)
    return spherical_harmonics(**kwargs)


@pytest.mark.parametrize(
    "changes, exc, fragment",
    [
        ({"degrees_to_use": 5}, ValueError, "at most 4"),
        ({"degrees_to_use": -1}, ValueError, "non-negative"),
        ({"degrees_to_use": 2.0}, TypeError, "degrees_to_use must be an int"),
        ({"degrees_to_use": True}, TypeError, "degrees_to_use must be an int"),
        ({"degrees_to_use": 3}, ValueError, r"needs \(degree \+ 1\)\^2 = 16 coefficients .* K = 9"),
        ({"dirs": torch.zeros(2, 6, 2)}, ValueError, r"dirs must have shape \[\.\.\., 3\]"),
        ({"dirs": torch.zeros(())}, ValueError, r"dirs must have shape \[\.\.\., 3\]"),
        ({"dirs": [[0.0, 0.0, 1.0]]}, TypeError, "dirs must be a torch.Tensor"),
        ({"dirs": torch.zeros(2, 6, 3, dtype=torch.int64)}, TypeError, "floating point"),
        ({"coeffs": torch.zeros(2, 6, 9, 3, dtype=torch.bool)}, TypeError, "coeffs has dtype"),
        ({"coeffs": torch.zeros(1, 6, 9, 3)}, ValueError, "not broadcast"),
        ({"coeffs": torch.zeros(6, 9, 3)}, ValueError, "batch dimensions of dirs"),
        (
            {"coeffs": torch.zeros(2, 6, 9, 4)},
            ValueError,
            r"coeffs must have shape \[\.\.\., K, 3\]",
        ),
        ({"masks": torch.ones(2, 6)}, TypeError, "masks must be bool"),
        ({"masks": torch.ones(6, dtype=torch.bool)}, ValueError, r"masks must have shape \[2, 6\]"),
        ({"masks": torch.ones(2, 6, dtype=torch.bool, device="meta")}, ValueError, "same device"),
        ({"coeffs": torch.zeros(2, 6, 9, 3, device="meta")}, ValueError, "same device"),
    ],
)
def test_bad_inputs_raise(changes, exc, fragment):
    with pytest.raises(exc, match=fragment):
        _call(**changes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_ops_refuse_bad_input(backend):
    dirs, coeffs = gsplat_data((2,), N=6, K=9)
    d, c = dirs.contiguous(), coeffs.contiguous()
    fwd, bwd = backend.spherical_harmonics_forward, backend.spherical_harmonics_backward
    with pytest.raises(RuntimeError, match=r"degrees_to_use must be in \[0, 4\], got 5"):
        fwd(5, d, c, None)
    with pytest.raises(RuntimeError, match="degree 3 needs 16 coefficients per channel, .* K = 9"):
        fwd(3, d, c, None)
    with pytest.raises(RuntimeError, match=r"dirs \[\.\.\., 3\] must be float32"):
        fwd(2, d.double(), c, None)
    with pytest.raises(RuntimeError, match="coeffs .* must be contiguous"):
        fwd(2, d, coeffs, None)
    with pytest.raises(RuntimeError, match="coeffs must have shape"):
        fwd(2, d, c[:1].contiguous(), None)
    with pytest.raises(RuntimeError, match=r"dirs must have shape \[\.\.\., 3\]"):
        fwd(2, d[..., :2].contiguous(), c, None)
    with pytest.raises(RuntimeError, match="masks must be bool"):
        fwd(2, d, c, torch.ones(2, 6))
    with pytest.raises(RuntimeError, match="masks must have the batch shape"):
        fwd(2, d, c, torch.ones(6, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="v_colors and dirs must have the same shape"):
        bwd(2, d, c, None, d[:1].contiguous(), True)
    with pytest.raises(RuntimeError, match=r"v_colors \[\.\.\., 3\] must be float32"):
        bwd(2, d, c, None, d.double(), True)


# ------------------------------------------------------------ 6. property-based test

SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
SPECIALS = [math.nan, math.inf, -math.inf, 1e30, -1e30, 0.0, 1e-30]


@st.composite
def sh_inputs(draw):
    """(degree, dirs, coeffs, masks) of a random batch shape, maybe with special values
    planted, a zero direction, non-contiguous layouts and other float dtypes."""
    batch = tuple(draw(st.lists(st.integers(0, 4), max_size=2), label="batch dims"))
    degree = draw(st.integers(0, 4), label="degree")
    K = (degree + 1) ** 2 + draw(st.integers(0, 3), label="extra K")
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    dirs = torch.randn(*batch, 3, generator=gen, dtype=torch.float64)
    coeffs = torch.randn(*batch, K, 3, generator=gen, dtype=torch.float64)
    n = dirs.numel() // 3
    for _ in range(draw(st.integers(0, 3)) if n else 0):
        t = draw(st.sampled_from([dirs, coeffs]))
        t.view(-1)[draw(st.integers(0, t.numel() - 1))] = draw(st.sampled_from(SPECIALS))
    if n and draw(st.booleans()):
        dirs.view(-1, 3)[draw(st.integers(0, n - 1))] = 0.0
    masks = None
    if draw(st.booleans()):
        masks = torch.rand(batch, generator=gen) < 0.7
    if draw(st.booleans()) and n:  # a non-contiguous view of the same values
        coeffs = coeffs.transpose(-1, -2).contiguous().transpose(-1, -2)
        dirs = torch.repeat_interleave(dirs, 2, dim=-1)[..., ::2]
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]))
    return degree, dirs.to(dtype), coeffs.to(dtype), masks


def _row_bound(degree, dirs, coeffs, v):
    """Per direction, the scale of the float32 rounding errors of its outputs: 1 + the sum
    of |coefficient| (|basis| <= 1) for the colours; for v_dirs, 1 + 40 sum |coeff| |v| /
    max(|dir|, 1e-12) (|basis'| <= 20, and the projection at most doubles it)."""
    used = coeffs.abs()
    color_scale = 1 + used.sum((-1, -2))
    inv_norm = 1 / dirs.norm(dim=-1).clamp_min(1e-12)
    grad_scale = 1 + 40 * inv_norm * (used * v.abs()[..., None, :]).sum((-1, -2))
    return color_scale, grad_scale


def _assert_rows_close(got, want, scale, what):
    """got equals want within 1e-4 * scale (per direction) plus the rounding to got's dtype
    (gradients come back in the input's dtype), where want is finite and fits that dtype and
    the scale fits float32 (beyond them, got may overflow where the float64 oracle does not);
    got is not finite where want is not."""
    finite = torch.isfinite(want)
    assert not torch.isfinite(got[~finite]).any(), f"{what}: finite where the oracle is not"
    info = torch.finfo(got.dtype)
    scale = scale.reshape(scale.shape + (1,) * (want.dim() - scale.dim())).expand_as(want)
    limit = 1e-4 * scale + info.eps * want.abs()
    err = (got.double() - want).abs()
    checked = finite & (scale < 1e31) & (want.abs() < info.max / 2)
    bad = checked & ~(err <= limit)
    assert not bad.any(), f"{what}: errors {err[bad][:5].tolist()} above {limit[bad][:5].tolist()}"


@SETTINGS
@given(inputs=sh_inputs())
def test_property_matches_the_oracle_or_is_non_finite(inputs):
    """Values and gradients equal the float64 oracle (on the float32 values the kernels see)
    wherever it is finite; where a NaN or infinity reaches the oracle's result, ours is not
    finite either. Masked directions are zero whatever their inputs."""
    degree, dirs, coeffs, masks = inputs
    d = dirs.detach().clone().requires_grad_(True)
    c = coeffs.detach().clone().requires_grad_(True)
    colors = spherical_harmonics(degree, d, c, masks)
    assert colors.shape == dirs.shape and colors.dtype == torch.float32
    v = torch.randn(colors.shape, generator=torch.Generator().manual_seed(5))
    (colors * v).sum().backward()
    got = (colors, c.grad, d.grad)
    assert c.grad.dtype == coeffs.dtype and d.grad.dtype == dirs.dtype
    keep = torch.ones(dirs.shape[:-1], dtype=torch.bool) if masks is None else masks
    for t in got:  # masked directions: zeros, whatever their inputs
        assert (t[~keep] == 0).all()
    # Coefficients past (degree + 1)^2 are never read (gsplat's kernel neither; its PyTorch
    # implementation multiplies them by 0, so a NaN there would make its colours NaN).
    nb = (degree + 1) ** 2
    assert (c.grad[..., nb:, :] == 0).all()
    # The oracle on the float32 values the kernels see, for the directions not masked.
    d64, v64 = dirs.float().double()[keep], v.double()[keep]
    c64 = coeffs.float().double()[keep][..., :nb, :]
    ref = oracle(degree, d64, c64, v64)
    event(f"non-finite oracle colours: {bool((~torch.isfinite(ref[0])).any())}")
    color_scale, grad_scale = _row_bound(degree, d64, c64, v64)
    _assert_rows_close(got[0][keep], ref[0], color_scale, "colors")
    _assert_rows_close(got[1][keep][..., :nb, :], ref[1], 1 + v64.abs().sum(-1), "v_coeffs")
    if degree > 0:
        _assert_rows_close(got[2][keep], ref[2], grad_scale, "v_dirs")
    else:
        assert (got[2] == 0).all()
