"""The nvcc that classic projects' builds call: the real nvcc, with the archs prebuild was asked for.

Projects choose archs themselves (from the build machine's GPU, their own variables, or a
hard-coded ``-gencode`` list used when no GPU is visible, which makes torch ignore
``TORCH_CUDA_ARCH_LIST``). ``prebuild wheel PROJECT`` therefore puts this program first, as
``$CUDA_HOME/bin/nvcc`` of a shim toolkit, for the project's build: every arch option of each
call is dropped and exactly the requested ``-gencode`` options are added, every other flag
(``--use_fast_math``, ``--maxrregcount``, ...) is kept, and the call is logged.

``rewrite_args`` is pure; ``main`` runs as ``python -m prebuild.tool.builder.nvcc_shim ARGS`` and
reads its settings from the environment (``SHIM_ENV_*``). Standard library only: it starts
once per nvcc call.
"""

from __future__ import annotations

import json
import os
import sys

SHIM_ENV_REAL = "PREBUILD_NVCC_REAL"  # the real nvcc
SHIM_ENV_GENCODE = "PREBUILD_NVCC_GENCODE"  # JSON list of the -gencode options to use
SHIM_ENV_LOG = "PREBUILD_NVCC_LOG"  # a file each call's final command is appended to (JSON lines)

# Options that choose archs: "--opt VALUE" or "--opt=VALUE" (nvcc accepts both spellings).
ARCH_OPTIONS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code")
# Calls that compile nothing: passed through untouched.
QUERY_OPTIONS = ("--version", "-V", "--help", "-h", "--list-gpu-code", "--list-gpu-arch")


def rewrite_args(args: list[str], gencode: list[str]) -> list[str]:
    """``args`` without any arch option, plus ``gencode``; a query (``--version``) unchanged."""
    if any(a in QUERY_OPTIONS for a in args):
        return list(args)
    out: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        if arg in ARCH_OPTIONS:
            skip_value = True  # the value is the next argument
            continue
        if arg.startswith(tuple(f"{opt}=" for opt in ARCH_OPTIONS)):
            continue
        out.append(arg)
    return out + list(gencode)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    real = os.environ.get(SHIM_ENV_REAL)
    if not real:
        print(f"prebuild nvcc shim: {SHIM_ENV_REAL} is not set", file=sys.stderr)
        return 2
    gencode = json.loads(os.environ.get(SHIM_ENV_GENCODE, "[]"))
    command = [real, *rewrite_args(args, gencode)]
    log = os.environ.get(SHIM_ENV_LOG)
    if log and command[1:] != args:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"given": args, "run": command[1:]}) + "\n")
    os.execv(real, command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
