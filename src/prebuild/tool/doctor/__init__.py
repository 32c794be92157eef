"""``prebuild doctor``: why prebuild does or does not run here, in one report.

``gather`` finds the facts without nvcc and without a CUDA context in this process (GPUs through
NVML; the libraries are test-loaded in short-lived child processes, ``load_checks``); ``rules``
turns them into checks, purely, through the loader's own rules (``prebuild.runtime.compat``);
``report`` writes them as JSON. Besides prebuild's own kernels it checks every installed
distribution that carries a prebuild manifest (``prebuild.tool.installed``: another project's
wheel built by ``prebuild wheel --arch ... PROJECT``, or a native project's) against torch and the
GPUs. It also finds the JIT lock files that other packages' ``torch.utils.cpp_extension`` builds
leave under ``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``, which make later builds wait
forever, and says when that directory is on a network file system (``jit_locks``); and the
installed packages that will compile at first use (``first_use``).

This module gathers the facts and re-exports what the CLI's doctor command uses.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from prebuild.tool.doctor.first_use import CompilesAtFirstUse, installed_compilers
from prebuild.tool.doctor.jit_locks import (
    JitLock,
    clear_command,
    extension_roots,
    find_jit_locks,
    network_filesystem,
    read_mounts,
)
from prebuild.tool.doctor.load_checks import load_check, load_project
from prebuild.tool.doctor.report import doctor_json
from prebuild.tool.doctor.rules import (
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    Check,
    Facts,
    OpVerdict,
    diagnose,
    op_verdicts,
    project_checks,
)
from prebuild.tool.installed import installed_package, installed_projects, own_variant

__all__ = [
    "FAIL",
    "OK",
    "UNKNOWN",
    "WARN",
    "Check",
    "CompilesAtFirstUse",
    "Facts",
    "JitLock",
    "OpVerdict",
    "clear_command",
    "diagnose",
    "doctor_json",
    "gather",
    "op_verdicts",
    "project_checks",
]


def gather(env: dict[str, str] | None = None, check_load: bool = True) -> Facts:
    """Everything the rules judge, found out here (``env``: the environment, os.environ when
    None); with ``check_load``, prebuild's and every other project's libraries are also loaded,
    each in a child process."""
    from prebuild.ops import OPS
    from prebuild.runtime.c_runtimes import machine_glibc
    from prebuild.runtime.loader import STRICT_ENV
    from prebuild.tool.gpus import query_gpus, torch_info

    if env is not None and not isinstance(env, dict):
        raise TypeError(f"gather takes the environment as a dict, got {type(env).__name__}")
    env = dict(os.environ if env is None else env)
    directory, manifest, install_error = installed_package()
    variant, variant_problem = own_variant(manifest)
    install_error = "; ".join(filter(None, [install_error, variant_problem]))
    home = Path(env.get("HOME") or Path.home())
    projects = installed_projects()
    roots, mounts = extension_roots(env, home), read_mounts()
    return Facts(
        python=f"{platform.python_version()} ({sys.executable})",
        torch=torch_info(),
        package_dir=directory,
        manifest=manifest,
        install_error=install_error,
        gpus=query_gpus(env),
        locks=find_jit_locks(roots, mounts=mounts),
        load_error=load_check()
        if check_load and manifest is not None and not install_error
        else None,
        ops=tuple(sorted(OPS)),
        strict=env.get(STRICT_ENV, "") == "1",
        projects=[load_project(p) for p in projects] if check_load else projects,
        variant=variant,
        extension_dirs=[(root, network_filesystem(root, mounts)) for root in roots],
        first_use=installed_compilers(),
        glibc=machine_glibc(),
    )
