"""Using prebuild never compiles: ``import prebuild`` and a forward + backward of
``prebuild.fused_ssim`` spawn no process, open no file for writing, start no thread, do not
import ``torch.utils.cpp_extension``, do not initialise CUDA, and leave HOME,
TORCH_EXTENSIONS_DIR and the package directory untouched.

Measured in a fresh interpreter with an audit hook installed after ``import torch`` (so only
prebuild's own behaviour is seen) and with bytecode writing off (``-B``: writing .pyc files
is the interpreter's business, not prebuild's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import prebuild

PACKAGE_DIR = Path(prebuild.__file__).resolve().parent

CHILD = r"""
import json, os, sys, threading

import torch  # before the hook and the snapshots: torch's own import is not measured

HOME, EXT, PKG = sys.argv[1:4]


def snapshot(root, skip=("__pycache__",)):
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            tree[os.path.relpath(path, root)] = [st.st_mode, st.st_size, st.st_mtime_ns]
    return tree


WATCHED = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork",
           "os.forkpty", "os.spawn", "os.startfile"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
events = []


def hook(event, args):
    if event in WATCHED:
        events.append([event, repr(args)[:300]])
    elif event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE_FLAGS
        )
        if writes:
            events.append([event, repr(args)[:300]])


before = {"home": snapshot(HOME), "ext": snapshot(EXT), "pkg": snapshot(PKG)}
cpp_extension_before = "torch.utils.cpp_extension" in sys.modules
sys.addaudithook(hook)

threads = {"start": threading.active_count()}
import prebuild
threads["import prebuild"] = threading.active_count()
import prebuild.ops
threads["import prebuild.ops"] = threading.active_count()

x = torch.rand(2, 3, 24, 20, requires_grad=True)
y = torch.rand(2, 3, 24, 20, requires_grad=True)
loss = prebuild.fused_ssim(x, y)
loss.backward()
loss2 = prebuild.fused_ssim(x.detach().double().requires_grad_(), y.detach().double(),
                            padding="valid", train=False)
loss2.backward()
threads["after ops"] = threading.active_count()

result = {
    "events": events,
    "threads": threads,
    "cpp_extension_before": cpp_extension_before,
    "cpp_extension_after": "torch.utils.cpp_extension" in sys.modules,
    "cuda_initialized": torch.cuda.is_initialized(),
    "loss": loss.item(),
    "grads_finite": bool(torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()),
    "prebuild_file": prebuild.__file__,
    "before": before,
    "after": {"home": snapshot(HOME), "ext": snapshot(EXT), "pkg": snapshot(PKG)},
}
sys.stdout.write(json.dumps(result) + "\n")
"""


def test_using_prebuild_never_compiles(tmp_path):
    home = tmp_path / "home"
    extensions = tmp_path / "torch_extensions"
    home.mkdir()
    extensions.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TORCH_", "PREBUILD_"))}
    env.update(
        HOME=str(home),
        TORCH_EXTENSIONS_DIR=str(extensions),
        PYTHONDONTWRITEBYTECODE="1",
    )
    proc = subprocess.run(
        [sys.executable, "-B", "-c", CHILD, str(home), str(extensions), str(PACKAGE_DIR)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])

    # the package measured is the one under test
    assert Path(result["prebuild_file"]).resolve().parent == PACKAGE_DIR
    # it worked
    assert 0.0 < result["loss"] < 1.0
    assert result["grads_finite"]

    assert result["events"] == [], "processes spawned or files opened for writing"
    assert result["cpp_extension_before"] is False
    assert result["cpp_extension_after"] is False
    assert result["cuda_initialized"] is False
    threads = result["threads"]
    assert threads["import prebuild"] == threads["start"]
    assert threads["import prebuild.ops"] == threads["start"]
    assert threads["after ops"] == threads["start"]

    before, after = result["before"], result["after"]
    assert before["home"] == {} and after["home"] == {}
    assert before["ext"] == {} and after["ext"] == {}
    assert "_C.abi3.so" in before["pkg"] and "_manifest.json" in before["pkg"]
    assert after["pkg"] == before["pkg"]
    # and nothing appeared in the fresh directories after the child exited either
    assert list(home.iterdir()) == [] and list(extensions.iterdir()) == []


def test_import_prebuild_alone_does_not_import_torch(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-B", "-c",
         "import sys, prebuild; print('torch' in sys.modules, 'prebuild.ops' in sys.modules)"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]
