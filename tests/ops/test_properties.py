"""Property-based tests (hypothesis) of the public ops over shapes, dtypes, strides, devices
and values: every call either returns what the reference returns or raises a Python
exception (TypeError / ValueError / RuntimeError) whose message names the problem. Never a
crash, a hang, or a finite wrong answer: non-finite inputs give a non-finite result.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import ssim_reference

import prebuild

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
SPECIALS = [math.nan, math.inf, -math.inf, 1e30, -1e30, 0.0]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.uint8,
          torch.bool]  # fmt: skip


@st.composite
def images(draw, shape, dtypes=tuple(DTYPES), specials=True):
    """An image of ``shape`` in [0, 1], maybe with special values planted, maybe as a
    non-contiguous view, in one of ``dtypes``."""
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.rand(shape, generator=gen, dtype=torch.float64)
    planted = draw(st.lists(st.sampled_from(SPECIALS), max_size=3)) if specials and x.numel() else []
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
@given(data=st.data(), shape=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 17),
                                       st.integers(1, 17)))  # fmt: skip
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
