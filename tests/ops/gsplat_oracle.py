"""gsplat 1.5.3's plain-PyTorch implementation (``gsplat/cuda/_torch_impl.py``), loaded as a
test oracle for projection and tile intersection.

The file is loaded by path: importing the ``gsplat`` package itself would start its JIT
loader. The wheel is a test dependency (scripts/bootstrap.sh installs it with --no-deps).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def load_torch_impl():
    spec = importlib.util.find_spec("gsplat")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("gsplat 1.5.3 is a test dependency: pip install --no-deps gsplat==1.5.3")
    path = Path(next(iter(spec.submodule_search_locations))) / "cuda" / "_torch_impl.py"
    module_spec = importlib.util.spec_from_file_location("gsplat_torch_impl", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


torch_impl = load_torch_impl()
