"""What the CUDA tests (tests/cuda/) share: whether they can run here (a visible GPU, and
prebuild's CUDA library loaded), the devices they run on, and the one table of tolerances
between the CUDA kernels and the CPU kernels, with the comparison that applies it.

Importable by name from the test files and the folder's conftest.py (pytest puts tests/cuda
on sys.path); a module of its own rather than conftest.py, because tests/ops and tests/e2e have a
conftest.py too and ``from conftest import`` would get whichever was imported last.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def gpu_skip_reason() -> str | None:
    """Why these tests cannot run in this process, or None. Asks torch only whether a GPU is
    visible: no CUDA context is created."""
    if torch.cuda.is_available():
        return None
    return (
        f"no CUDA GPU is visible (torch.cuda.is_available() is False; torch {torch.__version__}, "
        f"CUDA {torch.version.cuda or 'none: a CPU build'}): the CUDA tests run on a GPU machine "
        "with `pytest -m cuda`"
    )


def library_skip_reason() -> str | None:
    """Why prebuild's CUDA kernels cannot run in this process, or None. Loads prebuild's
    libraries (which creates no CUDA context); only called once a GPU is visible."""
    from prebuild.runtime.errors import PrebuildError

    try:
        from prebuild.ops._library import LIBRARY
    except PrebuildError as exc:  # e.g. TorchVersionError: a torch older than the wheel's target
        return f"prebuild does not load in this process ({type(exc).__name__}): {exc}"
    if LIBRARY.cuda_error is not None:  # built without archs, or another CUDA major than torch's
        return f"prebuild's CUDA library is not loaded ({type(LIBRARY.cuda_error).__name__}): {LIBRARY.cuda_error}"
    return None


def visible_devices() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# Device indices the per-device tests are parametrized over: every visible GPU. With none,
# [0], so that each test is collected once and skipped with the conftest's reason (an empty
# parameter set would be skipped with pytest's own "got empty parameter set" instead).
DEVICE_INDICES = list(range(max(1, visible_devices())))


@dataclass(frozen=True)
class Tolerance:
    """``|cuda - cpu| <= atol * scale + rtol * |cpu|`` element-wise, ``scale`` the largest
    magnitude of the CPU result (over the whole tensor, or per row, see ``assert_matches``):
    an atol relative to the quantity's own size, so one entry serves pixels and radians."""

    rtol: float
    atol: float


# CUDA against CPU on the same float32 inputs. The kernels share their per-element source
# (csrc/*/*_math.h), so they differ only where the compilers do: nvcc contracts a * b + c into
# fused multiply-adds (the CPU library is built with -ffp-contract=off), CUDA's expf, atan2f,
# log1pf and expm1f are not glibc's (a few ulps apart), and the GPU backward kernels sum with
# atomics in whatever order the threads arrive. tests/ops holds the CPU kernels within a
# bound B of a float64 reference; the GPU code, the same source rounded no worse, sits within
# B of it too, so the two are within 2 B of each other: most entries are twice tests/ops'.
TOLERANCES = {
    # SSIM map and mean: B = 1e-5 absolute on textured images (tests/ops/test_ssim.py's
    # MAP_ATOL); the variances E[x^2] - mu^2 cancel, so the window sums' FMA roundings show.
    "ssim": Tolerance(rtol=1e-5, atol=2e-5),
    # SSIM gradients (and the forward's stored derivatives dS): B = rtol 1e-4 and about 2.5e-5
    # of the largest (tests/ops: atol max(1e-5 of the largest, 1e-4 / pixels)).
    "ssim_grad": Tolerance(rtol=2e-4, atol=5e-5),
    # Projection outputs (means2d, depths, conics, compensations) and proj's means2d and
    # covars2d: B = 1e-4 of the largest (tests/ops/projection_scenes.py RTOL); conics come
    # from a 2x2 inverse whose determinant cancels for thin Gaussians.
    "projection": Tolerance(rtol=2e-4, atol=2e-4),
    # Their gradients (means, quats, scales, covars, viewmats): B = 1e-4 of the largest
    # (tests/ops/test_projection_models.py); viewmats sum N Gaussians' terms with atomics.
    "projection_grad": Tolerance(rtol=2e-4, atol=2e-4),
    # Fisheye gradients: B = 2e-3 (tests/ops/test_projection_models.py): the compensation's
    # 2D determinant cancels in float32 (docs/kernels.md, "gsplat's own tests").
    "fisheye_grad": Tolerance(rtol=4e-3, atol=4e-3),
    # Covariances and precisions, per Gaussian (row = its matrix): B = 1e-5 of its largest
    # entry (tests/ops/test_covariance.py FORWARD_REL); precisions scale as 1 / s^2.
    "covariance": Tolerance(rtol=2e-5, atol=2e-5),
    # Their quats and scales gradients, per Gaussian: B = 1e-3 (BACKWARD_REL): the
    # normalisation's derivative removes the quaternion's radial part, which cancels.
    "covariance_grad": Tolerance(rtol=2e-3, atol=2e-3),
    # SH colours and their coeffs and dirs gradients: B = 1e-4 (gsplat's test_sh tolerance,
    # tests/ops/test_sh.py): up to 25 basis terms of both signs summed in float32.
    "sh": Tolerance(rtol=2e-4, atol=2e-4),
    # compute_relocation, ratios 1..8: new opacities differ by CUDA's log1pf/expm1f ulps;
    # D's alternating sum amplifies them by sum|terms| / |D| (below 10 for ratios <= 8;
    # tests/ops bounds the scales by 2e-6 + 64 ulps times that ratio).
    "relocation": Tolerance(rtol=1e-4, atol=1e-6),
    # Rendered colours and alphas: B = 1e-4 of max(1, largest) (tests/ops/test_rasterize.py);
    # transmittance is a product over up to ~100 Gaussians of 1 - alpha, alpha from expf.
    "raster": Tolerance(rtol=2e-4, atol=2e-4),
    # Rasterization gradients, and the whole rasterization() chain's: B = rtol 1e-3, atol 2e-4
    # of the largest: the backward recovers transmittance by dividing by 1 - alpha (up to
    # 1000x amplification at alpha 0.999) and sums each Gaussian's pixels with atomics.
    "raster_grad": Tolerance(rtol=2e-3, atol=4e-4),
    # Compiled against eager on the same GPU: the same kernels; only the ops inductor
    # generates around them (sums, broadcasts, divisions) may round differently.
    "compiled": Tolerance(rtol=1e-5, atol=1e-6),
}


def assert_matches(
    got: torch.Tensor | None,
    want: torch.Tensor | None,
    tol: Tolerance | None,
    what: str,
    row_dims: int = 0,
) -> None:
    """``got`` (CUDA's, on any device) against ``want`` (the CPU kernel's): same shape and
    dtype; integers and booleans exactly equal, floats within ``tol`` (NaN only where the
    other has NaN). ``row_dims``: the atol's scale is the largest magnitude over that many
    trailing dimensions (a per-Gaussian scale) instead of over the whole tensor."""
    if want is None or got is None:
        assert got is None and want is None, f"{what}: got {got!r}, want {want!r}"
        return
    got = got.detach().cpu()
    want = want.detach().cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
    if not want.dtype.is_floating_point:
        if not torch.equal(got, want):
            bad = (got != want).nonzero()
            first = tuple(bad[0].tolist())
            raise AssertionError(
                f"{what}: {len(bad)} of {want.numel()} entries differ, first at "
                f"{first}: {got[first].item()} instead of {want[first].item()}"
            )
        return
    if want.numel() == 0:
        return
    assert tol is not None, what
    g, w = got.double(), want.double()
    if w.dim() == 0:  # a scalar (a mean): one element to point at in the message
        g, w = g.reshape(1), w.reshape(1)
    finite = torch.where(torch.isfinite(w), w, torch.zeros_like(w)).abs()
    if row_dims:
        scale = finite.amax(dim=tuple(range(-row_dims, 0)), keepdim=True)
    else:
        scale = finite.max()
    allowed = tol.atol * scale + tol.rtol * w.abs()
    both_nan = torch.isnan(g) & torch.isnan(w)
    ok = ((g - w).abs() <= allowed) | both_nan | (g == w)  # g == w: equal infinities
    if not bool(ok.all()):
        excess = torch.where(
            ok, torch.zeros_like(g), ((g - w).abs() - allowed).nan_to_num(float("inf"))
        )
        worst = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
        raise AssertionError(
            f"{what}: {int((~ok).sum())} of {w.numel()} entries differ beyond rtol={tol.rtol}, "
            f"atol={tol.atol} x scale; worst at {worst}: {g[worst].item()!r} instead of "
            f"{w[worst].item()!r} (allowed difference {allowed[worst].item():.3g})"
        )
