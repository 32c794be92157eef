"""pack_visible (csrc/gsplat/pack.h): gsplat's packed layout of the projection's dense outputs
in one op, and its backward in one op, against the chain of PyTorch ops it replaces (a mask,
a nonzero, the ids' divisions, a gather per output; index_add back). Copies only, so
everything is compared for equality. The CUDA block bodies run by the SIMT launcher (simt)
must give the CPU kernel's bytes."""

from __future__ import annotations

import pytest
import torch
from compiled import assert_compiled_matches_eager
from pack_scenes import dense_outputs, gaussian_inputs
from projection_scenes import HEIGHT, WIDTH, cameras, gaussians

import prebuild  # noqa: F401  (loads the ops)
from prebuild.ops.pack import pack
from prebuild.ops.projection import fully_fused_projection
from prebuild.testing import simt, use_simt

CPU = torch.ops.prebuild

BACKENDS = [
    pytest.param(CPU, id="cpu"),
    pytest.param(simt, id="simt", marks=pytest.mark.simt),
]


def reference_pack(radii, means2d, depths, conics, compensations, opacities=None, colors=None):
    """What pack did before it was one op: gsplat's own chain, and rasterization()'s gathers
    of the per-Gaussian opacities and colours."""
    B, C, N = radii.shape[:3]
    flat = (radii > 0).all(-1).view(-1).nonzero().view(-1)
    image_ids = flat // N
    batch_ids, gaussian_ids = image_ids // C, flat % N
    rows = batch_ids * N + gaussian_ids

    def take(t):
        return None if t is None else t.reshape(B * C * N, *t.shape[3:]).index_select(0, flat)

    def gather(t):
        return None if t is None else t.reshape(B * N, *t.shape[2:]).index_select(0, rows)

    return (
        batch_ids,
        image_ids % C,
        gaussian_ids,
        image_ids,
        *(take(t) for t in (radii, means2d, depths, conics, compensations)),
        gather(opacities),
        gather(colors),
    )


SHAPES = [(1, 1, 7), (2, 3, 11), (1, 4, 1), (3, 1, 40)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("optional", [True, False], ids=["all", "required_only"])
def test_pack_equals_the_chain_it_replaces(backend, shape, optional):
    inputs = dense_outputs(*shape, seed=sum(shape), compensations=optional)
    if optional:
        inputs = (*inputs, *gaussian_inputs(shape[0], shape[2], F=5, seed=sum(shape)))
    got = backend.pack_visible(*inputs)
    want = reference_pack(*inputs)
    assert len(got) == len(want) == 11
    for g, w in zip(got, want):
        if w is None:
            assert g.shape == (0,)
        else:
            assert g.dtype == w.dtype and torch.equal(g, w)


@pytest.mark.simt
def test_simt_gives_the_cpu_kernels_bytes():
    """Two cameras: a Gaussian's per-Gaussian gradient is the sum of at most two rows, the
    same bits in any order of adds (the simt launcher's differs from the CPU loop's)."""
    B, C, N = 2, 2, 300
    inputs = (*dense_outputs(B, C, N, seed=3), *gaussian_inputs(B, N, F=4, seed=3))
    cpu = CPU.pack_visible(*inputs)
    grads = [torch.randn(t.shape) for t in cpu[5:]]
    ids = cpu[3], cpu[2]
    for a, b in zip(cpu, simt.pack_visible(*inputs)):
        assert torch.equal(a, b)
    for a, b in zip(
        CPU.pack_visible_backward(*ids, *grads, B, C, N),
        simt.pack_visible_backward(*ids, *grads, B, C, N),
    ):
        assert torch.equal(a, b)


@pytest.mark.parametrize("simt_backend", [False, pytest.param(True, marks=pytest.mark.simt)])
def test_gradients_equal_the_chains_and_absent_ones_stay_absent(simt_backend):
    """Three cameras: the per-Gaussian gradients sum up to three rows each (in another order
    than index_add's, so within float32 rounding); the dense pairs' are copies."""
    B, C, N = 2, 3, 13
    radii, *floats = dense_outputs(B, C, N, seed=5)
    floats += list(gaussian_inputs(B, N, F=3, seed=5))
    leaves = [t.clone().requires_grad_(True) for t in floats]
    ref_leaves = [t.clone().requires_grad_(True) for t in floats]
    if simt_backend:
        with use_simt():
            out = pack(radii, *leaves)
    else:
        out = pack(radii, *leaves)
    ref = reference_pack(radii, *ref_leaves)
    assert not any(t.requires_grad for t in out[:5])  # ids and radii: integers
    weights = [torch.randn(t.shape) for t in ref[5:]]
    # depths (index 1) unused: its gradient must stay None, not zeros
    used = (0, 2, 3, 4, 5)
    sum(out[5 + k].mul(weights[k]).sum() for k in used).backward()
    sum(ref[5 + k].mul(weights[k]).sum() for k in used).backward()
    for k in used:
        if k < 4:
            assert torch.equal(leaves[k].grad, ref_leaves[k].grad)
        else:
            torch.testing.assert_close(leaves[k].grad, ref_leaves[k].grad, rtol=1e-6, atol=1e-6)
    assert leaves[1].grad is None


def test_nothing_visible_and_no_pairs():
    for shape, visible in (((2, 2, 5), 0.0), ((1, 1, 0), 1.0), ((0, 3, 4), 1.0)):
        inputs = dense_outputs(*shape, visible=visible)
        out = CPU.pack_visible(*inputs)
        assert all(t.shape[0] == 0 for t in out)
        means2d = inputs[1].clone().requires_grad_(True)
        packed = pack(inputs[0], means2d, *inputs[2:])
        packed[5].sum().backward()
        assert means2d.grad.shape == means2d.shape and not means2d.grad.any()


def test_backward_skips_ids_outside_the_dense_pairs():
    """A direct caller's bad ids are skipped, never stored out of bounds."""
    ids = torch.tensor([0, 5, -1, 1]), torch.tensor([2, 0, 1, 9])
    v = torch.arange(8.0).view(4, 2)
    dense, *_ = CPU.pack_visible_backward(*ids, v, None, None, None, None, None, 2, 1, 3)
    want = torch.zeros(2, 1, 3, 2)
    want[0, 0, 2] = v[0]
    assert torch.equal(dense, want)


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda a: (a[0].float(), *a[1:]), "radii must be int32"),
        (lambda a: (a[0][..., :1].contiguous(), *a[1:]), r"radii must have shape \[B, C, N, 2\]"),
        (lambda a: (a[0], a[1][:, :, :-1].contiguous(), *a[2:]), "means2d must have shape"),
        (lambda a: (a[0], a[1], a[2].double(), *a[3:]), "depths must be float32"),
        (lambda a: (*a[:3], a[3].transpose(0, 1), a[4]), "conics must"),
        (lambda a: (*a, torch.rand(2, 3)), r"opacities must have shape \[B, N\]"),
        (lambda a: (*a, torch.rand(2, 4), torch.rand(2, 4)), r"colors must have shape \[B, N, F\]"),
    ],
    ids=[
        "radii_dtype",
        "radii_shape",
        "means2d_shape",
        "depths_dtype",
        "conics_layout",
        "opacities_shape",
        "colors_shape",
    ],
)
def test_bad_inputs_name_the_problem(change, match):
    inputs = change(dense_outputs(2, 2, 4))
    with pytest.raises(RuntimeError, match=match):
        CPU.pack_visible(*inputs)


def test_opcheck():
    inputs = (*dense_outputs(2, 2, 6, seed=9), *gaussian_inputs(2, 6, F=3, seed=9))
    torch.library.opcheck(CPU.pack_visible.default, inputs)
    torch.library.opcheck(CPU.pack_visible.default, inputs[:5])
    out = CPU.pack_visible(*inputs)
    grads = [torch.randn(t.shape) for t in out[5:]]
    grads[1] = None
    torch.library.opcheck(CPU.pack_visible_backward.default, (out[3], out[2], *grads, 2, 2, 6))


def test_packed_projection_compiles_fullgraph_with_backward():
    viewmats, Ks = cameras(2)
    means, quats, scales, _ = gaussians(40, seed=21)

    def loss_fn(m, q, s):
        out = fully_fused_projection(
            m, None, q, s, viewmats, Ks, WIDTH, HEIGHT, packed=True, calc_compensations=True
        )
        means2d, depths, conics, comps = out[4:8]
        return means2d.square().sum() * 1e-3 + depths.sum() + conics.sum() + comps.sum()

    assert_compiled_matches_eager(loss_fn, means, quats, scales, grads_nonzero=True)


def test_double_backward_is_refused():
    radii, means2d, *rest = dense_outputs(1, 2, 9, seed=2)
    m = means2d.clone().requires_grad_(True)
    out = pack(radii, m, *rest)
    (g,) = torch.autograd.grad(out[5].square().sum(), m, create_graph=True)
    with pytest.raises(NotImplementedError, match="pack_visible does not support double backward"):
        g.sum().backward()
