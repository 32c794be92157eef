"""16 fresh processes started at once each import prebuild and make its first CUDA call (a
fused_ssim forward and backward on cuda:0): all succeed, all compute the same value, the CPU
kernel's, and none writes a file. Each process gets its own fresh, empty HOME,
TORCH_EXTENSIONS_DIR and TMPDIR, which must still be empty once all have exited (but for the
empty directories the driver makes for its JIT cache at any context's creation); from
``import prebuild`` on, the audit hook of tests/audit.py sees no process spawned and
no file opened for writing, and the package directory does not change. prebuild's CUDA
library must be among the libraries the processes loaded.

The CUDA counterpart of tests/e2e/test_processes.py::test_32_processes_start_at_once
(CPU only, where no CUDA may be initialised at all), with its child environment
(tests/child_processes.py's child_env_for) and audit hook. Here torch creates its CUDA
context before the audit starts: what is measured is prebuild's share, while the empty
directories cover the whole process, the driver included (a JIT compile of PTX would write
its cache under HOME).
"""

from __future__ import annotations

import os
import site
from pathlib import Path

import torch
from audit import parse_reports
from child_processes import PACKAGE_DIR, child_env_for
from cuda_support import TOLERANCES, assert_matches

PROCESSES = 16
# Libraries torch itself loads through ctypes during prebuild's first call: the loader reads the
# GPU's name and capability (torch.cuda.get_device_properties), whose device_count() asks NVML
# (torch/cuda/__init__.py, _raw_device_count_nvml). Seen on an H200 with torch 2.11.0+cu130.
TORCH_QUERIES = {"libnvidia-ml.so.1"}
# The driver makes its JIT cache's directories under HOME when a CUDA context is created (torch's,
# before prebuild is imported: seen with torch alone on the H200); a JIT compile would put files
# in them, and none may be there.
DRIVER_DIRS = {Path(".nv"), Path(".nv") / "ComputeCache"}


CHILD = """
import importlib.util
import os

import torch
from audit import Audit

gen = torch.Generator().manual_seed(0)
x = torch.rand(2, 3, 24, 20, generator=gen)
y = torch.rand(2, 3, 24, 20, generator=gen)
x = x.to("cuda:0").requires_grad_(True)  # torch's CUDA start-up: before the audit
y = y.to("cuda:0")
torch.cuda.synchronize()

spec = importlib.util.find_spec("prebuild")  # the package directory, without importing it
audit = Audit({"home": os.environ["HOME"], "ext": os.environ["TORCH_EXTENSIONS_DIR"],
               "tmp": os.environ["TMPDIR"], "pkg": os.path.dirname(spec.origin)})
import prebuild

loss = prebuild.fused_ssim(x, y)
loss.backward()
audit.report(value=loss.item(), grad_l1=x.grad.abs().sum().item(), device=str(x.grad.device))
"""


def expected() -> tuple[torch.Tensor, torch.Tensor]:
    """CHILD's value and gradient L1 norm, by the CPU kernel."""
    import prebuild

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 24, 20, generator=gen).requires_grad_(True)
    y = torch.rand(2, 3, 24, 20, generator=gen)
    loss = prebuild.fused_ssim(x, y)
    loss.backward()
    return loss.detach(), x.grad.abs().sum()


def test_16_processes_make_their_first_cuda_call_at_once_and_write_nothing(tmp_path):
    from prebuild.ops._library import LIBRARY

    cuda_library = LIBRARY.manifest.library("cuda").file
    children = []
    for i in range(PROCESSES):
        root = tmp_path / f"process{i}"
        root.mkdir()
        child = child_env_for(root)  # fresh empty HOME, TORCH_EXTENSIONS_DIR and TMPDIR
        if str(PACKAGE_DIR.parent) not in site.getsitepackages():
            # prebuild comes from a checkout's src/ here (PYTHONPATH, or an editable install),
            # and child_env_for replaced PYTHONPATH: name it (src/ holds prebuild alone).
            child.env["PYTHONPATH"] += os.pathsep + str(PACKAGE_DIR.parent)
        children.append((child, child.script("first_call.py", CHILD)))

    # all started before any is waited for
    procs = [child.popen(script) for child, script in children]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (stdout, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr

    want_value, want_grad_l1 = expected()
    reports = [parse_reports(stdout)[0] for stdout, _ in outputs]
    assert len({r["value"] for r in reports}) == 1, "the processes computed different values"
    for report in reports:
        assert report["device"] == "cuda:0"
        assert report["events"] == [], "a process was spawned or a file opened for writing"
        assert report["changed"] == [], "HOME, TORCH_EXTENSIONS_DIR, TMPDIR or the package changed"
        start, end = report["cpp_extension"]
        assert end == start, "prebuild imported torch.utils.cpp_extension"
        assert any(Path(p).name == cuda_library for p in report["dlopens"]), report["dlopens"]
        others = [p for p in report["dlopens"] if not Path(p).resolve().is_relative_to(PACKAGE_DIR)]
        assert set(others) <= TORCH_QUERIES, f"loaded from outside the package: {others}"
    assert_matches(torch.tensor(reports[0]["value"]), want_value, TOLERANCES["ssim"], "mean SSIM")
    assert_matches(
        torch.tensor(reports[0]["grad_l1"]),
        want_grad_l1,
        TOLERANCES["ssim_grad"],
        "gradient L1 norm",
    )
    for child, _ in children:
        left = [
            p
            for d in (child.home, child.extensions, child.tmp)
            for p in d.rglob("*")
            if p.relative_to(d) not in DRIVER_DIRS or d != child.home or not p.is_dir()
        ]
        assert left == [], f"files written: {left}"
