"""Property-based tests (hypothesis) of the public ops over shapes, dtypes, strides, devices
and values: every call either returns what the reference returns or raises a Python
exception (TypeError / ValueError / RuntimeError) whose message names the problem. Never a
crash, a hang, or a finite wrong answer: non-finite inputs give a non-finite result.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from reference import ssim_reference
from test_rasterize import make_scene, reference  # at import: it defines @given tests of its own

import prebuild

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
SPECIALS = [math.nan, math.inf, -math.inf, 1e30, -1e30, 0.0]
DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.uint8,
    torch.bool,
]


@st.composite
def images(draw, shape, dtypes=tuple(DTYPES), specials=True):
    """An image of ``shape`` in [0, 1], maybe with special values planted, maybe as a
    non-contiguous view, in one of ``dtypes``."""
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.rand(shape, generator=gen, dtype=torch.float64)
    planted = (
        draw(st.lists(st.sampled_from(SPECIALS), max_size=3)) if specials and x.numel() else []
    )
    for value in planted:
        x.view(-1)[draw(st.integers(0, x.numel() - 1))] = value
    layout = draw(st.sampled_from(["contiguous", "channels_last", "transposed", "strided"]))
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = x.transpose(2, 3).contiguous().transpose(2, 3)  # same values, swapped strides
    elif layout == "strided":
        x = torch.repeat_interleave(x, 2, dim=3)[..., ::2]  # a step-2 view
    dtype = draw(st.sampled_from(dtypes))
    return x.to(dtype), bool(planted)


shapes = st.tuples(
    st.integers(0, 3), st.integers(0, 3), st.integers(0, 20), st.integers(0, 20)
).map(tuple)


def expect_clear_error(exc: BaseException, *words: str) -> None:
    assert isinstance(exc, (TypeError, ValueError, RuntimeError)), repr(exc)
    message = str(exc)
    assert "fused_ssim" in message and any(w in message for w in words), message


@SETTINGS
@given(data=st.data(), shape=shapes, padding=st.sampled_from(["same", "valid", "full"]))
def test_fused_ssim_returns_the_reference_or_a_clear_error(data, shape, padding):
    (x, x_special) = data.draw(images(shape), label="img1")
    mismatched = data.draw(st.booleans(), label="mismatched shape")
    other = (shape[0], shape[1], shape[2], shape[3] + 1) if mismatched else shape
    (y, y_special) = data.draw(images(other), label="img2")
    try:
        value = prebuild.fused_ssim(x, y, padding=padding)
    except Exception as exc:  # every refusal must be one of these, and say why
        if not x.dtype.is_floating_point or not y.dtype.is_floating_point:
            expect_clear_error(exc, "dtype")
        elif mismatched:
            expect_clear_error(exc, "same shape")
        elif x.numel() == 0:
            expect_clear_error(exc, "empty")
        elif padding not in ("same", "valid"):
            expect_clear_error(exc, "padding")
        elif padding == "valid" and min(shape[2], shape[3]) < 11:
            expect_clear_error(exc, "at least 11x11")
        else:
            raise AssertionError(f"valid input refused: {exc!r}") from exc
        return
    assert x.dtype.is_floating_point and y.dtype.is_floating_point and not mismatched
    assert value.shape == () and value.dtype == torch.float32
    if x_special or y_special:
        # NaN, inf or values whose squares overflow float32: the result is not finite or,
        # where the specials leave it finite (zeros; values outside the window), correct.
        ref = ssim_reference(x.double(), y.double(), padding)
        assert not torch.isfinite(value) or torch.isfinite(ref)
        return
    # half-precision inputs are rounded before the float32 compute: compare to the same values
    ref = ssim_reference(x.float().double(), y.float().double(), padding)
    torch.testing.assert_close(value.double(), ref, rtol=0, atol=2e-5)


@SETTINGS
@given(
    data=st.data(),
    shape=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 17), st.integers(1, 17)),
)
def test_fused_ssim_gradients_match_the_reference(data, shape):
    x, _ = data.draw(images(shape, dtypes=(torch.float32,), specials=False), label="img1")
    y, _ = data.draw(images(shape, dtypes=(torch.float32,), specials=False), label="img2")
    x.requires_grad_(True)
    y.requires_grad_(True)
    prebuild.fused_ssim(x, y).backward()
    xr = x.detach().double().requires_grad_(True)
    yr = y.detach().double().requires_grad_(True)
    ssim_reference(xr, yr).backward()
    for got, want in ((x.grad, xr.grad), (y.grad, yr.grad)):
        assert got.shape == want.shape
        torch.testing.assert_close(got.double(), want, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("device", ["meta"])
def test_fused_ssim_on_other_devices_never_crashes(device):
    x = torch.empty(1, 3, 16, 16, device=device)
    assert prebuild.fused_ssim(x, x).device.type == device  # shape-only, through the fake kernel
    with pytest.raises(ValueError, match="same device"):
        prebuild.fused_ssim(x, torch.rand(1, 3, 16, 16))


# --- Gaussian splatting ------------------------------------------------------------------

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16)


@st.composite
def splat_scene(draw):
    """Random Gaussians and cameras (tests/ops/projection_scenes.py), some with special
    values planted in means, quats or scales."""
    from projection_scenes import cameras, gaussians

    N, C = draw(st.integers(0, 12), label="N"), draw(st.integers(1, 3), label="C")
    means, quats, scales, _ = gaussians(N, seed=draw(st.integers(0, 10_000)), spread=0.8)
    poisoned = torch.zeros(N, dtype=torch.bool)
    for _ in range(draw(st.integers(0, 3)) if N else 0):
        field = draw(st.sampled_from([means, quats, scales]))
        row = draw(st.integers(0, N - 1))
        field[row, draw(st.integers(0, field.shape[1] - 1))] = draw(st.sampled_from(SPECIALS[:3]))
        poisoned[row] = True
    viewmats, Ks = cameras(C, 37, 29)
    return means, quats, scales * 2.5, viewmats, Ks, poisoned


@SETTINGS
@given(
    scene=splat_scene(),
    dtype=st.sampled_from((*FLOAT_DTYPES, torch.int32)),
    compensations=st.booleans(),
    camera_model=st.sampled_from(["pinhole", "ortho", "fisheye"]),
)
def test_projection_matches_the_oracle_or_refuses(scene, dtype, compensations, camera_model):
    from projection_scenes import assert_matches_oracle, oracle

    means, quats, scales, viewmats, Ks, poisoned = scene
    args = (means.to(dtype), None, quats.to(dtype), scales.to(dtype), viewmats, Ks, 37, 29)
    if not dtype.is_floating_point:
        with pytest.raises(TypeError, match="fully_fused_projection.*dtype|float"):
            prebuild.fully_fused_projection(*args)
        return
    out = prebuild.fully_fused_projection(
        *args, calc_compensations=compensations, camera_model=camera_model
    )
    radii = out[0]
    # A Gaussian with a NaN or infinite parameter is culled everywhere, never drawn.
    assert (radii[:, poisoned] == 0).all()
    clean = ~poisoned

    # The oracle sees the same (rounded) float32 values as the kernels.
    def f64(t):
        return t.to(dtype).float()[clean].double()

    ref = oracle(
        f64(means),
        None,
        f64(quats),
        f64(scales),
        viewmats.double(),
        Ks.double(),
        37,
        29,
        calc_compensations=compensations,
        camera_model=camera_model,
    )
    event(f"visible pairs: {'some' if (radii > 0).all(-1).any() else 'none'}")
    mine = [t[:, clean] for t in out[:4]]
    comps = out[4][:, clean] if compensations else torch.zeros(0)
    assert_matches_oracle((*mine, comps), ref, compensations, 37, 29)


@SETTINGS
@given(
    scene=splat_scene(),
    batch=st.sampled_from([(), (2,), (1, 2)]),
    camera_model=st.sampled_from(["pinhole", "ortho", "fisheye"]),
    compensations=st.booleans(),
)
def test_packed_projection_is_the_visible_dense_pairs(scene, batch, camera_model, compensations):
    """For any scene, batch shape and camera model, packed=True returns exactly the dense
    outputs of the visible pairs, in (batch, camera, Gaussian) order."""
    means, quats, scales, viewmats, Ks, _ = scene
    args = [t.expand(*batch, *t.shape) for t in (means, quats, scales, viewmats, Ks)]
    kwargs = dict(calc_compensations=compensations, camera_model=camera_model)
    dense = prebuild.fully_fused_projection(args[0], None, *args[1:], 37, 29, **kwargs)
    packed = prebuild.fully_fused_projection(
        args[0], None, *args[1:], 37, 29, packed=True, **kwargs
    )
    B, C, N = math.prod(batch), len(viewmats), len(means)
    visible = (dense[0] > 0).all(-1).reshape(B, C, N)
    index = visible.nonzero(as_tuple=True)
    for ids, want in zip(packed[:3], index):
        assert torch.equal(ids, want)
    for d, p in zip(dense, packed[3:]):
        if d is None:
            assert p is None
            continue
        assert torch.equal(d.reshape(B, C, N, *d.shape[len(batch) + 2 :])[index], p)


@SETTINGS
@given(
    scene=splat_scene(),
    camera_value=st.sampled_from(SPECIALS[:3]),
    where=st.sampled_from(["viewmats", "Ks"]),
)
def test_projection_refuses_non_finite_cameras(scene, camera_value, where):
    means, quats, scales, viewmats, Ks, _ = scene
    bad = {"viewmats": viewmats.clone(), "Ks": Ks.clone()}
    bad[where][-1, 0, 0] = camera_value
    with pytest.raises(
        ValueError, match=f"{where}.*camera {len(viewmats) - 1}|camera {len(viewmats) - 1}.*{where}"
    ):
        prebuild.fully_fused_projection(
            means, None, quats, scales, bad["viewmats"], bad["Ks"], 37, 29
        )


@SETTINGS
@given(
    scene=splat_scene(), D=st.integers(1, 5), poison_colors=st.booleans(), background=st.booleans()
)
def test_rasterization_matches_the_reference_chain_or_stays_visible(
    scene, D, poison_colors, background
):
    """The whole chain on random scenes: equal to the references where every input is
    finite; a NaN colour shows up as NaN exactly in the pixels the Gaussian contributes to,
    never hidden in a finite value; Gaussians with non-finite geometry are culled."""
    from test_rendering import reference_render

    means, quats, scales, viewmats, Ks, poisoned = scene
    C, N = len(viewmats), len(means)
    gen = torch.Generator().manual_seed(N * 7 + D)
    s = dict(
        means=means,
        quats=quats,
        scales=scales,
        opacities=0.2 + 0.7 * torch.rand(N, generator=gen),
        colors=torch.rand(C, N, D, generator=gen),
        viewmats=viewmats,
        Ks=Ks,
        backgrounds=torch.rand(C, D, generator=gen) if background else torch.zeros(C, D),
    )
    clean = ~poisoned
    nan_gaussian = int(clean.nonzero()[0]) if poison_colors and clean.any() else None
    if nan_gaussian is not None:
        s["colors"][:, nan_gaussian] = math.nan
    colors, alphas, meta = prebuild.rasterization(
        s["means"],
        s["quats"],
        s["scales"],
        s["opacities"],
        s["colors"],
        viewmats,
        Ks,
        37,
        29,
        backgrounds=s["backgrounds"] if background else None,
        packed=False,
    )
    assert colors.shape == (C, 29, 37, D) and alphas.shape == (C, 29, 37, 1)
    assert torch.isfinite(alphas).all() and (alphas >= 0).all() and (alphas <= 1).all()
    assert (meta["radii"][:, poisoned] == 0).all()

    ref = {k: v.double() for k, v in s.items()}
    for k in ("means", "quats", "scales", "opacities"):
        ref[k] = ref[k][clean]
    ref["colors"] = ref["colors"][:, clean]
    if nan_gaussian is None:
        ref_colors, ref_alphas = reference_render(ref)
        torch.testing.assert_close(colors.double(), ref_colors, rtol=1e-4, atol=1e-4)
    else:
        # Where the Gaussian has weight, the render depends on its colour.
        column = int(clean[:nan_gaussian].sum())
        renders = []
        for value in (0.0, 1.0):
            ref["colors"][:, column] = value
            renders.append(reference_render(ref)[0])
        ref_alphas = reference_render(ref)[1]
        contributes = (renders[1] - renders[0]) != 0
        event(f"NaN colour reaches pixels: {bool(contributes.any())}")
        assert torch.equal(torch.isnan(colors), contributes)
        torch.testing.assert_close(
            colors.double()[~contributes], renders[0][~contributes], rtol=1e-4, atol=1e-4
        )
    torch.testing.assert_close(alphas.double(), ref_alphas, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    N=st.integers(0, 20),
    D=st.sampled_from([1, 3, 4]),
    plant=st.lists(
        st.tuples(
            st.sampled_from(["means2d", "conics", "opacities"]), st.sampled_from(SPECIALS[:3])
        ),
        max_size=3,
    ),
    background=st.booleans(),
)
def test_rasterize_to_pixels_matches_the_reference_with_special_values(
    seed, N, D, plant, background
):
    """Non-finite geometry or opacity hides a Gaussian (skipped like alpha < 1/255, as in
    the reference), it never paints its tile; everything else is the reference's result."""
    s = make_scene(C=2, N=N, D=D, seed=seed, background=background)
    gen = torch.Generator().manual_seed(seed)
    for field, value in plant if N else []:
        t = s[field]
        t.view(-1)[int(torch.randint(t.numel(), (1,), generator=gen))] = value
    colors, alphas = prebuild.rasterize_to_pixels(**s)
    (ref_colors, ref_alphas), _ = reference(s)
    assert torch.isfinite(colors).all() and torch.isfinite(alphas).all()
    torch.testing.assert_close(colors.double(), ref_colors, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(alphas.double(), ref_alphas, rtol=1e-4, atol=1e-4)
