"""scripts/gsplat_suite.py: gsplat 1.5.3's own tests run with prebuild's ops substituted.

The oracle's CPU pieces (scripts/gsplat_suite_plugin.py) are checked against brute force,
the test-file rewrite against what it must and must not change, and the whole suite runs
end to end on the CPU kernels from gsplat's sdist: at least 90 % of its test cases pass.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(ROOT / "tests" / "ops"))

from gsplat_oracle import torch_impl  # noqa: E402


def load(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


suite = load("gsplat_suite")


def _plugin():
    """The plugin module in a child-free way: its shims, without its import-time patching."""
    source = (SCRIPTS / "gsplat_suite_plugin.py").read_text()
    head = source.split("install_oracle_pieces()\nsubstitute()")[0]
    module = type(sys)("gsplat_suite_plugin_shims")
    exec(compile(head, str(SCRIPTS / "gsplat_suite_plugin.py"), "exec"), module.__dict__)
    return module


shims = _plugin()


def tiny_scene(I=2, N=30, W=21, H=13, tile=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    means2d = torch.rand(I, N, 2, generator=gen) * torch.tensor([W, H])
    A = torch.randn(I, N, 2, 2, generator=gen) * 0.3
    cov = A @ A.transpose(-1, -2) + 2.0 * torch.eye(2)
    inv = torch.linalg.inv(cov)
    conics = torch.stack([inv[..., 0, 0], inv[..., 0, 1], inv[..., 1, 1]], -1)
    opacities = 0.3 + 0.7 * torch.rand(I, N, generator=gen)
    radii = torch.full((I, N, 2), 6, dtype=torch.int32)
    depths = torch.rand(I, N, generator=gen)
    tw, th = math.ceil(W / tile), math.ceil(H / tile)
    _, isect_ids, flatten_ids = torch_impl._isect_tiles(means2d, radii, depths, tile, tw, th)
    offsets = torch_impl._isect_offset_encode(isect_ids, I, tw, th)
    return means2d, conics, opacities, offsets, flatten_ids.int(), W, H, tile


def brute_force_indices(
    range_start, range_end, trans0, means2d, conics, opacities, W, H, tile, offsets, flatten_ids
):
    """One pixel at a time, gsplat's kernel's rules written as plainly as possible."""
    I, N = means2d.shape[:2]
    th, tw = offsets.shape[-2:]
    flat_offsets = offsets.flatten().tolist() + [len(flatten_ids)]
    out = []
    for i in range(I):
        for y in range(H):
            for x in range(W):
                t_id = i * th * tw + (y // tile) * tw + x // tile
                lo, hi = flat_offsets[t_id], flat_offsets[t_id + 1]
                T = float(trans0[i, y, x])
                for k in range(
                    lo + range_start * tile * tile, min(hi, lo + range_end * tile * tile)
                ):
                    g = int(flatten_ids[k])
                    dx = float(means2d.reshape(-1, 2)[g, 0]) - (x + 0.5)
                    dy = float(means2d.reshape(-1, 2)[g, 1]) - (y + 0.5)
                    a, b, c = conics.reshape(-1, 3)[g].tolist()
                    sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy
                    alpha = min(0.999, float(opacities.reshape(-1)[g]) * math.exp(-sigma))
                    if sigma < 0 or alpha < 1 / 255:
                        continue
                    if T * (1 - alpha) <= 1e-4:
                        break
                    out.append((g % N, y * W + x, i))
                    T *= 1 - alpha
    return out


@pytest.mark.parametrize("ranges", [(0, 100), (0, 1), (1, 3)])
def test_indices_in_range_match_brute_force(ranges):
    means2d, conics, opacities, offsets, flatten_ids, W, H, tile = tiny_scene()
    trans0 = torch.ones(2, H, W)
    trans0[0, :3] = 0.5  # some pixels start part-covered
    got = shims.rasterize_to_indices_in_range(
        *ranges, trans0, means2d, conics, opacities, W, H, tile, offsets, flatten_ids
    )
    want = brute_force_indices(
        *ranges, trans0, means2d, conics, opacities, W, H, tile, offsets, flatten_ids
    )
    assert len(want) > 0
    assert list(zip(*(t.tolist() for t in got))) == want


def test_weights_match_a_loop_and_are_differentiable():
    alphas = torch.rand(9, dtype=torch.float64, requires_grad=True) * 0.9
    rays = torch.tensor([0, 0, 0, 2, 2, 5, 5, 5, 5])
    weights, trans = shims._render_weight_from_alpha(alphas, ray_indices=rays, n_rays=6)
    expected, T, previous = [], 1.0, None
    for a, r in zip(alphas.tolist(), rays.tolist()):
        T = 1.0 if r != previous else T
        expected.append((a * T, T))
        T, previous = T * (1 - a), r
    torch.testing.assert_close(weights, torch.tensor([e[0] for e in expected], dtype=torch.float64))
    torch.testing.assert_close(trans, torch.tensor([e[1] for e in expected], dtype=torch.float64))
    sums = shims._accumulate_along_rays(weights, None, ray_indices=rays, n_rays=6)
    assert sums.shape == (6, 1) and sums[1].item() == 0 and sums[0].item() > 0
    (grad,) = torch.autograd.grad(sums.sum(), alphas)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_rewrite_changes_only_the_device_and_the_skip_markers():
    source = (
        'import torch\nimport pytest\n\ndevice = torch.device("cuda:0")\n\n\n'
        + suite.CUDA_SKIP
        + "def test_a():\n    assert torch.ones(1, device=device).sum() == 1\n"
    )
    out = suite.rewrite(source, "t.py")
    assert 'device = torch.device("cpu")' in out and "skipif" not in out
    assert out.replace('torch.device("cpu")', 'torch.device("cuda:0")') == source.replace(
        suite.CUDA_SKIP, ""
    )
    with pytest.raises(SystemExit, match="does not set its device"):
        suite.rewrite(source.replace("cuda:0", "cuda"), "t.py")
    with pytest.raises(SystemExit, match="no CUDA skip marker"):
        suite.rewrite(source.replace(suite.CUDA_SKIP, ""), "t.py")
    # On the GPU the tests run as written (checked all the same: it must be gsplat 1.5.3's).
    assert suite.rewrite(source, "t.py", "cuda") == source
    with pytest.raises(SystemExit, match="does not set its device"):
        suite.rewrite(source.replace("cuda:0", "cuda"), "t.py", "cuda")


def test_synthetic_garden_has_the_fields_gsplat_loads(tmp_path):
    import numpy as np

    path = tmp_path / "g.npz"
    suite.synthetic_garden(path, points=50, width=40, height=30)
    data = np.load(path)
    assert set(data) == {"means3d", "colors", "viewmats", "Ks", "height", "width"}
    assert data["means3d"].shape == (50, 3) and data["colors"].dtype == np.uint8
    assert data["viewmats"].shape == (3, 4, 4) and data["Ks"].shape == (3, 3, 3)
    # Every camera sees the scene's centre in front of it, inside the image.
    for V, K in zip(data["viewmats"], data["Ks"]):
        p = V[:3, 3]
        assert p[2] > 0
        u, v = K[0, 0] * p[0] / p[2] + K[0, 2], K[1, 1] * p[1] / p[2] + K[1, 2]
        assert 0 < u < 40 and 0 < v < 30


def test_gsplat_compat_points_gsplat_at_prebuild_and_refuses_its_cuda():
    code = (
        "import prebuild, prebuild.gsplat_compat as c\n"
        "c.use_prebuild_kernels()\n"
        "import gsplat, gsplat.strategy.ops as ops, gsplat.rendering as r, gsplat.cuda._wrapper as w\n"
        "assert ops.quat_scale_to_covar_preci is prebuild.quat_scale_to_covar_preci\n"
        "assert ops.compute_relocation is prebuild.compute_relocation\n"
        "assert gsplat.rasterization is prebuild.rasterization and r.rasterization is prebuild.rasterization\n"
        "assert w.fully_fused_projection is prebuild.fully_fused_projection\n"
        "try:\n    w._make_lazy_cuda_func('rasterize_to_indices_3dgs')(0, 1)\n"
        "except RuntimeError as e:\n    assert 'does not provide' in str(e), e\n"
        "else:\n    raise SystemExit('no error')\n"
        "import gsplat.relocation as rel\n"
        "assert w._make_lazy_cuda_func is c._refuse_cuda is rel._make_lazy_cuda_func\n"
        "try:\n    w.RollingShutterType.GLOBAL.to_cpp()\n"
        "except RuntimeError as e:\n    assert \"'ShutterType.GLOBAL'\" in str(e), e\n"
        "else:\n    raise SystemExit('no error')\n"
        "import sys; assert 'gsplat.cuda._backend' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
