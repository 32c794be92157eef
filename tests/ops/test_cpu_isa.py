"""The CPU kernels' instruction-set copies (prebuild/cpu_isa.h): the portable baseline every
wheel runs, and the AVX2 and AVX-512 copies of the same source picked at run time where the
CPU has them. PREBUILD_CPU_ISA chooses per call, so every copy the CPU runs runs here, and
each must give the CUDA kernels' bits (the simt backend runs the CUDA block bodies on the
CPU)."""

from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from reference import textured

from prebuild.ops._library import LIBRARY, kernels
from prebuild.testing import simt
from prebuild.tool.builder.compile import headers_dir
from prebuild.tool.builder.toolchain import find_torch

pytestmark = pytest.mark.simt

COPIES = ["baseline", "avx2", "avx512"]
AVX512 = {"avx512f", "avx512vl", "avx512bw", "avx512dq"}  # x86-64-v4's subsets


def cpu_flags() -> set[str]:
    """The CPU's features as the kernel reports them, independently of the library's check."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return next(
        (set(line.split()) for line in text.splitlines() if line.startswith("flags")), set()
    )


def runnable_copies() -> list[str]:
    flags = cpu_flags()
    copies = ["baseline"]
    if "avx2" in flags:
        copies.append("avx2")
        if AVX512 <= flags:
            copies.append("avx512")
    return copies


ISAS = runnable_copies()  # every copy this CPU runs: each test below runs on each


@pytest.fixture
def isa(request, monkeypatch):
    monkeypatch.setenv("PREBUILD_CPU_ISA", request.param)
    return request.param


def test_the_widest_copy_is_the_default(monkeypatch):
    monkeypatch.delenv("PREBUILD_CPU_ISA", raising=False)
    assert kernels().cpu_isa() == ISAS[-1]
    for value in ("", "best"):
        monkeypatch.setenv("PREBUILD_CPU_ISA", value)
        assert kernels().cpu_isa() == ISAS[-1]


@pytest.mark.parametrize("name", COPIES)
def test_a_copy_is_run_where_the_cpu_has_it_and_refused_elsewhere(monkeypatch, name):
    monkeypatch.setenv("PREBUILD_CPU_ISA", name)
    if name in ISAS:
        assert kernels().cpu_isa() == name
    else:
        x = torch.rand(1, 1, 8, 8)
        with pytest.raises(
            RuntimeError,
            match=f"PREBUILD_CPU_ISA={name}, but this CPU .* runs at most the {ISAS[-1]} copy",
        ):
            kernels().fused_ssim_forward(x, x, True)


def test_an_unknown_value_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("PREBUILD_CPU_ISA", "avx9")
    x = torch.rand(1, 1, 8, 8)
    with pytest.raises(
        RuntimeError,
        match="PREBUILD_CPU_ISA must be 'baseline', 'avx2', 'avx512' or 'best', got 'avx9'",
    ):
        kernels().fused_ssim_forward(x, x, True)


def ssim_inputs(shape, seed):
    x = textured(shape, seed=seed)
    gen = torch.Generator().manual_seed(seed + 7)
    y = (x + 0.1 * torch.randn(shape, generator=gen)).clamp(0, 1)
    grad = torch.rand(shape, generator=gen)
    mean_grad = torch.tensor(-0.37).expand(shape)  # a broadcast dL/dmap, read as one value
    return x, y, grad, mean_grad


def ssim_outputs(ops, shape, seed):
    """Every output of the three SSIM ops, in OUTPUTS' order."""
    x, y, grad, mean_grad = ssim_inputs(shape, seed)
    ssim_map, dS = ops.fused_ssim_forward(x, y, True)
    return (
        ssim_map,
        dS,
        *ops.fused_ssim_backward(grad, x, y, dS),
        *ops.fused_ssim_backward(mean_grad, x, y, dS),
        ops.fused_ssim_backward(grad, x, y, dS, False)[0],
        *ops.fused_ssim_forward_backward(x, y),
    )


@functools.cache
def simt_outputs(shape, seed):
    """The CUDA kernels' outputs do not depend on the CPU copy chosen: computed once per
    input (the simt harness is the slow side, most of all under the sanitizers)."""
    return ssim_outputs(simt, shape, seed)


def ssim_both_backends(shape, seed):
    out = {"cpu": ssim_outputs(kernels(), shape, seed), "simt": simt_outputs(shape, seed)}
    # The CPU backward that recomputes dS itself (what fused_ssim runs on the CPU).
    x, y, grad, mean_grad = ssim_inputs(shape, seed)
    no_dS = torch.empty(0)
    out["cpu recomputing"] = (
        *kernels().fused_ssim_backward(grad, x, y, no_dS),
        *kernels().fused_ssim_backward(mean_grad, x, y, no_dS),
        kernels().fused_ssim_backward(grad, x, y, no_dS, False)[0],
    )
    return out


OUTPUTS = (
    "ssim_map",
    "dS",
    "grad1",
    "grad2",
    "grad1 (broadcast dL/dmap)",
    "grad2 (broadcast dL/dmap)",
    "grad1 alone",
    "forward_backward's map",
    "forward_backward's grad1",
    "forward_backward's grad2",
)


def assert_same_bits(out):
    assert len(out["cpu"]) == len(OUTPUTS)
    for name, a, b in zip(OUTPUTS, out["cpu"], out["simt"]):
        assert torch.equal(a, b), f"{name} differs from the CUDA kernels' result"
    for name, a, b in zip(OUTPUTS[2:], out["cpu recomputing"], out["simt"][2:]):
        assert torch.equal(a, b), (
            f"{name} of the recomputing backward differs from the CUDA kernels'"
        )


# Rows are split between threads and planes into bands, each computing its own halo of
# horizontal sums; columns run in blocks of 16 with a tail. These shapes cross all of it:
# a band boundary inside a plane (two threads over 3 x 101 rows), full and tail blocks,
# widths below one block, images shorter than the window.
@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize(
    "shape", [(1, 3, 101, 37), (2, 2, 64, 48), (1, 1, 7, 5), (1, 2, 3, 70), (3, 1, 12, 16)]
)
def test_both_copies_give_the_cuda_kernels_bits(isa, shape):
    assert torch.get_num_threads() >= 1
    assert_same_bits(ssim_both_backends(shape, seed=sum(shape)))


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_one_thread_and_many_give_the_same_bits(isa):
    shape = (1, 3, 101, 37)
    many = ssim_outputs(kernels(), shape, seed=5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = ssim_outputs(kernels(), shape, seed=5)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, many):
        assert torch.equal(a, b)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize(
    "name", ["odd_37x23_rgb_bg", "overlap_stop", "tile4_overlap_batches", "d40_chunks"]
)
def test_rasterizer_copies_give_the_same_bits(isa, name, monkeypatch):
    """The compositing loops: each copy's forward equals the CUDA kernels' bit for bit, and
    its backward (absgrad included) equals the baseline copy's bit for bit."""
    from test_rasterize import SCENES, make_scene, op_args

    scene = make_scene(**SCENES[name], seed=5)
    args = op_args(scene) + [None]
    forward = kernels().rasterize_to_pixels_forward(*args, False)
    for got, want in zip(forward, simt.rasterize_to_pixels_forward(*args, False)):
        assert torch.equal(got, want)
    g = torch.Generator().manual_seed(2)
    v_colors, v_alphas = (
        torch.randn(forward[0].shape, generator=g),
        torch.randn(forward[1].shape, generator=g),
    )
    grads = kernels().rasterize_to_pixels_backward(
        *args, forward[1], forward[2], v_colors, v_alphas, True
    )
    monkeypatch.setenv("PREBUILD_CPU_ISA", "baseline")
    want = kernels().rasterize_to_pixels_backward(
        *args, forward[1], forward[2], v_colors, v_alphas, True
    )
    for a, b in zip(grads, want):
        assert torch.equal(a, b)


def disassembly() -> dict[str, list[str]]:
    """The CPU library's functions (demangled name -> instructions), from objdump."""
    library = next(LIBRARY.directory.glob("_C.*so"))
    text = subprocess.run(
        ["objdump", "-d", "-C", "--no-show-raw-insn", str(library)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    functions: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            current = functions.setdefault(head.group(1), [])
        elif current is not None and "\t" in line:
            current.append(line.split("\t", 1)[1].strip())
    return functions


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump")
def test_each_copy_is_compiled_whole_for_its_instruction_set():
    """Every call out of a copy goes to the C library (memset, operator new, ...): no shared
    body left out of line (it would be compiled once, for the baseline, and a wide copy would
    silently run it narrow); each copy uses its own registers: the AVX-512 ones zmm, the AVX2
    ones ymm and no zmm, the baseline ones no VEX-encoded instruction at all."""
    functions = disassembly()
    copies = {
        name: body
        for name, body in functions.items()
        if re.search(r"_(baseline|avx2|avx512)\(", name)
    }
    kernels_copied = {re.search(r"::(\w+)_(?:baseline|avx2|avx512)\(", n).group(1) for n in copies}
    assert kernels_copied >= {"forward_rows", "backward_rows", "forward_tile", "backward_tile"}
    for name, body in copies.items():
        for instruction in body:
            target = re.match(r"(?:call|jmp)\s+[0-9a-f]+ <(.*)>$", instruction)
            if target and not target.group(1).endswith("@plt"):
                callee = re.sub(r"\+0x[0-9a-f]+$", "", target.group(1))
                assert callee.startswith(name.split(" [clone")[0]), f"{name} calls {callee}"
        if "[clone" in name:  # cold paths (throws)
            continue
        mnemonics = [i.split()[0] for i in body if i.split()]
        uses = lambda register, body=body: any(f"%{register}" in i for i in body)  # noqa: E731
        if "_avx512(" in name:
            assert uses("zmm"), f"{name} uses no 512-bit register"
        elif "_avx2(" in name:
            assert uses("ymm") and not uses("zmm"), f"{name} should use ymm and no zmm registers"
        else:
            assert not any(m.startswith("v") for m in mnemonics), (
                f"{name} holds VEX (AVX) instructions"
            )


COPIED = """
#include <prebuild/cpu_isa.h>
namespace {
PREBUILD_ALWAYS_INLINE int body(int x) { return x * 3; }
}  // namespace
#define DEFINE(COPY, isa) \\
  COPY int twice_##isa(int x) { return body(x) + body(x); }
PREBUILD_CPU_COPIES(DEFINE)
int twice(int x) { return PREBUILD_PICK_ISA(twice)(x); }
"""


@pytest.mark.skipif(
    shutil.which("c++") is None or shutil.which("nm") is None, reason="needs c++, nm"
)
@pytest.mark.parametrize("one_copy", [False, True])
def test_a_sanitizer_build_compiles_the_baseline_copy_alone(tmp_path, one_copy):
    """PREBUILD_ONE_CPU_COPY (prebuild's build defines it with PREBUILD_SANITIZE): the copies
    PREBUILD_CPU_COPIES defines and PREBUILD_PICK_ISA picks from are the baseline alone."""
    source = tmp_path / "copies.cpp"
    source.write_text(COPIED)
    include = [f"-I{d}" for d in (headers_dir(), *find_torch().include_dirs)]
    define = ["-DPREBUILD_ONE_CPU_COPY"] if one_copy else []
    obj = tmp_path / "copies.o"
    subprocess.run(
        ["c++", "-std=c++17", "-O1", "-c", *define, *include, str(source), "-o", str(obj)],
        check=True,
    )
    symbols = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True).stdout
    copies = sorted(set(re.findall(r"twice_(\w+)\(int\)", symbols)))
    machine = platform.machine() in ("x86_64", "AMD64")
    assert copies == (["baseline"] if one_copy or not machine else sorted(COPIES))
