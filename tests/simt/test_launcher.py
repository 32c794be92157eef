"""The SIMT launcher itself (prebuild/simt_launcher.h), through its self-test kernel: a block
reduction in shared memory over a 3-D grid of 8x4-thread blocks."""

from __future__ import annotations

import pytest
import torch

from prebuild.testing import simt

pytestmark = pytest.mark.simt

CORRECT, MISSING_BARRIER, DIVERGENT_BARRIER, COUNT_ABOVE_HALF = 0, 1, 2, 3
THREADS = 32


@pytest.mark.parametrize("grid", [(1, 1, 1), (3, 2, 1), (2, 3, 4)])
def test_block_indices_threads_and_barriers(grid):
    blocks = grid[0] * grid[1] * grid[2]
    x = torch.rand(blocks * THREADS)
    out = simt.harness_block_sum(x, *grid, CORRECT)
    # Each block summed exactly its own 32 inputs: block and thread indices map as on a GPU.
    torch.testing.assert_close(out, x.view(blocks, THREADS).sum(1), rtol=1e-6, atol=1e-5)


def test_a_missing_barrier_is_caught_every_time():
    """Without the barrier after the shared-memory store, thread 0 reduces values its peers
    have not stored yet: the deterministic schedule plus the NaN poison make that visible."""
    x = torch.rand(4 * THREADS)
    for _ in range(3):
        out = simt.harness_block_sum(x, 4, 1, 1, MISSING_BARRIER)
        assert torch.isnan(out).all()


def test_a_barrier_in_divergent_code_is_an_error():
    x = torch.rand(THREADS)
    with pytest.raises(RuntimeError, match="barrier divergence"):
        simt.harness_block_sum(x, 1, 1, 1, DIVERGENT_BARRIER)


def test_sync_count_counts_the_block():
    x = torch.rand(6 * THREADS)
    out = simt.harness_block_sum(x, 3, 2, 1, COUNT_ABOVE_HALF)
    assert out.tolist() == (x.view(6, THREADS) > 0.5).sum(1).float().tolist()


def test_bad_input_is_refused():
    with pytest.raises(RuntimeError, match="values per block"):
        simt.harness_block_sum(torch.rand(31), 1, 1, 1, CORRECT)
