"""Every test in tests/cuda needs a CUDA GPU: each is marked ``cuda`` (``pytest -m cuda``
selects them) and skipped, with the reason, where no GPU is visible (CI and this project's
development machines) or where prebuild's CUDA library is not loaded in this process (an
install built with an empty arch list, a torch older than the wheel's stable-ABI target, a
CUDA major other than torch's): the reason names which, from the loader's own error.

The GPU check is ``torch.cuda.is_available()`` at collection (with ``device_count()`` for the
per-device parameters, cuda_support.DEVICE_INDICES); the library check loads prebuild's
libraries, once, when the first test is about to run. Neither creates a CUDA context.
tests/ops (the SSIM test images) is put on sys.path for the test files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(TESTS / "ops") not in sys.path:
    sys.path.append(str(TESTS / "ops"))  # after everything else: only for names found nowhere else

from cuda_support import gpu_skip_reason, library_skip_reason  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before pytest's own, which deselects by -m
def pytest_collection_modifyitems(config, items):
    # This hook sees the whole session's items, not only this folder's.
    ours = [item for item in items if HERE in Path(item.path).resolve().parents]
    if not ours:
        return
    reason = gpu_skip_reason()
    for item in ours:
        item.add_marker(pytest.mark.cuda)
        if reason is not None:
            # In front of any other skip mark (such as a test's own "needs two GPUs"), so the
            # reason shown is that there is no GPU at all.
            item.add_marker(pytest.mark.skip(reason=reason), append=False)


@pytest.fixture(scope="session", autouse=True)
def _prebuild_cuda_library():
    """Skips every test of the folder when prebuild's CUDA kernels cannot run here (the
    skip is cached with the fixture: the libraries are loaded once)."""
    reason = library_skip_reason()
    if reason is not None:
        pytest.skip(reason)
