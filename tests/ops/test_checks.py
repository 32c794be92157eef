"""prebuild.ops._checks: the one home of the ops' input checks (messages name op and argument)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prebuild.ops._checks import (
    TILE_GRID_MISMATCH,
    check_bool,
    check_dtype,
    check_float_input,
    check_int,
    check_real,
    check_tensor,
    tile_grid,
)


def test_check_tensor():
    t = torch.zeros(2, dtype=torch.int32)
    assert check_tensor("op", "x", t) is t and check_tensor("op", "x", t, torch.int32) is t
    with pytest.raises(TypeError, match="op: x must be a torch.Tensor, got list"):
        check_tensor("op", "x", [1])
    with pytest.raises(TypeError, match="op: x must be float32, got torch.int32"):
        check_tensor("op", "x", t, torch.float32)
    assert check_tensor("op", "x", torch.empty(2, device="meta")).is_meta
    with pytest.raises(TypeError, match="must be floating point"):
        check_float_input("op", "x", t)


@pytest.mark.parametrize(
    "value, minimum, error, message",
    [
        (True, 1, TypeError, "n must be an int, got bool"),
        (2.0, 1, TypeError, "n must be an int, got float"),
        (0, 1, ValueError, "n must be positive, got 0"),
        (-1, 0, ValueError, "n must be non-negative, got -1"),
        (1, 2, ValueError, "n must be >= 2, got 1"),
    ],
)
def test_check_int_refuses(value, minimum, error, message):
    with pytest.raises(error, match=message):
        check_int("op", "n", value, minimum)


def test_check_int_real_bool_accept():
    assert check_int("op", "n", np.int64(3)) == 3 and check_int("op", "n", 0, 0) == 0
    assert check_real("op", "f", 1) == 1.0
    with pytest.raises(ValueError, match="op: f is NaN"):
        check_real("op", "f", float("nan"))
    with pytest.raises(TypeError, match="op: f must be a float, got str"):
        check_real("op", "f", "1")
    assert check_bool("op", "b", False) is False
    with pytest.raises(TypeError, match="op: b must be a bool, got int"):
        check_bool("op", "b", 1)


def test_fake_kernel_dtype_check_and_tile_grid():
    with pytest.raises(RuntimeError, match="op: ids must be int64, got torch.int32"):
        check_dtype("op", torch.int64, ids=torch.zeros(1, dtype=torch.int32))
    assert tile_grid(2, 33, 16, 16) == (2, 3, 1) and tile_grid(1, 16, 17, 16) == (1, 1, 2)
    assert "tile_size" in TILE_GRID_MISMATCH
