"""Shared setup for the op tests: make tests/ops importable (reference.py) and seed torch."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# torch warns once at import when numpy is missing; irrelevant here.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)
    yield
