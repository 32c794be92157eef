"""Where prebuild loads from, and what it needs around it.

- A read-only install with HOME pointing at a directory that does not exist and cannot be
  created: import and ops work (nothing of prebuild's needs a writable or shared cache).
- Decoy libraries named like prebuild's own in the working directory, on sys.path and on
  LD_LIBRARY_PATH are never loaded: the loader loads by absolute path from its package
  directory only.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from audit import parse_reports
from child_processes import PACKAGE_DIR

OPS_AND_REPORT = """
import os
import torch
from audit import Audit

audit = Audit(WATCH)
import prebuild

x = torch.rand(1, 3, 19, 23, requires_grad=True)
loss = prebuild.fused_ssim(x, torch.rand(1, 3, 19, 23))
loss.backward()
audit.report(
    prebuild_file=prebuild.__file__,
    loaded=sorted(torch.ops.loaded_libraries),
    loss=loss.item(),
    grads_finite=bool(torch.isfinite(x.grad).all()),
    **EXTRA,
)
"""


def test_read_only_install_without_home(child_env, tmp_path):
    # A copy of the installed package on a read-only bind mount, in a mount namespace of its
    # own (root ignores file permissions, so chmod alone would prove nothing).
    ro = tmp_path / "ro"
    shutil.copytree(
        PACKAGE_DIR, ro / "site" / "prebuild", ignore=shutil.ignore_patterns("__pycache__")
    )
    home = ro / "home"  # does not exist, and cannot be created under the read-only mount
    child = child_env.script(
        "ro_child.py",
        """
        import os
        WATCH = {"pkg": os.environ["RO_PACKAGE"]}
        probe = os.path.join(os.environ["RO_PACKAGE"], "probe")
        try:
            open(probe, "w").close()
            EXTRA = {"package_writable": True}
        except OSError as exc:
            EXTRA = {"package_writable": False, "write_error": exc.strerror}
        EXTRA["home_exists"] = os.path.exists(os.environ["HOME"])
    """,
        OPS_AND_REPORT,
    )
    env = {k: v for k, v in child_env.env.items() if k != "TORCH_EXTENSIONS_DIR"}
    env.update(
        HOME=str(home),
        RO_PACKAGE=str(ro / "site" / "prebuild"),
        PYTHONPATH=f"{ro / 'site'}:{env['PYTHONPATH']}",
    )
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            'mount --bind -o ro "$0" "$0" && exec "$@"',
            str(ro),
            sys.executable,
            "-B",
            str(child),
        ],
        cwd=child_env.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = parse_reports(proc.stdout)[0]
    assert report["package_writable"] is False and report["write_error"] == "Read-only file system"
    assert report["home_exists"] is False
    assert report["prebuild_file"] == str(ro / "site" / "prebuild" / "__init__.py")
    assert 0 < report["loss"] < 1 and report["grads_finite"]
    assert report["events"] == [] and report["changed"] == []
    assert not home.exists()


DECOY_C = r"""
#include <unistd.h>
__attribute__((constructor)) static void decoy(void) {
  static const char msg[] = "DECOY LIBRARY LOADED\n";
  write(2, msg, sizeof msg - 1);
  _exit(42);
}
"""


def test_decoy_libraries_are_never_loaded(child_env, tmp_path):
    source = tmp_path / "decoy.c"
    source.write_text(DECOY_C)
    decoy = tmp_path / "decoy.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(decoy), str(source)], check=True)
    on_path, on_ld = tmp_path / "on_sys_path", tmp_path / "on_ld_library_path"
    names = [p.name for p in PACKAGE_DIR.glob("*.so")] + ["_C.so", "libprebuild.so"]
    for directory in (child_env.workdir, on_path, on_ld):
        directory.mkdir(exist_ok=True)
        for name in names:
            shutil.copyfile(decoy, directory / name)
    child = child_env.script(
        "decoy_child.py",
        """
        import os
        WATCH = {"pkg": os.path.dirname(__import__("importlib.util").util.find_spec("prebuild").origin)}
        EXTRA = {}
    """,
        OPS_AND_REPORT,
    )
    env = dict(child_env.env)
    env["PYTHONPATH"] = f"{on_path}:{env['PYTHONPATH']}"  # decoys ahead of everything
    env["LD_LIBRARY_PATH"] = f"{on_ld}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    proc = subprocess.run(
        [sys.executable, "-B", str(child)],
        cwd=child_env.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "DECOY LIBRARY LOADED" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    report = parse_reports(proc.stdout)[0]
    loaded = report["loaded"]
    assert loaded and all(path.startswith(str(PACKAGE_DIR) + "/") for path in loaded), loaded
    assert all(path.startswith(str(PACKAGE_DIR) + "/") for path in report["dlopens"])
    assert 0 < report["loss"] < 1
