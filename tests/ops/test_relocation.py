"""prebuild.compute_relocation (gsplat 1.5.3's MCMC relocation, Equation 9 of "3D Gaussian
Splatting as Markov Chain Monte Carlo") against a float64 plain-PyTorch reference written
here from the formula (gsplat has no plain-PyTorch version).

Both backends run the value checks: the CPU library (torch.ops.prebuild) and the CUDA block
body run by the SIMT launcher (prebuild.testing.simt, marked simt, fewer Gaussians).

The scale factor opacity / D sums alternating terms, in float32 as gsplat does, so its error
is measured against the sum of the terms' magnitudes (large for ratios near n_max and
opacities near 1), not against D alone.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import prebuild
from prebuild.ops.relocation import compute_relocation
from prebuild.testing import simt, use_simt

CPU = torch.ops.prebuild
BACKENDS = [
    pytest.param(CPU, id="cpu"),
    pytest.param(simt, id="simt", marks=pytest.mark.simt),
]
N_MAX = 51  # gsplat's MCMCStrategy
EPS32 = 2.0**-24
OPACITY_REL = 2e-6  # new opacities against float64: a few float32 roundings
# The scale factor's error: SCALE_REL plus SUM_ERROR float32 roundings of the terms' magnitudes
# (20 at worst measured over 20000 gsplat-like Gaussians).
SCALE_REL = 2e-6
SUM_ERROR = 64


def binomial_table(n_max=N_MAX, dtype=torch.float32):
    """gsplat's MCMCStrategy table: binoms[n, k] = C(n, k), zero for k > n."""
    return torch.tensor(
        [[math.comb(n, k) for k in range(n_max)] for n in range(n_max)], dtype=dtype
    )


def reference(opacities, scales, ratios, binoms):
    """Equation 9 in float64, straight from the formula: (new_opacities, new_scales, D, the
    sum of |terms| of D). Ratios are clamped to [1, n_max] as gsplat's wrapper does."""
    o = opacities.double()
    n_max = binoms.shape[0]
    r = ratios.long().clamp(1, n_max).double()
    a = 1 - (1 - o) ** (1 / r)
    i = torch.arange(1, n_max + 1, dtype=torch.float64)[None, :, None]
    k = torch.arange(n_max, dtype=torch.float64)[None, None, :]
    used = (i <= r[:, None, None]) & (k < i)
    terms = binoms.double()[None] * (-1.0) ** k / torch.sqrt(k + 1) * a[:, None, None] ** (k + 1)
    terms = torch.where(used, terms, 0.0)
    denom = terms.sum((1, 2))
    return a, (o / denom)[:, None] * scales.double(), denom, terms.abs().sum((1, 2))


def assert_matches_reference(got, opacities, scales, ratios, binoms):
    new_opacities, new_scales = got
    assert new_opacities.dtype == torch.float32 and new_scales.dtype == torch.float32
    assert new_opacities.shape == opacities.shape and new_scales.shape == scales.shape
    want_o, want_s, denom, magnitude = reference(opacities, scales, ratios, binoms)
    torch.testing.assert_close(new_opacities.double(), want_o, rtol=OPACITY_REL, atol=0)
    rel = ((new_scales.double() - want_s).abs() / want_s.abs()).amax(-1)
    bound = SCALE_REL + SUM_ERROR * EPS32 * magnitude / denom.abs()
    worst = (rel / bound).max().item() if rel.numel() else 0.0
    assert worst <= 1, f"scale error {worst:.3g} times the bound"


def gaussians(n, seed=0, n_max=N_MAX):
    """Opacities in [0.005, 1) (a tenth within 1e-3 of 1), positive scales, ratios 1..n_max."""
    gen = torch.Generator().manual_seed(seed)
    opacities = 0.005 + 0.99 * torch.rand(n, generator=gen)
    opacities[: n // 10] = 1 - (1e-6 + torch.rand(n // 10, generator=gen) * 1e-3)
    scales = torch.exp(torch.randn((n, 3), generator=gen) - 3)
    ratios = torch.randint(1, n_max + 1, (n,), generator=gen, dtype=torch.int32)
    return opacities, scales, ratios


def gsplat_ratios(opacities, n_sampled, seed=0):
    """Ratios as gsplat's relocate / sample_add compute them: Gaussians sampled by opacity
    with replacement (_multinomial_sample), each one's count + 1 (int64; may exceed n_max)."""
    gen = torch.Generator().manual_seed(seed)
    sampled = torch.multinomial(opacities, n_sampled, replacement=True, generator=gen)
    return sampled, torch.bincount(sampled)[sampled] + 1


def count(backend):
    return 300 if backend is simt else 3000


# ------------------------------------------------------------ values, both backends


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_float64_reference(backend):
    opacities, scales, ratios = gaussians(count(backend))
    binoms = binomial_table()
    got = backend.compute_relocation(opacities, scales, ratios, binoms)
    assert_matches_reference(got, opacities, scales, ratios, binoms)


@pytest.mark.parametrize("backend", BACKENDS)
def test_any_table_is_used_as_given(backend):
    """The formula reads binoms as passed, not a closed form of the binomial sums: a table of
    other positive numbers (a smaller n_max) gives the reference's values for that table."""
    gen = torch.Generator().manual_seed(1)
    binoms = torch.tril(torch.rand((6, 6), generator=gen) + 0.5)
    opacities, scales, ratios = gaussians(count(backend) // 3, seed=2, n_max=6)
    opacities = opacities.clamp(max=0.9)  # keeps D away from zero for this table
    got = backend.compute_relocation(opacities, scales, ratios, binoms)
    assert_matches_reference(got, opacities, scales, ratios, binoms)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ratio_one_returns_the_inputs(backend):
    opacities, scales, _ = gaussians(count(backend), seed=3)
    opacities[:5] = torch.tensor([1.0, 0.999999, 1e-7, 0.5, 0.1])
    ratios = torch.ones(opacities.shape, dtype=torch.int32)
    new_opacities, new_scales = backend.compute_relocation(
        opacities, scales, ratios, binomial_table()
    )
    assert torch.equal(new_opacities, opacities)
    assert torch.equal(new_scales, scales)


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_opacities_compose_back_to_the_old(backend):
    """The MCMC identity: r copies of opacity a let through (1 - a)^r, as the original did."""
    opacities, scales, ratios = gaussians(count(backend), seed=4)
    new_opacities, _ = backend.compute_relocation(opacities, scales, ratios, binomial_table())
    r = ratios.double()
    composed = 1 - (1 - new_opacities.double()) ** r
    torch.testing.assert_close(composed, opacities.double(), rtol=OPACITY_REL, atol=0)
    assert ((new_opacities <= opacities) & (new_opacities > 0)).all()
    assert (new_opacities[ratios > 1] < opacities[ratios > 1]).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_op_clamps_ratios(backend):
    """Ratios below 1 count as 1 and above n_max as n_max (gsplat's wrapper clamps them), in
    the kernel too, so a direct call never reads outside binoms."""
    opacities, scales, _ = gaussians(6, seed=5, n_max=8)
    binoms = binomial_table(8)
    ratios = torch.tensor([0, -7, 1, 8, 9, 2**31 - 1], dtype=torch.int32)
    clamped = torch.tensor([1, 1, 1, 8, 8, 8], dtype=torch.int32)
    got = backend.compute_relocation(opacities, scales, ratios, binoms)
    want = backend.compute_relocation(opacities, scales, clamped, binoms)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert torch.equal(got[0][:3], opacities[:3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_and_n_max_one(backend):
    empty = backend.compute_relocation(
        torch.empty(0), torch.empty(0, 3), torch.empty(0, dtype=torch.int32), binomial_table()
    )
    assert empty[0].shape == (0,) and empty[1].shape == (0, 3)
    opacities, scales, _ = gaussians(4, seed=6)
    got = backend.compute_relocation(
        opacities, scales, torch.full((4,), 3, dtype=torch.int32), torch.ones(1, 1)
    )
    assert torch.equal(got[0], opacities) and torch.equal(got[1], scales)


@pytest.mark.simt
def test_simt_equals_cpu():
    """The same per-Gaussian code, no atomics: the two backends agree bit for bit."""
    opacities, scales, ratios = gaussians(700, seed=7)
    binoms = binomial_table()
    cpu = CPU.compute_relocation(opacities, scales, ratios, binoms)
    assert all(
        torch.equal(a, b)
        for a, b in zip(cpu, simt.compute_relocation(opacities, scales, ratios, binoms))
    )


# ------------------------------------------------------------------ the public function


def test_gsplat_call_pattern():
    """As gsplat's relocate calls it: sampled opacities, int64 ratios from bincount (some past
    n_max: a few opacities dominate the sampling), gsplat's table; the caller's ratios are
    left alone (gsplat clamps them in place)."""
    gen = torch.Generator().manual_seed(8)
    opacities = torch.rand(400, generator=gen) * 0.2
    opacities[:3] = 0.99
    sampled, ratios = gsplat_ratios(opacities, 2000)
    assert ratios.dtype == torch.int64 and ratios.max() > N_MAX
    before = ratios.clone()
    scales = torch.exp(torch.randn((400, 3), generator=gen))[sampled]
    binoms = binomial_table()
    got = prebuild.compute_relocation(opacities[sampled], scales, ratios, binoms)
    assert torch.equal(ratios, before)
    assert_matches_reference(got, opacities[sampled], scales, ratios, binoms)
    assert prebuild.compute_relocation is compute_relocation


def test_int64_ratios_past_int32_are_clamped_not_wrapped():
    opacities, scales, _ = gaussians(3, seed=9)
    binoms = binomial_table()
    ratios = torch.tensor([2**32 + 2, -(2**40), 2**33], dtype=torch.int64)
    got = compute_relocation(opacities, scales, ratios, binoms)
    want = compute_relocation(opacities, scales, torch.tensor([N_MAX, 1, N_MAX]), binoms)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_dtypes_and_strides():
    opacities, scales, ratios = gaussians(50, seed=10)
    binoms = binomial_table()
    want = compute_relocation(opacities, scales, ratios, binoms)
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            compute_relocation(opacities.double(), scales.double(), ratios.long(), binoms.double()),
            want,
        )
    )
    strided = compute_relocation(
        torch.stack([opacities, opacities], -1)[:, 0],
        scales.t().contiguous().t(),
        torch.stack([ratios, ratios], -1)[:, 1],
        binoms.t().contiguous().t(),
    )
    assert all(torch.equal(a, b) for a, b in zip(strided, want))
    half = compute_relocation(opacities.half(), scales.bfloat16(), ratios, binoms)
    assert half[0].dtype == torch.float32 and half[1].dtype == torch.float32
    assert_matches_reference(
        half, opacities.half().float(), scales.bfloat16().float(), ratios, binoms
    )


@pytest.mark.parametrize("simt_backend", [False, pytest.param(True, marks=pytest.mark.simt)])
def test_outputs_are_not_differentiable(simt_backend):
    opacities, scales, ratios = gaussians(10, seed=11)
    o = opacities.clone().requires_grad_(True)
    s = scales.clone().requires_grad_(True)
    if simt_backend:
        with use_simt():
            outputs = compute_relocation(o, s, ratios, binomial_table())
    else:
        outputs = compute_relocation(o, s, ratios, binomial_table())
    assert not any(t.requires_grad for t in outputs)
    with pytest.raises(RuntimeError, match="does not require grad"):
        outputs[1].sum().backward()


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.simt
def test_use_simt_routes_the_public_function():
    opacities, scales, ratios = gaussians(20, seed=12)
    for route, namespace in ((use_simt, "prebuild_simt"), (None, "prebuild")):
        with _OpLog() as log:
            if route is None:
                compute_relocation(opacities, scales, ratios, binomial_table())
            else:
                with route():
                    compute_relocation(opacities, scales, ratios, binomial_table())
        assert f"{namespace}.compute_relocation.default" in log.ops, log.ops


def test_meta_tensors_give_shapes():
    opacities, scales, ratios = (t.to("meta") for t in gaussians(7))
    new_opacities, new_scales = compute_relocation(
        opacities, scales, ratios, binomial_table().to("meta")
    )
    assert new_opacities.shape == (7,) and new_scales.shape == (7, 3)
    assert new_scales.device.type == "meta" and new_scales.dtype == torch.float32


def test_gsplat_relocate_and_sample_add_run_on_it():
    """gsplat's own MCMC ops (gsplat.strategy.ops.relocate, sample_add) with its
    compute_relocation pointed at prebuild's, in a fresh process (importing gsplat there
    leaves this one alone): they call it with their int64 ratios, and the dead Gaussians end
    up with the relocated opacities and scales it returned."""
    code = r"""
import math, torch, prebuild, prebuild.gsplat_compat as compat
compat.use_prebuild_kernels()
import gsplat.strategy.ops as ops
calls = []
def recording(**kwargs):
    out = prebuild.compute_relocation(**kwargs)
    calls.append((kwargs, out))
    return out
ops.compute_relocation = recording
torch.manual_seed(0)
n, n_max = 64, 51
binoms = torch.tensor([[math.comb(a, b) for b in range(n_max)] for a in range(n_max)],
                      dtype=torch.float32)
params = torch.nn.ParameterDict({
    "means": torch.randn(n, 3), "scales": torch.randn(n, 3) - 2,
    "quats": torch.randn(n, 4), "opacities": torch.logit(torch.rand(n) * 0.5 + 0.1)})
optimizers = {k: torch.optim.Adam([p], lr=1e-3) for k, p in params.items()}
dead = torch.zeros(n, dtype=torch.bool)
dead[:40] = True
ops.relocate(params, optimizers, {}, mask=dead, binoms=binoms, min_opacity=0.005)
(kwargs, (new_opacities, new_scales)), = calls
ratios = kwargs["ratios"]
assert ratios.dtype == torch.int64 and ratios.max() > 1, ratios
composed = 1 - (1 - new_opacities.double()) ** ratios.double()
assert torch.allclose(composed, kwargs["opacities"].double(), rtol=1e-5, atol=0)
assert torch.allclose(torch.sigmoid(params["opacities"].detach()[dead]), new_opacities, rtol=1e-5)
assert torch.allclose(torch.exp(params["scales"].detach()[dead]), new_scales, rtol=1e-5)
ops.sample_add(params, optimizers, {}, n=16, binoms=binoms, min_opacity=0.005)
assert len(calls) == 2 and params["opacities"].shape == (n + 16,)
assert torch.allclose(torch.exp(params["scales"].detach()[n:]), calls[1][1][1], rtol=1e-5)
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


# -------------------------------------------------------------- opcheck, torch.compile


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
def test_opcheck(backend, requires_grad):
    opacities, scales, ratios = gaussians(12, seed=13)
    args = (
        opacities.requires_grad_(requires_grad),
        scales.requires_grad_(requires_grad),
        ratios,
        binomial_table(),
    )
    torch.library.opcheck(backend.compute_relocation.default, args)


def test_torch_compile_fullgraph():
    torch._dynamo.reset()
    try:
        opacities, scales, _ = gaussians(60, seed=14)
        _, ratios = gsplat_ratios(opacities, 60, seed=15)
        binoms = binomial_table()

        def relocate(o, s, r, b):  # as gsplat's relocate uses it
            new_opacities, new_scales = compute_relocation(o, s, r, b)
            return (
                new_opacities,
                new_scales,
                torch.logit(new_opacities.clamp(0.005, 1 - 1e-7)),
                new_scales.log(),
            )

        compiled = torch.compile(relocate, fullgraph=True)
        got = compiled(opacities, scales, ratios, binoms)
        want = relocate(opacities, scales, ratios, binoms)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])  # the same kernel
        for a, b in zip(got[2:], want[2:]):  # Inductor's own pointwise code
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    finally:
        torch._dynamo.reset()


# -------------------------------------------------------------------------- properties


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(0, 40),
    n_max=st.integers(1, N_MAX),
    opacity_range=st.sampled_from([(1e-4, 0.01), (0.005, 0.5), (0.5, 0.99), (0.99, 0.9999)]),
    ratio_spread=st.integers(0, 8),
    int64=st.booleans(),
)
def test_properties(seed, n, n_max, opacity_range, ratio_spread, int64):
    """Random Gaussians, any n_max, ratios from below 1 to past n_max: the float64
    reference's values; 1 - (1 - new)^r = old; ratio 1 (and n_max 1) leaves the inputs
    unchanged; the scales keep their direction and shrink or stay (D >= opacity)."""
    gen = torch.Generator().manual_seed(seed)
    lo, hi = opacity_range
    opacities = lo + (hi - lo) * torch.rand(n, generator=gen)
    scales = torch.exp(torch.randn((n, 3), generator=gen) * 2)
    ratios = torch.randint(
        1 - ratio_spread,
        n_max + 1 + ratio_spread,
        (n,),
        generator=gen,
        dtype=torch.int64 if int64 else torch.int32,
    )
    binoms = binomial_table(n_max)
    got = compute_relocation(opacities, scales, ratios, binoms)
    assert_matches_reference(got, opacities, scales, ratios, binoms)

    new_opacities, new_scales = got
    r = ratios.clamp(1, n_max)
    composed = 1 - (1 - new_opacities.double()) ** r.double()
    torch.testing.assert_close(composed, opacities.double(), rtol=OPACITY_REL, atol=0)
    one = r == 1
    assert torch.equal(new_opacities[one], opacities[one])
    assert torch.equal(new_scales[one], scales[one])
    factor = new_scales / scales
    assert torch.allclose(factor, factor[:, :1].expand_as(factor), rtol=1e-6, atol=0)
    # Equation 9's factor is at most 1 (Gaussians split into smaller ones), up to rounding.
    assert (factor <= 1 + 1e-3).all(), factor.max()


# ------------------------------------------------------------------------- bad inputs


def _call(**changes):
    opacities, scales, ratios = gaussians(6)
    kwargs = dict(opacities=opacities, scales=scales, ratios=ratios, binoms=binomial_table(8))
    kwargs.update(changes)
    return compute_relocation(**kwargs)


@pytest.mark.parametrize(
    "changes, exc, fragment",
    [
        ({"opacities": [0.5] * 6}, TypeError, "opacities must be a torch.Tensor"),
        ({"binoms": None}, TypeError, "binoms must be a torch.Tensor"),
        ({"opacities": torch.ones(6, dtype=torch.int64)}, TypeError, "opacities has dtype"),
        ({"scales": torch.ones(6, 3, dtype=torch.bool)}, TypeError, "scales has dtype"),
        ({"binoms": torch.ones(8, 8, dtype=torch.int64)}, TypeError, "binoms has dtype"),
        ({"ratios": torch.ones(6)}, TypeError, "ratios must be int32 or int64, got torch.float32"),
        ({"ratios": torch.ones(6, dtype=torch.uint8)}, TypeError, "ratios must be int32 or int64"),
        ({"opacities": torch.ones(6, 1)}, ValueError, r"opacities must have shape \[N\]"),
        (
            {"opacities": torch.tensor(0.5)},
            ValueError,
            r"opacities must have shape \[N\], got \(\)",
        ),
        ({"scales": torch.ones(6, 4)}, ValueError, r"scales must have shape \[N, 3\] = \[6, 3\]"),
        ({"scales": torch.ones(5, 3)}, ValueError, r"scales must have shape \[N, 3\] = \[6, 3\]"),
        (
            {"ratios": torch.ones(5, dtype=torch.int32)},
            ValueError,
            r"ratios must have shape \[N\] = \[6\]",
        ),
        ({"ratios": torch.ones(6, 1, dtype=torch.int32)}, ValueError, "ratios must have shape"),
        ({"binoms": torch.ones(8, 7)}, ValueError, r"binoms must have shape \[n_max, n_max\]"),
        ({"binoms": torch.ones(0, 0)}, ValueError, "with n_max >= 1"),
        ({"binoms": torch.ones(8)}, ValueError, "binoms must have shape"),
        (
            {"scales": torch.ones(6, 3, device="meta")},
            ValueError,
            "same device, got .*scales on meta",
        ),
        ({"ratios": torch.ones(6, dtype=torch.int32, device="meta")}, ValueError, "ratios on meta"),
    ],
)
def test_bad_inputs_raise(changes, exc, fragment):
    with pytest.raises(exc, match=f"^compute_relocation: .*{fragment}"):
        _call(**changes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_op_refuses_bad_input(backend):
    opacities, scales, ratios = gaussians(6)
    binoms = binomial_table(8)
    op = backend.compute_relocation
    cases = [
        ((opacities[:, None], scales, ratios, binoms), r"opacities must have shape \[N\]"),
        ((opacities, scales[:5], ratios, binoms), r"scales must have shape \[N, 3\] with N = 6"),
        ((opacities, scales, ratios[:5], binoms), r"ratios must have shape \[N\] with N = 6"),
        ((opacities, scales, ratios.long(), binoms), "ratios must be int32"),
        ((opacities.double(), scales, ratios, binoms), "opacities must be float32"),
        ((opacities, scales, ratios, binoms.double()), "binoms must be float32"),
        ((opacities, scales, ratios, binoms[:, :7]), r"binoms must have shape \[n_max, n_max\]"),
        ((opacities, scales, ratios, torch.ones(0, 0)), "n_max >= 1"),
        ((opacities, scales.t().contiguous().t(), ratios, binoms), "scales must be contiguous"),
    ]
    for args, fragment in cases:
        with pytest.raises(RuntimeError, match=fragment):
            op(*args)
