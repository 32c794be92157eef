"""Section 5, GPU resources: registers, shared, local and stack bytes per kernel and arch, from
``cuobjdump --dump-resource-usage`` on the compiled CUDA libraries (no GPU needed)."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from pathlib import Path

from . import ROOT
from .build import copy_source, wheel_cmd
from .processes import run_measured


def find_cuobjdump() -> str:
    from prebuild.tool.builder.toolchain import find_cuda_tool

    tool = find_cuda_tool("cuobjdump")
    if tool is None:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    return str(tool)


def parse_resource_usage(text: str) -> list[dict]:
    """Rows of ``cuobjdump --dump-resource-usage``: arch, kernel (mangled), REG, SHARED, LOCAL,
    STACK (bytes; registers per thread)."""
    rows, arch = [], None
    function = None
    for line in text.splitlines():
        m = re.match(r"\s*arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            function = m.group(1)
            continue
        if function and "REG:" in line:
            fields = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line))
            rows.append(
                {
                    "arch": arch,
                    "kernel": function,
                    "registers": int(fields.get("REG", 0)),
                    "shared": int(fields.get("SHARED", 0)),
                    "local": int(fields.get("LOCAL", 0)),
                    "stack": int(fields.get("STACK", 0)),
                }
            )
            function = None
    return rows


def demangle(names: list[str]) -> dict[str, str]:
    try:
        out = subprocess.run(
            ["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True
        )
        return dict(zip(names, out.stdout.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short_kernel(name: str) -> str:
    """``prebuild::ssim::(anonymous namespace)::fused_ssim_kernel<true>(float const*, ...)``
    -> ``prebuild::ssim::fused_ssim_kernel<true>``: the name and template arguments only."""
    name = name.replace("(anonymous namespace)::", "")
    depth = 0
    for i, ch in enumerate(name):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            return name[:i]
    return name


def quick_cuda_object(work: Path) -> Path:
    """--quick: the device code of one .cu (the SSIM kernels) for sm_80, with the build's own
    flags, as a cubin (no host compilation: seconds)."""
    from prebuild.runtime.arch import parse_arch_list
    from prebuild.tool.builder import flags
    from prebuild.tool.builder.compile import include_dirs
    from prebuild.tool.builder.config import read_config
    from prebuild.tool.builder.toolchain import find_nvcc, find_torch

    work.mkdir(parents=True, exist_ok=True)
    obj = work / "ssim_cuda.cubin"
    project = read_config(ROOT)
    nvcc_flags = flags.nvcc_flags(
        include_dirs(project, find_torch()),
        parse_arch_list("sm_80"),
        (),
        1,
        True,
        project.torch_target,
        project.package,
    )
    cmd = [
        str(find_nvcc()),
        *nvcc_flags,
        "-cubin",
        str(project.sources / "ssim/ssim_cuda.cu"),
        "-o",
        str(obj),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return obj


def section_gpu(cfg: argparse.Namespace, work: Path, built: dict | None) -> dict:
    if cfg.quick:
        binaries = {"sm_80 (ssim_cuda.cu only)": quick_cuda_object(work)}
    else:
        libraries = (built or {}).get("cuda_libraries") or {}
        if not libraries:  # the build section did not run: build the per-arch libraries
            src = copy_source(work / "src")
            run_measured(wheel_cmd(src, work / "objects", work / "dist", "sm_80,sm_90"), cwd=src)
            libraries = {
                p.parent.name: str(p)
                for p in sorted((work / "objects/cuda").glob("*/_C_cuda.abi3.so"))
            }
        binaries = {
            k: Path(v) for k, v in libraries.items() if "nocompress" not in k and "." not in k[6:]
        }
    tool = find_cuobjdump()
    rows = []
    for label, path in binaries.items():
        text = subprocess.run(
            [tool, "--dump-resource-usage", str(path)], capture_output=True, text=True, check=True
        ).stdout
        for r in parse_resource_usage(text):
            rows.append({**r, "binary": label})
    names = demangle(sorted({r["kernel"] for r in rows}))
    for r in rows:
        r["name"] = short_kernel(names.get(r["kernel"], r["kernel"]))
    rows.sort(key=lambda r: (r["name"], r["arch"] or ""))
    return {"rows": rows, "tool": "cuobjdump --dump-resource-usage"}
