"""Tests of prebuild.fused_ssim and its custom ops against a float64 plain-PyTorch reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import gaussian_1d, ssim_map_reference, ssim_reference, textured

import prebuild
from prebuild.ops.ssim import fused_ssim

FWD = torch.ops.prebuild.fused_ssim_forward
BWD = torch.ops.prebuild.fused_ssim_backward
FB = torch.ops.prebuild.fused_ssim_forward_backward

VALUE_ATOL = 1e-5  # absolute tolerance of the mean SSIM vs the float64 reference
MAP_ATOL = 1e-5  # per-pixel tolerance of the raw map (images with texture everywhere)
# Per-pixel tolerance where the images have smooth regions: there the local variances are
# ~C2 and the float32 E[x^2] - mu^2 cancellation costs up to a few 1e-5 per pixel (a plain
# float32 conv2d version of the reference is ~3x worse than the kernel on these images).
SMOOTH_MAP_ATOL = 1e-4


# ----------------------------------------------------------------------------- helpers


def _rand(shape, dtype=torch.float32):
    return torch.rand(shape, dtype=dtype)


def _noisy(x, sigma=0.1):
    return (x + sigma * torch.randn_like(x)).clamp(0, 1)


def _blurred(x):
    # 3x3 box blur with replicate padding: a copy that differs in structure, not just noise.
    B, C, H, W = x.shape
    p = torch.nn.functional.pad(x.reshape(B * C, 1, H, W), (1, 1, 1, 1), mode="replicate")
    k = torch.full((1, 1, 3, 3), 1.0 / 9.0, dtype=x.dtype)
    return torch.nn.functional.conv2d(p, k).reshape(B, C, H, W)


def _shifted(x):
    return torch.roll(x, shifts=(2, -3), dims=(2, 3))


def _pair(kind, shape, seed=0):
    """Two float32 images of `shape` related as `kind` says."""
    gen = torch.Generator().manual_seed(seed)
    if kind == "random":
        return torch.rand(shape, generator=gen), torch.rand(shape, generator=gen)
    x = textured(shape, seed=seed)
    if kind == "noisy":
        return x, (x + 0.1 * torch.randn(shape, generator=gen)).clamp(0, 1)
    if kind == "blurred":
        return x, _blurred(x)
    if kind == "shifted":
        return x, _shifted(x)
    if kind == "contrast":
        return x, 0.5 * x + 0.2
    if kind == "inverted":
        return x, 1.0 - x
    if kind == "independent":
        return x, textured(shape, seed=seed + 1)
    raise AssertionError(kind)


def _grads(fn, x, y, *args, **kwargs):
    """Value and gradients of fn(x, y, ...) for leaf copies of x and y."""
    a = x.detach().clone().requires_grad_(True)
    b = y.detach().clone().requires_grad_(True)
    v = fn(a, b, *args, **kwargs)
    ga, gb = torch.autograd.grad(v, (a, b))
    return v.detach(), ga, gb


def _ref_grads(x, y, padding):
    return _grads(ssim_reference, x.double(), y.double(), padding)


def _assert_grad_close(actual, expected, padding="same"):
    """Gradients of a mean over n pixels are O(1/n): compare with an atol scaled to their
    size (1e-5 of the largest reference gradient), floored at 1e-4 / n for the float32
    rounding noise left where the exact gradient vanishes (e.g. identical images)."""
    assert actual.shape == expected.shape
    B, C, H, W = expected.shape
    n = B * C * (H * W if padding == "same" else (H - 10) * (W - 10))
    scale = expected.abs().max().item()
    atol = max(1e-5 * scale, 1e-4 / n)
    torch.testing.assert_close(actual.double(), expected.double(), rtol=1e-4, atol=atol)


SAME_SHAPES = [
    (1, 1, 17, 23),
    (2, 3, 33, 40),
    (3, 2, 16, 16),
    (1, 1, 5, 7),
    (1, 1, 1, 1),
    (2, 1, 11, 11),
    (1, 2, 3, 50),
    (1, 1, 40, 2),
]
VALID_SHAPES = [(1, 1, 17, 23), (2, 3, 33, 40), (3, 2, 16, 16), (1, 1, 11, 11), (2, 1, 12, 31)]
KINDS = ["random", "noisy", "blurred", "shifted", "contrast", "inverted", "independent"]


# ------------------------------------------------------------------ 0. the window itself


def test_reference_window_matches_formula():
    g = gaussian_1d()
    assert g.shape == (11,)
    assert abs(g.sum().item() - 1.0) < 1e-12
    k = torch.arange(11, dtype=torch.float64)
    expected = torch.exp(-((k - 5) ** 2) / 4.5)
    torch.testing.assert_close(g, expected / expected.sum(), rtol=0, atol=1e-15)


def test_reference_matches_naive_loops():
    # Check the reference itself against a direct transcription of the formula: explicit
    # 11x11 window sums with zero padding, pixel by pixel.
    g = gaussian_1d().tolist()
    x, y = torch.rand(1, 2, 6, 8, dtype=torch.float64), torch.rand(1, 2, 6, 8, dtype=torch.float64)
    H, W = 6, 8
    expected = torch.empty_like(x)
    for c in range(2):
        for i in range(H):
            for j in range(W):
                m = {"x": 0.0, "y": 0.0, "xx": 0.0, "yy": 0.0, "xy": 0.0}
                for di in range(-5, 6):
                    for dj in range(-5, 6):
                        ii, jj = i + di, j + dj
                        if not (0 <= ii < H and 0 <= jj < W):
                            continue
                        w = g[di + 5] * g[dj + 5]
                        a, b = x[0, c, ii, jj].item(), y[0, c, ii, jj].item()
                        m["x"] += w * a
                        m["y"] += w * b
                        m["xx"] += w * a * a
                        m["yy"] += w * b * b
                        m["xy"] += w * a * b
                mx, my = m["x"], m["y"]
                sxx, syy, sxy = m["xx"] - mx * mx, m["yy"] - my * my, m["xy"] - mx * my
                c1, c2 = 0.01**2, 0.03**2
                expected[0, c, i, j] = ((2 * mx * my + c1) * (2 * sxy + c2)) / (
                    (mx * mx + my * my + c1) * (sxx + syy + c2)
                )
    torch.testing.assert_close(ssim_map_reference(x, y), expected, rtol=1e-12, atol=1e-12)
    ssim_map, _ = FWD(x.float(), y.float(), False)
    torch.testing.assert_close(ssim_map.double(), expected, rtol=0, atol=MAP_ATOL)


def test_impulse_response_sees_the_whole_gaussian_window():
    # A single bright pixel on a dark background: SSIM at every pixel depends on the exact
    # window weights and extent. Compare the whole map to the reference.
    x = torch.zeros(1, 1, 23, 23)
    x[0, 0, 11, 11] = 1.0
    y = torch.zeros_like(x)
    y[0, 0, 11, 12] = 0.7
    ssim_map, _ = FWD(x, y, False)
    torch.testing.assert_close(ssim_map.double(), ssim_map_reference(x, y), rtol=0, atol=MAP_ATOL)
    # The window reaches exactly 5 pixels: pixels 6 away from both impulses (in rows or in
    # columns) see only zeros, so S == 1 there; pixels 5 away do not.
    m = ssim_map[0, 0]
    for outside in [(0, 0), (5, 5), (5, 11), (11, 18), (17, 11), (11, 4)]:
        assert m[outside].item() == 1.0, outside
    for inside in [(6, 6), (6, 11), (11, 17), (16, 11), (11, 6)]:
        assert m[inside].item() < 1.0 - 1e-4, inside


# ------------------------------------------------------------------------- 1. values


@pytest.mark.parametrize("shape", SAME_SHAPES)
@pytest.mark.parametrize("kind", ["random", "noisy"])
def test_value_same_padding(shape, kind):
    x, y = _pair(kind, shape)
    got = fused_ssim(x, y, padding="same")
    assert got.dtype == torch.float32 and got.dim() == 0
    assert abs(got.item() - ssim_reference(x, y, "same").item()) < VALUE_ATOL


@pytest.mark.parametrize("shape", VALID_SHAPES)
@pytest.mark.parametrize("kind", ["random", "noisy"])
def test_value_valid_padding(shape, kind):
    x, y = _pair(kind, shape)
    got = fused_ssim(x, y, padding="valid")
    assert got.dtype == torch.float32 and got.dim() == 0
    assert abs(got.item() - ssim_reference(x, y, "valid").item()) < VALUE_ATOL


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("kind", KINDS)
def test_value_structured_pairs(kind, padding):
    x, y = _pair(kind, (2, 3, 33, 40), seed=7)
    got = fused_ssim(x, y, padding=padding).item()
    ref = ssim_reference(x, y, padding).item()
    assert abs(got - ref) < VALUE_ATOL
    assert -1.0 <= got <= 1.0


def test_default_padding_is_same():
    x, y = _pair("noisy", (1, 2, 20, 30))
    assert fused_ssim(x, y).item() == fused_ssim(x, y, padding="same").item()
    assert fused_ssim(x, y).item() != pytest.approx(fused_ssim(x, y, "valid").item(), abs=1e-6)


def test_valid_is_mean_of_cropped_map():
    x, y = _pair("random", (2, 2, 20, 25))
    ssim_map, _ = FWD(x, y, False)
    expected = ssim_map[:, :, 5:-5, 5:-5].mean()
    torch.testing.assert_close(fused_ssim(x, y, "valid"), expected, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(fused_ssim(x, y, "same"), ssim_map.mean(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "shape,padding",
    [
        ((1, 1, 17, 23), "same"),
        ((2, 3, 33, 40), "same"),
        ((3, 2, 16, 16), "same"),
        ((1, 1, 5, 7), "same"),
        ((1, 1, 1, 1), "same"),
        ((1, 1, 17, 23), "valid"),
        ((2, 3, 33, 40), "valid"),
        ((3, 2, 16, 16), "valid"),
        ((1, 1, 11, 11), "valid"),
    ],
)
def test_identical_images_give_one(shape, padding):
    x = _rand(shape)
    assert abs(fused_ssim(x, x, padding).item() - 1.0) < 1e-6
    assert abs(fused_ssim(x, x.clone(), padding).item() - 1.0) < 1e-6
    t = textured(shape, seed=2)
    assert abs(fused_ssim(t, t, padding).item() - 1.0) < 1e-6


def test_symmetric_in_its_arguments():
    x, y = _pair("shifted", (2, 2, 19, 21))
    assert fused_ssim(x, y).item() == pytest.approx(fused_ssim(y, x).item(), abs=1e-7)


def test_batches_and_channels_are_independent():
    # The mean over a batch equals the mean of per-(b, c) SSIMs (same H, W).
    x, y = _pair("noisy", (2, 3, 18, 22))
    whole = fused_ssim(x, y).item()
    parts = [
        fused_ssim(x[b : b + 1, c : c + 1], y[b : b + 1, c : c + 1]).item()
        for b in range(2)
        for c in range(3)
    ]
    assert whole == pytest.approx(sum(parts) / len(parts), abs=1e-6)
    # Changing one plane changes only that plane's map.
    y2 = y.clone()
    y2[1, 2] = torch.rand(18, 22)
    m1, _ = FWD(x, y, False)
    m2, _ = FWD(x, y2, False)
    assert torch.equal(m1[0], m2[0]) and torch.equal(m1[1, :2], m2[1, :2])
    assert not torch.equal(m1[1, 2], m2[1, 2])


def test_constant_images_with_float32_tolerance():
    # Two flat images: local variances cancel to ~0, so float32 E[x^2] - mu^2 rounding is
    # amplified by 1/C2. Documented float32 compute: a looser (1e-4) bound applies here.
    x = torch.full((1, 2, 20, 24), 0.5)
    y = torch.full((1, 2, 20, 24), 0.3)
    for padding in ("same", "valid"):
        got = fused_ssim(x, y, padding).item()
        assert abs(got - ssim_reference(x, y, padding).item()) < 1e-4


# --------------------------------------------------------------------- 2. gradients


GRAD_CASES = [
    ((1, 1, 17, 23), "random"),
    ((2, 3, 33, 40), "noisy"),
    ((3, 2, 16, 16), "blurred"),
    ((1, 2, 13, 29), "shifted"),
    ((2, 1, 12, 12), "inverted"),
]


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("shape,kind", GRAD_CASES)
def test_gradients_both_images(shape, kind, padding, train):
    x, y = _pair(kind, shape, seed=3)
    v, gx, gy = _grads(fused_ssim, x, y, padding, train)
    rv, rgx, rgy = _ref_grads(x, y, padding)
    assert abs(v.item() - rv.item()) < VALUE_ATOL
    assert gx.dtype == torch.float32 and gy.dtype == torch.float32
    _assert_grad_close(gx, rgx, padding)
    _assert_grad_close(gy, rgy, padding)


@pytest.mark.parametrize("shape", [(1, 1, 5, 7), (1, 1, 1, 1), (2, 2, 3, 9)])
@pytest.mark.parametrize("train", [True, False])
def test_gradients_small_images_same(shape, train):
    x, y = _pair("random", shape, seed=5)
    _, gx, gy = _grads(fused_ssim, x, y, "same", train)
    _, rgx, rgy = _ref_grads(x, y, "same")
    _assert_grad_close(gx, rgx, "same")
    _assert_grad_close(gy, rgy, "same")


def test_train_false_gradients_equal_train_true():
    x, y = _pair("noisy", (2, 2, 21, 19))
    for padding in ("same", "valid"):
        _, gx1, gy1 = _grads(fused_ssim, x, y, padding, True)
        _, gx0, gy0 = _grads(fused_ssim, x, y, padding, False)
        torch.testing.assert_close(gx0, gx1, rtol=0, atol=0)
        torch.testing.assert_close(gy0, gy1, rtol=0, atol=0)


def test_weighted_loss_gradients_equal_train_false_bit_for_bit():
    """The training path (gradients computed in the forward, scaled in the backward) gives
    the backward kernel's bits for the usual weighted loss, retain_graph included."""
    x, y = _pair("noisy", (2, 3, 24, 31))
    grads = {}
    for train in (True, False):
        a, b = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
        loss = 0.8 * (a - b).abs().mean() + 0.2 * (1 - fused_ssim(a, b, train=train))
        loss.backward(retain_graph=True)
        first = a.grad.clone(), b.grad.clone()
        loss.backward()  # accumulates the same gradient again
        assert torch.equal(a.grad, 2 * first[0]) and torch.equal(b.grad, 2 * first[1])
        grads[train] = first
    assert torch.equal(grads[True][0], grads[False][0])
    assert torch.equal(grads[True][1], grads[False][1])


def test_training_call_runs_one_fused_op(monkeypatch):
    """fused_ssim(train=True) wanting a gradient ("same" padding) runs fused_ssim_forward_backward
    once on the CPU, asking for img2's gradient only when img2 needs one; eval and "valid" run
    the forward, storing dS (img1's 3 maps) only for a backward that can happen."""
    import prebuild.ops.ssim as module

    calls = []

    class Spy:
        def __getattr__(self, name):
            op = getattr(torch.ops.prebuild, name)
            flags = lambda args: tuple(a for a in args if not isinstance(a, torch.Tensor))  # noqa: E731
            return lambda *args: calls.append((name, *flags(args))) or op(*args)

    monkeypatch.setattr(module, "_ops", lambda ns: Spy())
    x, y = _pair("noisy", (1, 2, 20, 22))
    a = x.clone().requires_grad_(True)
    fused_ssim(a, y).backward()
    assert calls == [("fused_ssim_forward_backward", False)]
    calls.clear()
    fused_ssim(a, y.clone().requires_grad_(True)).backward()
    assert calls == [("fused_ssim_forward_backward", True)]
    calls.clear()
    with torch.no_grad():
        fused_ssim(a, y)
    fused_ssim(x, y)  # no gradient wanted: nothing computed for one
    assert calls == [("fused_ssim_forward", False, False), ("fused_ssim_forward", False, False)]
    calls.clear()
    fused_ssim(a, y, "valid").backward()
    assert calls == [("fused_ssim_forward", True, False), ("fused_ssim_backward", False)]


def test_gradient_with_upstream_scale_and_one_input_requiring_grad():
    x, y = _pair("blurred", (1, 3, 20, 20))
    a = x.clone().requires_grad_(True)
    loss = 1 - fused_ssim(a, y)  # y is a constant target
    (3.0 * loss).backward()
    xr = x.double().requires_grad_(True)
    (3.0 * (1 - ssim_reference(xr, y.double()))).backward()
    _assert_grad_close(a.grad, xr.grad)
    assert y.grad is None

    b = y.clone().requires_grad_(True)
    fused_ssim(x, b, "valid").backward()
    yr = y.double().requires_grad_(True)
    ssim_reference(x.double(), yr, "valid").backward()
    _assert_grad_close(b.grad, yr.grad, "valid")


def test_gradient_of_identical_images_is_zero():
    # SSIM is maximal at x == y, so the gradient there vanishes.
    x = _rand((1, 2, 16, 18))
    _, gx, gy = _grads(fused_ssim, x, x, "same")
    assert gx.abs().max().item() < 1e-6 and gy.abs().max().item() < 1e-6


def test_gradient_through_raw_forward_op_with_arbitrary_upstream():
    # A non-uniform upstream gradient on the map exercises fused_ssim_backward fully (and
    # takes fused_ssim_forward_backward's autograd formula off its scaling path).
    x, y = _pair("noisy", (2, 2, 15, 27))
    w = torch.rand(x.shape)
    forwards = [
        lambda a, b: FWD(a, b, True)[0],
        lambda a, b: FWD(a, b, False)[0],
        lambda a, b: FB(a, b, True)[0],
    ]
    for forward in forwards:
        a = x.clone().requires_grad_(True)
        b = y.clone().requires_grad_(True)
        m = forward(a, b)
        (m * w).sum().backward()
        ar = x.double().requires_grad_(True)
        br = y.double().requires_grad_(True)
        (ssim_map_reference(ar, br) * w.double()).sum().backward()
        _assert_grad_close(a.grad, ar.grad)
        _assert_grad_close(b.grad, br.grad)


# ------------------------------------------------------------------------- 3. raw map


@pytest.mark.parametrize(
    "shape",
    [(1, 1, 17, 23), (2, 3, 33, 40), (3, 2, 16, 16), (1, 1, 5, 7), (1, 1, 1, 1), (1, 1, 64, 3)],
)
@pytest.mark.parametrize("kind", ["random", "noisy", "shifted"])
def test_raw_map_matches_reference(shape, kind):
    x, y = _pair(kind, shape, seed=11)
    for train in (False, True):
        ssim_map, dS = FWD(x, y, train)
        assert ssim_map.shape == x.shape and ssim_map.dtype == torch.float32
        assert ssim_map.is_contiguous()
        atol = MAP_ATOL if kind == "random" else SMOOTH_MAP_ATOL
        torch.testing.assert_close(ssim_map.double(), ssim_map_reference(x, y), rtol=0, atol=atol)
        if train:
            assert dS.shape == (4, *x.shape) and dS.dtype == torch.float32
            assert torch.isfinite(dS).all()
        else:
            assert dS.shape == (0,)


def test_raw_map_train_flag_does_not_change_map():
    x, y = _pair("blurred", (2, 2, 20, 17))
    m0, _ = FWD(x, y, False)
    m1, _ = FWD(x, y, True)
    assert torch.equal(m0, m1)


def test_raw_backward_matches_reference_vjp():
    x, y = _pair("noisy", (2, 3, 14, 19))
    g = torch.randn(x.shape)
    _, dS = FWD(x, y, True)
    g1, g2 = BWD(g, x, y, dS)
    xr = x.double().requires_grad_(True)
    yr = y.double().requires_grad_(True)
    r1, r2 = torch.autograd.grad(ssim_map_reference(xr, yr), (xr, yr), g.double())
    _assert_grad_close(g1, r1)
    _assert_grad_close(g2, r2)


# -------------------------------------------------------------------- 4. property test


@st.composite
def _ssim_case(draw):
    padding = draw(st.sampled_from(["same", "valid"]))
    lo = 11 if padding == "valid" else 1
    shape = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
        draw(st.integers(lo, 40)),
        draw(st.integers(lo, 40)),
    )
    kind = draw(st.sampled_from(["random", "noisy", "identical", "scaled"]))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1.0, 0.05, 4.0]))
    train = draw(st.booleans())
    return shape, padding, kind, seed, scale, train


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ssim_case())
def test_property_matches_reference(case):
    shape, padding, kind, seed, scale, train = case
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=gen) * scale
    if kind == "random":
        y = torch.rand(shape, generator=gen) * scale
    elif kind == "noisy":
        y = x + 0.1 * scale * torch.randn(shape, generator=gen)
    elif kind == "identical":
        y = x.clone()
    else:
        y = 0.7 * x + 0.1 * scale
    v, gx, gy = _grads(fused_ssim, x, y, padding, train)
    rv, rgx, rgy = _ref_grads(x, y, padding)
    assert abs(v.item() - rv.item()) < VALUE_ATOL
    if kind == "identical":
        assert abs(v.item() - 1.0) < 1e-6
    _assert_grad_close(gx, rgx, padding)
    _assert_grad_close(gy, rgy, padding)


# ------------------------------------------------------------------------- 5. dtypes


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_other_float_dtypes(dtype, padding):
    x, y = _pair("noisy", (2, 2, 17, 23))
    x, y = x.to(dtype), y.to(dtype)
    a = x.clone().requires_grad_(True)
    b = y.clone().requires_grad_(True)
    v = fused_ssim(a, b, padding)
    assert v.dtype == torch.float32 and v.dim() == 0
    v.backward()

    a32 = x.float().requires_grad_(True)
    b32 = y.float().requires_grad_(True)
    v32 = fused_ssim(a32, b32, padding)
    v32.backward()
    assert torch.equal(v.detach(), v32.detach())

    assert a.grad.dtype == dtype and b.grad.dtype == dtype
    assert a.grad.shape == x.shape and b.grad.shape == y.shape
    torch.testing.assert_close(a.grad, a32.grad.to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(b.grad, b32.grad.to(dtype), rtol=0, atol=0)
    # And the value is still right against the float64 reference on the rounded inputs.
    assert abs(v.item() - ssim_reference(x, y, padding).item()) < VALUE_ATOL


def test_mixed_float_dtypes():
    x, y = _pair("noisy", (1, 2, 16, 16))
    a = x.half().requires_grad_(True)
    b = y.double().requires_grad_(True)
    v = fused_ssim(a, b)
    assert v.dtype == torch.float32
    assert v.item() == fused_ssim(x.half().float(), y).item()
    v.backward()
    assert a.grad.dtype == torch.float16 and b.grad.dtype == torch.float64


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.uint8, torch.int32, torch.bool, torch.complex64]
)
@pytest.mark.parametrize("which", [0, 1])
def test_non_float_dtype_raises_type_error(dtype, which):
    imgs = [torch.rand(1, 1, 16, 16), torch.rand(1, 1, 16, 16)]
    imgs[which] = (imgs[which] * 200).to(dtype)
    with pytest.raises(TypeError, match=str(dtype).replace("torch.", "")) as info:
        fused_ssim(*imgs)
    assert f"img{which + 1}" in str(info.value)


# --------------------------------------------------------------------- 6. bad inputs


def _img(*shape):
    return torch.rand(*shape)


@pytest.mark.parametrize(
    "args,kwargs,exc,fragment",
    [
        ((_img(1, 1, 16, 16), _img(1, 1, 16, 17)), {}, ValueError, "same shape"),
        ((_img(1, 2, 16, 16), _img(1, 1, 16, 16)), {}, ValueError, "same shape"),
        ((_img(1, 16, 16), _img(1, 16, 16)), {}, ValueError, "4-D"),
        ((_img(1, 1, 1, 16, 16), _img(1, 1, 1, 16, 16)), {}, ValueError, "4-D"),
        ((_img(16, 16), _img(16, 16)), {}, ValueError, "4-D"),
        ((_img(1, 1, 16, 16), _img(1, 16, 16)), {}, ValueError, "img2 must be a 4-D"),
        ((_img(0, 1, 16, 16), _img(0, 1, 16, 16)), {}, ValueError, "empty"),
        ((_img(1, 0, 16, 16), _img(1, 0, 16, 16)), {}, ValueError, "empty"),
        ((_img(1, 1, 0, 16), _img(1, 1, 0, 16)), {}, ValueError, "empty"),
        ((_img(1, 1, 16, 0), _img(1, 1, 16, 0)), {"padding": "valid"}, ValueError, "empty"),
        ((_img(1, 1, 10, 16), _img(1, 1, 10, 16)), {"padding": "valid"}, ValueError, "11x11"),
        ((_img(1, 1, 16, 10), _img(1, 1, 16, 10)), {"padding": "valid"}, ValueError, "11x11"),
        ((_img(1, 1, 5, 7), _img(1, 1, 5, 7)), {"padding": "valid"}, ValueError, "got 5x7"),
        ((_img(1, 1, 16, 16), _img(1, 1, 16, 16)), {"padding": "full"}, ValueError, "padding"),
        ((_img(1, 1, 16, 16), _img(1, 1, 16, 16)), {"padding": "SAME"}, ValueError, "padding"),
        ((_img(1, 1, 16, 16), _img(1, 1, 16, 16)), {"padding": None}, ValueError, "padding"),
        ((_img(1, 1, 16, 16), _img(1, 1, 16, 16)), {"train": 1}, TypeError, "train must be a bool"),
        ((_img(1, 1, 16, 16), _img(1, 1, 16, 16)), {"train": "yes"}, TypeError, "bool"),
        ((_img(1, 1, 16, 16), _img(1, 1, 16, 16)), {"train": None}, TypeError, "bool"),
        (([[0.5]], _img(1, 1, 16, 16)), {}, TypeError, "img1 must be a torch.Tensor"),
        ((_img(1, 1, 16, 16), 0.5), {}, TypeError, "img2 must be a torch.Tensor, got float"),
    ],
)
def test_bad_inputs_raise(args, kwargs, exc, fragment):
    with pytest.raises(exc, match=fragment):
        fused_ssim(*args, **kwargs)


def test_device_mismatch_raises():
    cpu = torch.rand(1, 1, 16, 16)
    meta = torch.empty(1, 1, 16, 16, device="meta")
    with pytest.raises(ValueError, match="same device"):
        fused_ssim(cpu, meta)
    with pytest.raises(ValueError, match="img1 is on meta but img2 is on cpu"):
        fused_ssim(meta, cpu)


def test_meta_tensors_give_meta_scalar():
    # Both on 'meta': shape propagation only, through the fake kernel.
    a = torch.empty(2, 3, 20, 20, device="meta")
    out = fused_ssim(a, a.clone(), "valid")
    assert out.device.type == "meta" and out.shape == () and out.dtype == torch.float32


def test_public_entry_points_are_the_same_function():
    assert prebuild.fused_ssim is fused_ssim


# ---------------------------------------------------------------- 7. non-contiguous


def _check_same_as_contiguous(xv, yv, padding="same"):
    assert not (xv.is_contiguous() and yv.is_contiguous())
    v, gx, gy = _grads(fused_ssim, xv, yv, padding)
    # _grads clones (preserving strides); also check the gradient layout follows the input.
    a = xv.detach().clone().requires_grad_(True)
    fused_ssim(a, yv, padding).backward()
    assert a.grad.shape == xv.shape
    cv, cgx, cgy = _grads(fused_ssim, xv.contiguous(), yv.contiguous(), padding)
    assert torch.equal(v, cv)
    torch.testing.assert_close(gx, cgx, rtol=0, atol=0)
    torch.testing.assert_close(gy, cgy, rtol=0, atol=0)
    torch.testing.assert_close(a.grad, cgx, rtol=0, atol=0)


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_transposed_views(padding):
    base_x, base_y = _pair("noisy", (2, 3, 23, 17))
    _check_same_as_contiguous(base_x.transpose(2, 3), base_y.transpose(2, 3), padding)


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_permuted_views(padding):
    base_x, base_y = _pair("noisy", (3, 2, 19, 21))  # (C, B, H, W) -> (B, C, H, W)
    _check_same_as_contiguous(base_x.permute(1, 0, 2, 3), base_y.permute(1, 0, 2, 3), padding)


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_channels_last(padding):
    x, y = _pair("blurred", (2, 3, 18, 22))
    xc = x.to(memory_format=torch.channels_last)
    yc = y.to(memory_format=torch.channels_last)
    assert not xc.is_contiguous()
    _check_same_as_contiguous(xc, yc, padding)
    v = fused_ssim(xc, yc, padding).item()
    assert abs(v - ssim_reference(x, y, padding).item()) < VALUE_ATOL


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_strided_slices(padding):
    bx, by = _pair("noisy", (3, 4, 40, 50))
    xv, yv = bx[::2, 1::2, 3:37:2, ::3], by[::2, 1::2, 3:37:2, ::3]
    _check_same_as_contiguous(xv, yv, padding)
    # Mixed: one contiguous, one not.
    _check_same_as_contiguous(xv.contiguous(), yv, padding)


def test_expanded_inputs():
    x = torch.rand(1, 1, 20, 20).expand(2, 3, 20, 20)  # stride-0 batch and channel
    y = _noisy(torch.rand(2, 3, 20, 20))
    _check_same_as_contiguous(x, y)


# --------------------------------------------------------------------------- 8. opcheck


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_forward(train, requires_grad):
    x, y = _pair("noisy", (2, 2, 13, 17))
    x.requires_grad_(requires_grad)
    y.requires_grad_(requires_grad)
    torch.library.opcheck(FWD.default, (x, y, train))


def test_opcheck_forward_one_input_requires_grad():
    x, y = _pair("noisy", (1, 3, 12, 15))
    torch.library.opcheck(FWD.default, (x.requires_grad_(True), y, True))


def test_opcheck_backward():
    x, y = _pair("noisy", (2, 2, 13, 17))
    _, dS = FWD(x, y, True)
    g = torch.randn(x.shape)
    torch.library.opcheck(BWD.default, (g, x, y, dS))
    torch.library.opcheck(BWD.default, (_broadcast(0.5, x.shape), x, y, torch.empty(0), False))


@pytest.mark.parametrize("grad_img2", [True, False])
def test_opcheck_forward_backward(grad_img2):
    x, y = _pair("noisy", (2, 2, 13, 17))
    torch.library.opcheck(FB.default, (x.requires_grad_(True), y, grad_img2))


# -------------------------------------------------------------------- 9. torch.compile


def test_torch_compile_fullgraph_value_and_training_step():
    torch._dynamo.reset()
    try:
        x, y = _pair("noisy", (2, 3, 24, 20))

        def loss_step(a, b):
            loss = 1.0 - fused_ssim(a, b, padding="valid")
            loss.backward()
            return loss.detach()

        def ssim_value(a, b):
            return prebuild.fused_ssim(a, b) * 2.0

        compiled_value = torch.compile(ssim_value, fullgraph=True)
        got = compiled_value(x, y)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, ssim_value(x, y), rtol=1e-6, atol=1e-6)

        # Loss + backward: compile a function computing the loss, backward outside (the
        # backward graph is compiled by AOTAutograd), and compare value and gradients.
        def loss_fn(a, b):
            return 1.0 - fused_ssim(a, b, padding="valid", train=True)

        compiled_loss = torch.compile(loss_fn, fullgraph=True)
        a = x.clone().requires_grad_(True)
        b = y.clone().requires_grad_(True)
        loss = compiled_loss(a, b)
        loss.backward()
        ea = x.clone().requires_grad_(True)
        eb = y.clone().requires_grad_(True)
        eloss = loss_step(ea, eb)
        torch.testing.assert_close(loss.detach(), eloss, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(a.grad, ea.grad, rtol=1e-5, atol=1e-9)
        torch.testing.assert_close(b.grad, eb.grad, rtol=1e-5, atol=1e-9)
        _, rga, rgb = _ref_grads(x, y, "valid")
        _assert_grad_close(a.grad, -rga, "valid")
        _assert_grad_close(b.grad, -rgb, "valid")
    finally:
        torch._dynamo.reset()


# ------------------------------------------------------------ 10. direct op bad input


def test_direct_forward_bad_inputs_raise_runtime_error():
    x = torch.rand(1, 1, 16, 16)
    with pytest.raises(RuntimeError, match="float32"):
        FWD(x.double(), x.double(), True)
    with pytest.raises(RuntimeError, match="float32"):
        FWD(x, x.half(), False)
    with pytest.raises(RuntimeError, match="contiguous"):
        FWD(x.transpose(2, 3), x, True)
    with pytest.raises(RuntimeError, match="same shape"):
        FWD(x, torch.rand(1, 1, 16, 15), True)
    with pytest.raises(RuntimeError, match="4 dimensions"):
        FWD(torch.rand(1, 16, 16), torch.rand(1, 16, 16), True)
    with pytest.raises(RuntimeError, match="4 dimensions"):
        FWD(torch.rand(1, 1, 1, 16, 16), torch.rand(1, 1, 1, 16, 16), True)


def test_cpu_backward_recomputes_what_train_false_did_not_store():
    """train=False returns an empty dS; the CPU backward then recomputes the derivatives in
    its own pass (never materialised) and gives the very bits of the stored path."""
    x, y = _pair("noisy", (2, 3, 40, 29))
    g = torch.randn(x.shape)
    _, dS = FWD(x, y, True)
    _, no_dS = FWD(x, y, False)
    assert no_dS.shape == (0,)
    for stored, recomputed in zip(BWD(g, x, y, dS), BWD(g, x, y, no_dS)):
        assert torch.equal(stored, recomputed)


def _broadcast(value, shape):
    """dL/dmap as the backward of a mean hands it over: one float32 value, every stride 0."""
    return torch.tensor(value, dtype=torch.float32).expand(shape)


@pytest.mark.parametrize("shape", [(2, 3, 19, 23), (1, 1, 1, 1)])
def test_forward_backward_is_the_map_and_the_gradients_of_its_sum(shape):
    """fused_ssim_forward_backward: the forward's map and the backward of dL/dmap = 1, bit for
    bit; scaled by g, the backward of a broadcast g, bit for bit."""
    x, y = _pair("noisy", shape)
    m, g1, g2 = FB(x, y)
    fm, dS = FWD(x, y, True)
    assert torch.equal(m, fm)
    for ds in (dS, torch.empty(0)):  # stored and recomputed
        b1, b2 = BWD(_broadcast(1.0, shape), x, y, ds)
        assert torch.equal(g1, b1) and torch.equal(g2, b2)
        s1, s2 = BWD(_broadcast(-0.37, shape), x, y, ds)
        g = torch.tensor(-0.37)
        assert torch.equal(g1 * g, s1) and torch.equal(g2 * g, s2)
    m0, h1, h2 = FB(x, y, False)
    assert torch.equal(m0, m) and torch.equal(h1, g1) and h2.shape == (0,)


def test_broadcast_grad_map_matches_the_written_out_one():
    """A broadcast dL/dmap scales the gradients after the window sums, a written-out one each
    dS before them: the same gradient up to rounding."""
    x, y = _pair("noisy", (2, 2, 21, 30))
    _, dS = FWD(x, y, True)
    for ds in (dS, torch.empty(0)):
        for got, want in zip(
            BWD(_broadcast(0.25, x.shape), x, y, ds), BWD(torch.full(x.shape, 0.25), x, y, ds)
        ):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("broadcast", [False, True])
def test_backward_can_skip_img2s_gradient(broadcast):
    x, y = _pair("noisy", (2, 2, 17, 26))
    g = _broadcast(0.5, x.shape) if broadcast else torch.randn(x.shape)
    _, dS = FWD(x, y, True)
    for ds in (dS, torch.empty(0)):
        both = BWD(g, x, y, ds)
        one = BWD(g, x, y, ds, False)
        assert torch.equal(one[0], both[0]) and one[1].shape == (0,)


@pytest.mark.parametrize("shape", [(1, 1, 40, 50), (1, 1, 1300, 1300)])  # dS of 0.04 and 34 MiB
def test_cpu_stores_small_derivatives_and_recomputes_large_ones(shape, monkeypatch):
    """Where fused_ssim keeps dS for its backward ("valid" padding), it stores it on the CPU
    only up to 32 MiB; either way the gradient is the stored path's, bit for bit."""
    import prebuild.ops.ssim as module

    asked = []

    class Spy:
        def __getattr__(self, name):
            op = getattr(torch.ops.prebuild, name)
            if name == "fused_ssim_forward":
                return lambda x, y, train, both: asked.append(train) or op(x, y, train, both)
            return op

    monkeypatch.setattr(module, "_ops", lambda ns: Spy())
    x, y = _pair("noisy", shape)
    x.requires_grad_(True)
    fused_ssim(x, y, "valid").backward()
    assert asked == [3 * 4 * x.numel() <= 32 << 20]  # img1's three maps
    _, dS = FWD(x.detach(), y, True)
    grad_map = torch.zeros(shape)  # the backward of the cropped map's mean
    grad_map[..., 5:-5, 5:-5] = torch.tensor(1.0) / grad_map[..., 5:-5, 5:-5].numel()
    want, _ = BWD(grad_map, x.detach(), y, dS)
    assert torch.equal(x.grad, want)


def test_direct_backward_bad_inputs_raise_runtime_error():
    x, y = _pair("noisy", (2, 1, 12, 14))
    g = torch.randn(x.shape)
    _, dS = FWD(x, y, True)
    with pytest.raises(RuntimeError, match="dS"):
        BWD(g, x, y, torch.empty(0, 5))  # empty, but not train=False's (0,)
    shapes = r"dS must have shape \(4, B, C, H, W\) or \(3, B, C, H, W\)"
    with pytest.raises(RuntimeError, match=shapes):
        BWD(g, x, y, dS[:2].contiguous())
    with pytest.raises(RuntimeError, match=shapes):
        BWD(g, x, y, torch.zeros(5, 2, 1, 12, 14))  # the five maps of before: one too many
    with pytest.raises(RuntimeError, match=shapes):
        BWD(g, x, y, torch.zeros(4, 2, 1, 12, 13))
    with pytest.raises(RuntimeError, match="img2's gradient needs the 4 maps"):
        BWD(g, x, y, dS[:3].contiguous())
    with pytest.raises(RuntimeError, match="dS"):
        BWD(g, x, y, dS.reshape(4, 2, 12, 14))
    with pytest.raises(RuntimeError, match="dS must be float32"):
        BWD(g, x, y, dS.double())
    with pytest.raises(RuntimeError, match="dS must be contiguous"):
        BWD(g, x, y, torch.zeros(4, 2, 1, 14, 12).transpose(3, 4))
    with pytest.raises(RuntimeError, match="grad_map"):
        BWD(torch.randn(2, 1, 12, 13), x, y, dS)
    with pytest.raises(RuntimeError, match="grad_map must be float32"):
        BWD(g.double(), x, y, dS)
    with pytest.raises(RuntimeError, match="grad_map must be contiguous or one value broadcast"):
        BWD(torch.randn(2, 1, 14, 12).transpose(2, 3), x, y, dS)
    with pytest.raises(RuntimeError, match="grad_map must be contiguous or one value broadcast"):
        BWD(torch.randn(1, 1, 12, 14).expand(2, 1, 12, 14), x, y, dS)  # broadcast over B only
    with pytest.raises(RuntimeError, match="img1 must be float32"):
        BWD(g, x.double(), y, dS)
    with pytest.raises(RuntimeError, match="same shape"):
        BWD(g, x, y[:, :, :11].contiguous(), dS)


def test_direct_ops_on_empty_tensors_do_not_crash():
    e = torch.rand(0, 1, 16, 16)
    m, dS = FWD(e, e, True)
    assert m.shape == e.shape and dS.shape == (4, *e.shape)
    g1, g2 = BWD(m, e, e, dS)
    assert g1.shape == e.shape and g2.shape == e.shape
    e2 = torch.rand(1, 1, 0, 7)
    m, dS = FWD(e2, e2, False)
    assert m.shape == e2.shape and dS.shape == (0,)
    m, g1, g2 = FB(e, e)
    assert m.shape == g1.shape == g2.shape == e.shape


# --------------------------------------------- fake/meta kernels and double backward


def test_direct_ops_refuse_mixed_devices():
    x, y = _pair("noisy", (1, 1, 16, 16))
    meta = torch.empty(1, 1, 16, 16, device="meta")
    _, dS = FWD(x, y, True)
    calls = [
        lambda: FWD(x, meta, True),
        lambda: FWD(meta, x, False),
        lambda: BWD(torch.ones_like(x), x, meta, dS),
        lambda: BWD(torch.ones_like(x), x, y, dS.to("meta")),
    ]
    for call in calls:
        try:
            call()
        except RuntimeError as e:
            assert "device" in str(e)
        else:
            raise AssertionError("mixed cpu/meta arguments were accepted")


def test_fake_forward_checks_img2_dtype():
    a = torch.empty(1, 1, 16, 16, device="meta")
    try:
        FWD(a, a.double(), True)
    except RuntimeError as e:
        assert "float32" in str(e)
    else:
        raise AssertionError("fake fused_ssim_forward accepted a float64 img2")


def test_double_backward_is_refused_loudly():
    """Second derivatives are not implemented: a double backward must raise, never drop
    the second-order term silently."""
    x, y = _pair("noisy", (1, 1, 16, 16))
    a = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fused_ssim(a, y), a, create_graph=True)
    with pytest.raises(NotImplementedError, match="double backward"):
        (g * g).sum().backward()


def test_channels_last_images_warn_once_and_can_be_silenced():
    """rasterization() returns [C, H, W, D]: passing it unpermuted is the likely mistake
    (0.53 instead of 0.07 in a real case), so it warns; the permuted call does not."""
    import warnings

    from prebuild.ops.ssim import ChannelsLastWarning, looks_channels_last

    a, b = torch.rand(1, 64, 48, 3), torch.rand(1, 64, 48, 3)
    with pytest.warns(ChannelsLastWarning, match=r"permute\(0, 3, 1, 2\)") as record:
        wrong = fused_ssim(a, b)
    assert record[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        right = fused_ssim(a.permute(0, 3, 1, 2), b.permute(0, 3, 1, 2))
        warnings.filterwarnings("ignore", category=ChannelsLastWarning)
        assert fused_ssim(a, b).item() == wrong.item()  # silenced; the value is unchanged
    assert right.item() == pytest.approx(
        ssim_reference(a.permute(0, 3, 1, 2), b.permute(0, 3, 1, 2)).item(), abs=1e-5
    )
    assert looks_channels_last((4, 64, 64, 1)) and looks_channels_last((2, 32, 40, 4))
    for shape in [
        (1, 3, 64, 64),
        (1, 1, 8, 8),
        (1, 4, 3, 3),
        (2, 64, 64, 5),
        (1, 3, 16, 4),
        (3, 64, 4, 3),
    ]:
        assert not looks_channels_last(shape), shape


def test_fake_forward_backward_names_its_op_and_shapes():
    a = torch.empty(2, 3, 16, 17, device="meta")
    m, g1, g2 = FB(a, a, False)
    assert m.shape == g1.shape == a.shape and g2.shape == (0,) and m.device.type == "meta"
    with pytest.raises(
        RuntimeError, match="fused_ssim_forward_backward: img1 and img2 must have the same shape"
    ):
        FB(a, a[..., :16])


# ------------------------------------------------------------------ 10. the host path


def test_a_training_step_dispatches_a_short_fixed_list_of_ops():
    """The whole host path of fused_ssim, below autograd: what a CPU training step dispatches
    (one fused op, the mean, the backward's scale) and an eval call (the op, the mean). A
    change that adds a copy, a fill or a second kernel to every step fails here.
    (The GPU path's list, and no host sync: tests/cuda/test_ops_cuda.py.)"""
    from dispatch_count import DispatchedOps

    x, y = _pair("noisy", (1, 3, 24, 20))
    x.requires_grad_(True)
    with DispatchedOps() as step:
        fused_ssim(x, y).backward()
    assert step.ops == [
        "prebuild::fused_ssim_forward_backward",
        "aten::sum",
        "aten::div",
        "aten::ones_like",  # backward()'s seed
        "aten::div",
        "aten::mul",
        "aten::detach",  # x.grad
    ]
    with DispatchedOps() as value, torch.no_grad():
        fused_ssim(x, y)
    assert value.ops == ["prebuild::fused_ssim_forward", "aten::sum", "aten::div"]
