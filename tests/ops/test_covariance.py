"""prebuild.quat_scale_to_covar_preci and its ops against gsplat 1.5.3's plain-PyTorch oracle
(``_quat_scale_to_covar_preci``).

Both backends run the same checks: the CPU library (torch.ops.prebuild) and the CUDA block
bodies run by the SIMT launcher (prebuild.testing.simt, marked simt, fewer Gaussians). The
public function is exercised on the CPU backend, the simt backend through its raw ops.

Two kinds of data: gsplat's (its test's load_test_data: unit quaternions, scales uniform in
[0, 0.02), so precisions reach 1e10) checked with gsplat's own test and tolerances, and
moderate scales checked much more tightly against the oracle in float64, per Gaussian
(relative to the largest entry of its matrix or gradient: entries of one matrix differ by
orders of magnitude and cancel).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from compiled import assert_compiled_matches_eager
from gsplat_oracle import torch_impl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prebuild
from prebuild.ops.covariance import quat_scale_to_covar_preci
from prebuild.testing import simt

CPU = torch.ops.prebuild
BACKENDS = [
    pytest.param(CPU, id="cpu"),
    pytest.param(simt, id="simt", marks=pytest.mark.simt),
]
BATCH_DIMS = pytest.mark.parametrize("batch_dims", [(), (2,), (1, 2)], ids=str)
TRIU = pytest.mark.parametrize("triu", [False, True], ids=["full", "triu"])
# (compute_covar, compute_preci)
FLAGS = [(True, True), (True, False), (False, True)]
# Tolerances against the float64 oracle, relative to the largest entry per Gaussian.
FORWARD_REL = 1e-5
BACKWARD_REL = 1e-3


def count(backend):
    """Gaussians per batch element: the simt launcher runs a fiber per thread."""
    return 100 if backend is simt else 1000


def gsplat_gaussians(n, seed=0):
    """Distributed as gsplat's load_test_data makes them: (quats, scales) [n, 4], [n, 3]."""
    gen = torch.Generator().manual_seed(seed)
    scales = torch.rand((n, 3), generator=gen) * 0.02
    quats = F.normalize(torch.randn((n, 4), generator=gen), dim=-1)
    return quats, scales


def gaussians(shape, seed=0):
    """Unnormalised quats (shape + (4,)) and moderate scales (shape + (3,)), 0.08 to 0.6."""
    gen = torch.Generator().manual_seed(seed)
    quats = torch.randn((*shape, 4), generator=gen) * 2
    scales = torch.exp(torch.randn((*shape, 3), generator=gen) * 0.4 - 1.5)
    return quats, scales


def oracle(quats, scales, compute_covar=True, compute_preci=True, triu=False):
    return torch_impl._quat_scale_to_covar_preci(quats, scales, compute_covar, compute_preci, triu)


def oracle64(quats, scales, compute_covar=True, compute_preci=True, triu=False):
    return oracle(quats.double(), scales.double(), compute_covar, compute_preci, triu)


def matrix_dims(triu):
    return 1 if triu else 2


def assert_close_per_gaussian(got, want, rel, dims, msg="", floor=0.0):
    """|got - want| <= rel * (largest |want| of the same Gaussian, at least `floor`), the
    last `dims` dims being one Gaussian's entries. `floor` (per Gaussian, keeping those dims
    as size 1) stands in where the true values cancel to about zero."""
    assert got.shape == want.shape, (msg, got.shape, want.shape)
    axes = tuple(range(-dims, 0))
    scale = (
        torch.maximum(want.abs().amax(dim=axes, keepdim=True), torch.as_tensor(floor)).double()
        if want.numel()
        else want
    )
    err = (got.double() - want).abs()
    worst = (err / scale.clamp_min(1e-30)).max().item() if want.numel() else 0.0
    assert worst <= rel, f"{msg}: worst error {worst:.3g} of the Gaussian's largest entry > {rel}"


def raw_backward(backend, quats, scales, triu, v_covars, v_precis):
    return backend.quat_scale_to_covar_preci_backward(quats, scales, triu, v_covars, v_precis)


# ------------------------------------------------ 1. gsplat's own test, its tolerances


def _gsplat_incoming(covars, precis):
    torch.manual_seed(42)
    return torch.randn_like(covars), torch.randn_like(precis) * 0.01


@BATCH_DIMS
@TRIU
def test_gsplat_test_public_function(triu, batch_dims):
    """gsplat 1.5.3's test_quat_scale_to_covar_preci through the public function: inputs
    expanded to the batch dimensions (stride 0, not contiguous) as gsplat's test does."""
    quats, scales = gsplat_gaussians(2000)
    if batch_dims:
        quats = quats.expand(batch_dims + quats.shape)
        scales = scales.expand(batch_dims + scales.shape)
        assert not quats.is_contiguous() and 0 in quats.stride()
    quats.requires_grad = True
    scales.requires_grad = True

    covars, precis = quat_scale_to_covar_preci(quats, scales, triu=triu)
    _covars, _precis = oracle(quats, scales, triu=triu)
    torch.testing.assert_close(covars, _covars)
    # gsplat's check is loose here (the covariances are below its atol of 1e-5) and leaves
    # the precisions (up to 1e10) unchecked: check both against float64 too.
    for got, want, name in zip(
        (covars, precis), oracle64(quats, scales, triu=triu), ("covars", "precis")
    ):
        assert_close_per_gaussian(got, want, FORWARD_REL, matrix_dims(triu), name)

    v_covars, v_precis = _gsplat_incoming(covars, precis)
    v_quats, v_scales = torch.autograd.grad(
        (covars * v_covars + precis * v_precis).sum(), (quats, scales)
    )
    _v_quats, _v_scales = torch.autograd.grad(
        (_covars * v_covars + _precis * v_precis).sum(), (quats, scales)
    )
    assert v_quats.shape == quats.shape and v_scales.shape == scales.shape
    torch.testing.assert_close(v_quats, _v_quats, rtol=1e0, atol=1e-1)
    torch.testing.assert_close(v_scales, _v_scales, rtol=1e0, atol=1e-1)


@pytest.mark.parametrize("backend", BACKENDS)
@BATCH_DIMS
@TRIU
def test_gsplat_test_raw_ops(backend, triu, batch_dims):
    """The same assertions on each backend's raw ops (contiguous batched inputs)."""
    quats, scales = gsplat_gaussians(count(backend), seed=1)
    quats = quats.expand(batch_dims + quats.shape).contiguous()
    scales = scales.expand(batch_dims + scales.shape).contiguous()
    covars, precis = backend.quat_scale_to_covar_preci_forward(quats, scales, True, True, triu)
    _covars, _precis = oracle(quats, scales, triu=triu)
    torch.testing.assert_close(covars, _covars)

    v_covars, v_precis = _gsplat_incoming(covars, precis)
    v_quats, v_scales = raw_backward(backend, quats, scales, triu, v_covars, v_precis)
    q = quats.clone().requires_grad_(True)
    s = scales.clone().requires_grad_(True)
    _covars, _precis = oracle(q, s, triu=triu)
    _v_quats, _v_scales = torch.autograd.grad(
        (_covars * v_covars + _precis * v_precis).sum(), (q, s)
    )
    torch.testing.assert_close(v_quats, _v_quats, rtol=1e0, atol=1e-1)
    torch.testing.assert_close(v_scales, _v_scales, rtol=1e0, atol=1e-1)


# --------------------------------------------------------- 2. forward, float64 oracle


@pytest.mark.parametrize("backend", BACKENDS)
@BATCH_DIMS
@TRIU
@pytest.mark.parametrize("flags", FLAGS, ids=["both", "covar", "preci"])
def test_forward_matches_float64_oracle(backend, batch_dims, triu, flags):
    quats, scales = gaussians((*batch_dims, count(backend) // 2), seed=2)
    covars, precis = backend.quat_scale_to_covar_preci_forward(quats, scales, *flags, triu)
    shape = (*batch_dims, count(backend) // 2, *((6,) if triu else (3, 3)))
    for computed, got, want, name in zip(
        flags, (covars, precis), oracle64(quats, scales, True, True, triu), ("covars", "precis")
    ):
        if computed:
            assert got.dtype == torch.float32 and got.shape == shape, name
            assert_close_per_gaussian(got, want, FORWARD_REL, matrix_dims(triu), name)
        else:
            assert got.shape == (0,), name


@pytest.mark.parametrize("backend", BACKENDS)
def test_known_matrices(backend):
    """Identity and a quarter turn about z (with an unnormalised quaternion): exact values."""
    c = 0.5**0.5
    quats = torch.tensor([[2.0, 0.0, 0.0, 0.0], [3 * c, 0.0, 0.0, 3 * c]])
    scales = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    covars, precis = backend.quat_scale_to_covar_preci_forward(quats, scales, True, True, False)
    torch.testing.assert_close(covars[0], torch.diag(torch.tensor([1.0, 4.0, 16.0])))
    torch.testing.assert_close(precis[0], torch.diag(torch.tensor([1.0, 0.25, 0.0625])))
    # The quarter turn swaps the x and y axes.
    torch.testing.assert_close(
        covars[1], torch.diag(torch.tensor([4.0, 1.0, 16.0])), rtol=1e-6, atol=1e-6
    )
    packed, _ = backend.quat_scale_to_covar_preci_forward(quats, scales, True, False, True)
    full = covars[:, [0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]]
    assert torch.equal(packed, full)  # the order is xx, xy, xz, yy, yz, zz


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_gaussian_and_empty_batches(backend):
    quats, scales = gaussians(())
    covars, precis = backend.quat_scale_to_covar_preci_forward(quats, scales, True, True, False)
    assert covars.shape == (3, 3) and precis.shape == (3, 3)
    assert_close_per_gaussian(covars, oracle64(quats, scales)[0], FORWARD_REL, 2)
    grads = raw_backward(backend, quats, scales, False, torch.ones(3, 3), None)
    assert grads[0].shape == (4,) and grads[1].shape == (3,)
    for batch in [(0,), (2, 0), (0, 5)]:
        quats, scales = gaussians(batch)
        covars, precis = backend.quat_scale_to_covar_preci_forward(quats, scales, True, True, True)
        assert covars.shape == (*batch, 6) and precis.shape == (*batch, 6)
        v_quats, v_scales = raw_backward(backend, quats, scales, True, covars, precis)
        assert v_quats.shape == (*batch, 4) and v_scales.shape == (*batch, 3)


@pytest.mark.simt
@TRIU
def test_simt_equals_cpu(triu):
    """The same per-Gaussian code, no atomics: the two backends agree bit for bit."""
    quats, scales = gaussians((3, 70), seed=3)
    forward = [
        b.quat_scale_to_covar_preci_forward(quats, scales, True, True, triu) for b in (CPU, simt)
    ]
    assert all(torch.equal(a, b) for a, b in zip(*forward))
    v = [torch.randn_like(t) for t in forward[0]]
    backward = [raw_backward(b, quats, scales, triu, *v) for b in (CPU, simt)]
    assert all(torch.equal(a, b) for a, b in zip(*backward))


# ------------------------------------------------------- 3. backward, float64 oracle


@pytest.mark.parametrize("backend", BACKENDS)
@BATCH_DIMS
@TRIU
@pytest.mark.parametrize("grads", ["both", "covars", "precis", "none"])
def test_backward_matches_float64_oracle(backend, batch_dims, triu, grads):
    """Gradients from random incoming gradients of the chosen outputs (non-symmetric ones
    for full matrices, as gsplat's test sends) against the float64 oracle's autograd."""
    quats, scales = gaussians((*batch_dims, count(backend) // 2), seed=4)
    covars, precis = CPU.quat_scale_to_covar_preci_forward(quats, scales, True, True, triu)
    gen = torch.Generator().manual_seed(5)
    v_covars = torch.randn(covars.shape, generator=gen) if grads in ("both", "covars") else None
    v_precis = torch.randn(precis.shape, generator=gen) if grads in ("both", "precis") else None
    v_quats, v_scales = raw_backward(backend, quats, scales, triu, v_covars, v_precis)
    assert v_quats.shape == quats.shape and v_scales.shape == scales.shape
    if grads == "none":
        assert (v_quats == 0).all() and (v_scales == 0).all()
        return

    q = quats.double().requires_grad_(True)
    s = scales.double().requires_grad_(True)
    ref_covars, ref_precis = oracle(q, s, True, True, triu)
    loss = sum(
        (r * v.double()).sum()
        for r, v in ((ref_covars, v_covars), (ref_precis, v_precis))
        if v is not None
    )
    ref_quats, ref_scales = torch.autograd.grad(loss, (q, s))
    assert_close_per_gaussian(v_quats, ref_quats, BACKWARD_REL, 1, "v_quats")
    assert_close_per_gaussian(v_scales, ref_scales, BACKWARD_REL, 1, "v_scales")


# ----------------------------------------------------------- 4. the public function


def test_public_function_flags_and_gradients():
    quats, scales = gaussians((2, 30), seed=6)
    q = quats.clone().requires_grad_(True)
    s = scales.clone().requires_grad_(True)
    covars, precis = quat_scale_to_covar_preci(q, s, compute_preci=False)
    assert precis is None and covars.shape == (2, 30, 3, 3)
    covars.sum().backward()
    ref_q = quats.double().requires_grad_(True)
    ref_s = scales.double().requires_grad_(True)
    ref_covars, _ = oracle(ref_q, ref_s, True, False)
    want = torch.autograd.grad(ref_covars.sum(), (ref_q, ref_s))
    assert_close_per_gaussian(q.grad, want[0], BACKWARD_REL, 1, "quats")
    assert_close_per_gaussian(s.grad, want[1], BACKWARD_REL, 1, "scales")

    covars, precis = quat_scale_to_covar_preci(quats, scales, compute_covar=False, triu=True)
    assert covars is None and precis.shape == (2, 30, 6)
    assert quat_scale_to_covar_preci(quats, scales, False, False) == (None, None)
    assert prebuild.quat_scale_to_covar_preci is quat_scale_to_covar_preci


def test_gradient_through_one_output_only():
    """Both outputs computed, the loss uses only the precisions: the covariance's incoming
    gradient is None and must count as zero."""
    quats, scales = gaussians((20,), seed=7)
    q = quats.clone().requires_grad_(True)
    _, precis = quat_scale_to_covar_preci(q, scales, triu=True)
    (precis * 1e-2).sum().backward()
    ref_q = quats.double().requires_grad_(True)
    _, ref_precis = oracle(ref_q, scales.double(), True, True, True)
    (want,) = torch.autograd.grad((ref_precis * 1e-2).sum(), ref_q)
    assert_close_per_gaussian(q.grad, want, BACKWARD_REL, 1)


def test_strided_inputs_match_contiguous():
    quats, scales = gaussians((2, 3, 8), seed=8)
    ref = quat_scale_to_covar_preci(quats, scales)
    q_t = quats.transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    s_step = torch.stack([scales, scales], dim=-1)[..., 0]  # a step-2 view
    assert not q_t.is_contiguous() and not s_step.is_contiguous()
    for a, b in zip(quat_scale_to_covar_preci(q_t, s_step), ref):
        assert torch.equal(a, b)


def test_other_float_dtypes_are_converted():
    quats, scales = gaussians((25,), seed=9)
    ref = quat_scale_to_covar_preci(quats, scales)
    q = quats.double().requires_grad_(True)
    s = scales.double().requires_grad_(True)
    out = quat_scale_to_covar_preci(q, s)
    assert all(a.dtype == torch.float32 and torch.equal(a, b) for a, b in zip(out, ref))
    (out[0].sum() + out[1].sum() * 1e-3).backward()
    assert q.grad.dtype == torch.float64 and s.grad.dtype == torch.float64
    half = quat_scale_to_covar_preci(quats.half(), scales.bfloat16(), triu=True)
    assert half[0].dtype == torch.float32 and half[0].shape == (25, 6)


def test_meta_tensors_give_shapes():
    quats, scales = (t.to("meta") for t in gaussians((3, 7)))
    covars, precis = quat_scale_to_covar_preci(quats, scales, triu=True)
    assert covars.shape == (3, 7, 6) and precis.shape == (3, 7, 6)
    assert covars.device.type == "meta" and covars.dtype == torch.float32
    covars, precis = quat_scale_to_covar_preci(quats, scales, compute_preci=False)
    assert covars.shape == (3, 7, 3, 3) and precis is None


# ----------------------------------------------------------- 5. opcheck, torch.compile


@TRIU
@pytest.mark.parametrize(
    "flags", FLAGS + [(False, False)], ids=["both", "covar", "preci", "neither"]
)
@pytest.mark.parametrize("batch", [(6,), (2, 3)], ids=str)
def test_opcheck_forward(triu, flags, batch):
    quats, scales = gaussians(batch, seed=10)
    args = (quats.requires_grad_(True), scales.requires_grad_(True), *flags, triu)
    torch.library.opcheck(CPU.quat_scale_to_covar_preci_forward.default, args)


@TRIU
@pytest.mark.parametrize("grads", ["both", "covars", "precis", "none"])
def test_opcheck_backward(triu, grads):
    quats, scales = gaussians((2, 5), seed=11)
    covars, precis = CPU.quat_scale_to_covar_preci_forward(quats, scales, True, True, triu)
    v_covars = torch.randn_like(covars) if grads in ("both", "covars") else None
    v_precis = torch.randn_like(precis) if grads in ("both", "precis") else None
    torch.library.opcheck(
        CPU.quat_scale_to_covar_preci_backward.default, (quats, scales, triu, v_covars, v_precis)
    )


def test_torch_compile_fullgraph_with_backward():
    quats, scales = gaussians((2, 40), seed=12)
    weights = torch.randn(2, 40, 6)

    def loss_fn(q, s):
        covars, precis = quat_scale_to_covar_preci(q, s, triu=True)
        return (covars * weights).sum() + (precis * weights).sum() * 1e-3

    assert_compiled_matches_eager(loss_fn, quats, scales)


def test_double_backward_is_refused():
    quats, scales = gaussians((5,), seed=13)
    s = scales.clone().requires_grad_(True)
    covars, _ = quat_scale_to_covar_preci(quats, s, compute_preci=False)
    (g,) = torch.autograd.grad(covars.square().sum(), s, create_graph=True)
    with pytest.raises(NotImplementedError, match="double backward"):
        g.sum().backward()


# ------------------------------------------------------------------ 6. properties

PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@PROPERTY_SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    batch=st.lists(st.integers(1, 4), max_size=2).map(tuple),
    log_scale=st.tuples(st.floats(-3, 1), st.floats(0, 2)),
    quat_scale=st.sampled_from([1e-3, 1.0, 1e3, -1.0]),
    triu=st.booleans(),
)
def test_properties(seed, batch, log_scale, quat_scale, triu):
    """For random Gaussians (scales e^[lo, lo + width], quats of any length):
    covariances are symmetric with eigenvalues s^2, covars @ precis = I, the result ignores
    the quaternion's length and sign, triu packs the full matrix, and the quaternion's
    gradient has no radial component (the result does not depend on its length)."""
    gen = torch.Generator().manual_seed(seed)
    lo, width = log_scale
    quats = torch.randn((*batch, 4), generator=gen)
    scales = torch.exp(lo + width * torch.rand((*batch, 3), generator=gen))
    covars, precis = CPU.quat_scale_to_covar_preci_forward(quats, scales, True, True, False)

    assert torch.equal(covars, covars.transpose(-1, -2))
    eigen = torch.linalg.eigvalsh(covars.double())
    want = (scales.double() ** 2).sort(dim=-1).values
    assert_close_per_gaussian(eigen, want, 1e-5, 1, "eigenvalues")
    eye = torch.eye(3, dtype=torch.float64).expand(*batch, 3, 3)
    cond = (scales.amax(-1) / scales.amin(-1)).double() ** 2
    err = (covars.double() @ precis.double() - eye).abs().amax((-1, -2))
    assert (err <= 1e-6 * cond + 1e-5).all(), err.max()

    scaled = CPU.quat_scale_to_covar_preci_forward(quats * quat_scale, scales, True, True, False)
    for a, b in zip(scaled, (covars, precis)):
        assert_close_per_gaussian(a, b.double(), 1e-5, 2, "quaternion length/sign")
    packed = CPU.quat_scale_to_covar_preci_forward(quats, scales, True, True, True)
    index = ([0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2])
    for a, b in zip(packed, (covars, precis)):
        assert torch.equal(a, b[..., index[0], index[1]])

    v_covars = torch.randn(packed[0].shape if triu else covars.shape, generator=gen)
    v_quats, v_scales = raw_backward(CPU, quats, scales, triu, v_covars, None)
    # How large the gradients' terms are before they cancel (isotropic scales give a zero
    # quaternion gradient): |v_quats| ~ |v_covars| s^2 / |q|, |v_scales| ~ |v_covars| s.
    g = v_covars.abs().flatten(len(batch)).amax(-1, keepdim=True).double()
    s_max = scales.amax(-1, keepdim=True).double()
    q_norm = quats.double().norm(dim=-1, keepdim=True)
    radial = (v_quats.double() * quats.double()).sum(-1, keepdim=True)
    assert (radial.abs() <= 1e-5 * g * s_max**2).all(), "radial component"
    q = quats.double().requires_grad_(True)
    s = scales.double().requires_grad_(True)
    ref = oracle(q, s, True, False, triu)[0]
    ref_quats, ref_scales = torch.autograd.grad((ref * v_covars.double()).sum(), (q, s))
    assert_close_per_gaussian(
        v_quats, ref_quats, BACKWARD_REL, 1, "v_quats", floor=g * s_max**2 / q_norm
    )
    assert_close_per_gaussian(v_scales, ref_scales, BACKWARD_REL, 1, "v_scales", floor=g * s_max)


def _layout(t, layout):
    if layout == "expanded":
        return t[None].expand(2, *t.shape)
    if layout == "transposed" and t.dim() >= 2:
        return t.transpose(0, -1).contiguous().transpose(0, -1)
    return t


@PROPERTY_SETTINGS
@given(
    data=st.data(),
    batch=st.lists(st.integers(0, 3), max_size=2).map(tuple),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.int64]),
    layout=st.sampled_from(["contiguous", "expanded", "transposed"]),
)
def test_returns_the_oracle_or_a_clear_error(data, batch, dtype, layout):
    """Any shapes, dtypes and strides: the oracle's result, or a TypeError/ValueError naming
    the argument; never a crash."""
    q_last = data.draw(st.sampled_from([4, 4, 4, 3]), label="quats last dim")
    s_batch = data.draw(
        st.sampled_from([batch, batch, batch[:-1], (*batch, 1)]), label="scales batch"
    )
    quats, scales = gaussians(batch, seed=data.draw(st.integers(0, 1000)))
    quats = quats[..., :q_last]
    scales = torch.ones((*s_batch, 3)) * 0.3 if s_batch != batch else scales
    quats, scales = _layout(quats.to(dtype), layout), _layout(scales.to(dtype), layout)
    triu = data.draw(st.booleans(), label="triu")
    try:
        covars, precis = quat_scale_to_covar_preci(quats, scales, triu=triu)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        assert message.startswith("quat_scale_to_covar_preci: "), message
        if not dtype.is_floating_point:
            assert isinstance(exc, TypeError) and "quats has dtype" in message
        elif q_last != 4:
            assert "quats must have shape (..., 4)" in message
        else:
            assert s_batch != batch and "scales must have shape" in message
        return
    assert dtype.is_floating_point and q_last == 4 and s_batch == batch
    # float16 and float64 inputs are converted to float32 exactly or by rounding once, so
    # the float64 oracle of the inputs as given is the reference in every dtype.
    for got, want in zip((covars, precis), oracle64(quats, scales, triu=triu)):
        assert got.dtype == torch.float32
        assert_close_per_gaussian(got, want, FORWARD_REL, matrix_dims(triu))


# ----------------------------------------------------------------------- 7. bad input


def _call(**changes):
    quats, scales = gaussians((2, 6))
    kwargs = dict(quats=quats, scales=scales)
    kwargs.update(changes)
    return quat_scale_to_covar_preci(**kwargs)


@pytest.mark.parametrize(
    "changes, exc, fragment",
    [
        ({"quats": [[1.0, 0.0, 0.0, 0.0]]}, TypeError, "quats must be a torch.Tensor"),
        ({"scales": None}, TypeError, "scales must be a torch.Tensor"),
        ({"quats": torch.ones(2, 6, 4, dtype=torch.int32)}, TypeError, "quats has dtype"),
        ({"scales": torch.ones(2, 6, 3, dtype=torch.bool)}, TypeError, "scales has dtype"),
        ({"quats": torch.ones(2, 6, 3)}, ValueError, r"quats must have shape \(\.\.\., 4\)"),
        (
            {"quats": torch.tensor(1.0)},
            ValueError,
            r"quats must have shape \(\.\.\., 4\), got \(\)",
        ),
        ({"scales": torch.ones(2, 6, 4)}, ValueError, r"scales must have shape \(2, 6, 3\)"),
        ({"scales": torch.ones(6, 3)}, ValueError, r"scales must have shape \(2, 6, 3\)"),
        ({"scales": torch.ones(2, 6, 3, device="meta")}, ValueError, "same device"),
        ({"triu": 1}, TypeError, "triu must be a bool"),
        ({"compute_covar": None}, TypeError, "compute_covar must be a bool"),
        ({"compute_preci": "yes"}, TypeError, "compute_preci must be a bool"),
    ],
)
def test_bad_inputs_raise(changes, exc, fragment):
    with pytest.raises(exc, match=fragment):
        _call(**changes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_ops_refuse_bad_input(backend):
    quats, scales = gaussians((2, 6))
    fwd = backend.quat_scale_to_covar_preci_forward
    with pytest.raises(RuntimeError, match=r"quats must have shape \(\.\.\., 4\)"):
        fwd(quats[..., :3], scales, True, True, False)
    with pytest.raises(RuntimeError, match=r"quats must have shape \(\.\.\., 4\)"):
        fwd(torch.tensor(1.0), scales, True, True, False)
    with pytest.raises(RuntimeError, match="scales must have shape .* batch dimensions of quats"):
        fwd(quats, scales[:1], True, True, False)
    with pytest.raises(RuntimeError, match="quats must be float32"):
        fwd(quats.double(), scales, True, True, False)
    with pytest.raises(RuntimeError, match="scales must be contiguous"):
        fwd(quats, scales.transpose(0, 1).contiguous().transpose(0, 1), True, True, False)
    covars, precis = fwd(quats, scales, True, True, True)
    bwd = backend.quat_scale_to_covar_preci_backward
    with pytest.raises(RuntimeError, match=r"v_covars must have .* then 3, 3 \(triu=False\)"):
        bwd(quats, scales, False, covars, None)
    with pytest.raises(RuntimeError, match=r"v_precis must have .* then 6 \(triu=True\)"):
        bwd(quats, scales, True, None, precis[:1])
    with pytest.raises(RuntimeError, match="v_precis must be float32"):
        bwd(quats, scales, True, covars, precis.double())
