"""Using prebuild never compiles: ``import prebuild`` and a forward + backward of
``prebuild.fused_ssim`` spawn no process, open no file for writing, start no thread, do not
import ``torch.utils.cpp_extension``, do not initialise CUDA, and leave HOME,
TORCH_EXTENSIONS_DIR and the package directory untouched.

Measured in a fresh interpreter with an audit hook installed after ``import torch`` (so only
prebuild's own behaviour is seen) and with bytecode writing off (``-B``: writing .pyc files
is the interpreter's business, not prebuild's).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from audit import parse_reports
from child_processes import PACKAGE_DIR

CHILD = r"""
import threading

import torch  # before the audit: torch's own import is not measured
from audit import Audit

audit = Audit.from_env()
threads = {"start": threading.active_count()}
import prebuild
threads["import prebuild"] = threading.active_count()
from prebuild.ops import *
threads["import prebuild.ops"] = threading.active_count()

x = torch.rand(2, 3, 24, 20, requires_grad=True)
y = torch.rand(2, 3, 24, 20, requires_grad=True)
loss = prebuild.fused_ssim(x, y)
loss.backward()
loss2 = prebuild.fused_ssim(x.detach().double().requires_grad_(), y.detach().double(),
                            padding="valid", train=False)
loss2.backward()
threads["after ops"] = threading.active_count()
audit.report(
    threads_by_step=threads,
    loss=loss.item(),
    grads_finite=bool(torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()),
    prebuild_file=prebuild.__file__,
    package_files=sorted(__import__("os").listdir(audit.watch["pkg"])),
)
"""


def test_using_prebuild_never_compiles(child_env):
    proc = child_env.run(child_env.script("child.py", CHILD), timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = parse_reports(proc.stdout)[0]

    # the package measured is the one under test
    assert Path(result["prebuild_file"]).resolve().parent == PACKAGE_DIR
    assert "_C.abi3.so" in result["package_files"] and "_manifest.json" in result["package_files"]
    # it worked
    assert 0.0 < result["loss"] < 1.0
    assert result["grads_finite"]

    assert result["events"] == [], "processes spawned or files opened for writing"
    assert result["cpp_extension"] == [False, False]
    assert result["cuda_initialized"] is False
    threads = result["threads_by_step"]
    assert threads["import prebuild"] == threads["start"]
    assert threads["import prebuild.ops"] == threads["start"]
    assert threads["after ops"] == threads["start"]
    # HOME, TORCH_EXTENSIONS_DIR and the package directory are unchanged
    assert result["changed"] == []
    # and nothing appeared in the fresh directories after the child exited either
    assert child_env.untouched()


def test_import_prebuild_alone_does_not_import_torch(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-B",
            "-c",
            "import sys, prebuild; print('torch' in sys.modules, 'prebuild.ops' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


def test_the_kernel_api_imports_none_of_the_tool():
    """`import prebuild` and an op: the kernel API (ops, runtime) only, none of prebuild.tool."""
    import subprocess
    import sys

    code = (
        "import sys, prebuild; prebuild.fused_ssim; import prebuild.ops; "
        "print(sorted(m for m in sys.modules if m.startswith('prebuild.tool')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
