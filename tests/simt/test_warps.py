"""The SIMT layer's warp collectives (ctx.warp_sum, warp_any, warp_max, lane) as the CPU
launcher runs them, through the self-test kernel harness_warp: one thread per input, out
[threads, 3] = (the first result, the second, the lane)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prebuild.testing import simt

pytestmark = pytest.mark.simt

SUM, ANY_MAX, LOOPS, RETURNED, AT_BARRIER, MISMATCH, SCATTER9, SCATTER3 = range(8)

# (grid, block): full warps, 2-D and 3-D blocks, and blocks ending in a partial warp.
SHAPES = [
    ((1, 1, 1), (32, 1, 1)),
    ((2, 1, 1), (16, 16, 1)),
    ((1, 2, 1), (8, 4, 3)),
    ((3, 1, 1), (5, 7, 1)),  # 35 threads: a warp of 32, then one of 3
    ((2, 1, 2), (3, 3, 2)),  # 18 threads: one partial warp
    ((1, 1, 1), (1, 1, 1)),  # a single lane
    ((1, 1, 1), (30, 33, 1)),  # 990 threads: 30 full warps and one of 30
]


def warps(n_threads):
    """The lanes of each warp of a block: 32 consecutive linear ranks, the last maybe fewer."""
    return [range(w, min(w + 32, n_threads)) for w in range(0, n_threads, 32)]


def butterfly(values: np.ndarray) -> np.ndarray:
    """What each lane gets from __shfl_xor_sync's butterfly over offsets 16..1 (float32
    adds), with missing lanes of a partial warp holding 0 and lane 0's sum broadcast."""
    v = np.zeros(32, np.float32)
    v[: len(values)] = values
    for offset in (16, 8, 4, 2, 1):
        v = (v + v[np.arange(32) ^ offset]).astype(np.float32)
    return v[: len(values)] if len(values) == 32 else np.full(len(values), v[0], np.float32)


def run(mode, grid, block, x):
    return simt.harness_warp(x, *grid, *block, mode)


def blocks_of(x, grid, block):
    threads = block[0] * block[1] * block[2]
    return x.view(grid[0] * grid[1] * grid[2], threads)


@pytest.mark.parametrize("grid,block", SHAPES)
def test_warp_sum_is_the_gpus_butterfly_bit_for_bit(grid, block):
    threads = block[0] * block[1] * block[2]
    g = torch.Generator().manual_seed(threads)
    # Magnitudes over 8 decades: the order of the adds shows in the bits.
    x = torch.randn(grid[0] * grid[1] * grid[2] * threads, generator=g)
    x = x * torch.pow(10.0, torch.randint(-4, 4, x.shape, generator=g).float())
    out = run(SUM, grid, block, x).view(-1, threads, 3)
    for b, xs in enumerate(blocks_of(x, grid, block).numpy()):
        for lanes in warps(threads):
            want = butterfly(xs[lanes.start : lanes.stop])
            want2 = butterfly(np.float32(-2.0) * xs[lanes.start : lanes.stop])
            got = out[b, lanes.start : lanes.stop].numpy()
            assert np.array_equal(got[:, 0], want), (b, lanes)
            assert np.array_equal(got[:, 1], want2), (b, lanes)
            assert np.array_equal(got[:, 2], np.arange(len(lanes), dtype=np.float32))


def test_warp_sum_order_differs_from_a_running_sum():
    """The test above would not see a launcher that summed lane after lane: here it would."""
    x = torch.tensor([1e8, 1.0, -1e8] + [1.0] * 29)
    out = run(SUM, (1, 1, 1), (32, 1, 1), x)
    running = np.float32(0)
    for v in x.numpy():
        running = np.float32(running + v)
    assert out[0, 0].item() == butterfly(x.numpy())[0]
    assert out[0, 0].item() != running


@pytest.mark.parametrize("grid,block", SHAPES)
def test_warp_any_and_max_cover_exactly_the_warps_lanes(grid, block):
    threads = block[0] * block[1] * block[2]
    g = torch.Generator().manual_seed(7 + threads)
    # Mostly below 0.5, so some warps have no lane above it.
    x = torch.rand(grid[0] * grid[1] * grid[2] * threads, generator=g) * 0.52 - 0.01
    out = run(ANY_MAX, grid, block, x).view(-1, threads, 3)
    for b, xs in enumerate(blocks_of(x, grid, block)):
        for lanes in warps(threads):
            w = xs[lanes.start : lanes.stop]
            got = out[b, lanes.start : lanes.stop]
            assert (got[:, 0] == float((w > 0.5).any())).all()
            assert (got[:, 1] == float((1e6 * w).int().max())).all()


def test_warps_meet_at_their_own_collectives():
    """Warp w runs w + 1 sums in a loop: a warp collective waits for its own lanes only,
    so the warps are at different collectives at once and none waits for another."""
    x = torch.rand(4 * 32 + 5)
    out = run(LOOPS, (1, 1, 1), (x.numel(), 1, 1), x)
    for w, lanes in enumerate(warps(x.numel())):
        s = butterfly(x[lanes.start : lanes.stop].numpy())[0]
        acc = np.float32(0)
        for _ in range(w + 1):
            acc = np.float32(acc + s)
        assert (out[lanes.start : lanes.stop, 0] == float(acc)).all()


@pytest.mark.parametrize("block", [(32, 1, 1), (8, 8, 1), (5, 1, 1)])
def test_a_lane_that_returned_is_a_warp_divergence(block):
    x = torch.rand(block[0] * block[1] * block[2])
    with pytest.raises(RuntimeError, match="warp divergence.*lane 1 has returned"):
        run(RETURNED, (1, 1, 1), block, x)


def test_a_lane_at_a_block_barrier_is_a_warp_divergence():
    x = torch.rand(64)
    with pytest.raises(RuntimeError, match="warp divergence.*lane 1 waits at a block barrier"):
        run(AT_BARRIER, (1, 1, 1), (64, 1, 1), x)


def test_lanes_at_different_collectives_are_a_warp_divergence():
    x = torch.rand(32)
    with pytest.raises(
        RuntimeError, match=r"lane 0 waits at warp_sum .*#1.* lane 1 waits at warp_any .*#1"
    ):
        run(MISMATCH, (1, 1, 1), (32, 1, 1), x)


@pytest.mark.parametrize("n,mode", [(9, SCATTER9), (3, SCATTER3)])
@pytest.mark.parametrize("grid,block", SHAPES)
def test_warp_scatter_sums_give_each_lane_one_sum_with_warp_sums_bits(grid, block, n, mode):
    """simt::warp_scatter_sums: lane L gets the butterfly sum (warp_sum's bits) of value
    scatter_index(L) = L >> (5 - log2 P), P = n rounded up to a power of two, and zero past
    the n values; full warps through the split-and-exchange steps (shfl_xor), partial warps
    through one warp_sum per value."""
    threads = block[0] * block[1] * block[2]
    g = torch.Generator().manual_seed(threads + n)
    x = torch.randn(grid[0] * grid[1] * grid[2] * threads, generator=g)
    x = x * torch.pow(10.0, torch.randint(-4, 4, x.shape, generator=g).float())
    out = run(mode, grid, block, x).view(-1, threads, 3)
    padded = 16 if n > 8 else 4
    shift = 5 - {4: 2, 16: 4}[padded]
    for b, xs in enumerate(blocks_of(x, grid, block).numpy()):
        for lanes in warps(threads):
            values = xs[lanes.start : lanes.stop]
            got = out[b, lanes.start : lanes.stop].numpy()
            for lane in range(len(lanes)):
                index = lane >> shift
                assert got[lane, 1] == index
                want = butterfly(values * np.float32(index + 1))[lane] if index < n else 0.0
                assert got[lane, 0] == want, (b, lanes, lane)
