"""The CPU kernels' two instruction-set copies (prebuild/cpu_isa.h): the portable baseline
every wheel runs, and the AVX2 copy of the same source picked at run time where the CPU has
it. PREBUILD_CPU_ISA chooses per call, so both run here, and both must give the CUDA
kernels' bits (the simt backend runs the CUDA block bodies on the CPU)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import textured

from prebuild.ops._library import LIBRARY, kernels
from prebuild.testing import simt

pytestmark = pytest.mark.simt

ISAS = ["baseline", "best"]


def cpu_has_avx2() -> bool:
    """From the kernel's view of the CPU, independently of the library's own check."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return "avx2" in flags.split() and "avx" in flags.split()


@pytest.fixture
def isa(request, monkeypatch):
    monkeypatch.setenv("PREBUILD_CPU_ISA", request.param)
    return request.param


def test_the_variable_picks_the_copy(monkeypatch):
    monkeypatch.delenv("PREBUILD_CPU_ISA", raising=False)
    best = "avx2" if cpu_has_avx2() else "baseline"
    assert kernels().cpu_isa() == best
    monkeypatch.setenv("PREBUILD_CPU_ISA", "")
    assert kernels().cpu_isa() == best
    monkeypatch.setenv("PREBUILD_CPU_ISA", "best")
    assert kernels().cpu_isa() == best
    monkeypatch.setenv("PREBUILD_CPU_ISA", "baseline")
    assert kernels().cpu_isa() == "baseline"


@pytest.mark.skipif(not cpu_has_avx2(), reason="asks for AVX2 on a CPU that has it")
def test_avx2_can_be_asked_for_where_the_cpu_has_it(monkeypatch):
    monkeypatch.setenv("PREBUILD_CPU_ISA", "avx2")
    assert kernels().cpu_isa() == "avx2"


@pytest.mark.skipif(cpu_has_avx2(), reason="asks for AVX2 on a CPU without it")
def test_avx2_is_refused_where_the_cpu_lacks_it(monkeypatch):
    monkeypatch.setenv("PREBUILD_CPU_ISA", "avx2")
    with pytest.raises(RuntimeError, match="has no AVX2"):
        kernels().cpu_isa()


def test_an_unknown_value_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("PREBUILD_CPU_ISA", "avx9")
    x = torch.rand(1, 1, 8, 8)
    with pytest.raises(RuntimeError, match="PREBUILD_CPU_ISA must be 'baseline', 'avx2' or 'best', got 'avx9'"):
        kernels().fused_ssim_forward(x, x, True)


def ssim_both_backends(shape, seed):
    x = textured(shape, seed=seed)
    gen = torch.Generator().manual_seed(seed + 7)
    y = (x + 0.1 * torch.randn(shape, generator=gen)).clamp(0, 1)
    grad = torch.rand(shape, generator=gen)
    out = {}
    for name, ops in (("cpu", kernels()), ("simt", simt)):
        ssim_map, dS = ops.fused_ssim_forward(x, y, True)
        out[name] = (ssim_map, dS, *ops.fused_ssim_backward(grad, x, y, dS))
    # The CPU backward that recomputes dS itself (what fused_ssim runs on the CPU).
    out["cpu recomputing"] = kernels().fused_ssim_backward(grad, x, y, torch.empty(0))
    return out


def assert_same_bits(out):
    for name, a, b in zip(("ssim_map", "dS", "grad1", "grad2"), out["cpu"], out["simt"]):
        assert torch.equal(a, b), f"{name} differs from the CUDA kernels' result"
    for name, a, b in zip(("grad1", "grad2"), out["cpu recomputing"], out["simt"][2:]):
        assert torch.equal(a, b), f"{name} of the recomputing backward differs from the CUDA kernels'"


# Rows are split between threads and planes into bands, each computing its own halo of
# horizontal sums; columns run in blocks of 16 with a tail. These shapes cross all of it:
# a band boundary inside a plane (two threads over 3 x 101 rows), full and tail blocks,
# widths below one block, images shorter than the window.
@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", [(1, 3, 101, 37), (2, 2, 64, 48), (1, 1, 7, 5), (1, 2, 3, 70), (3, 1, 12, 16)])
def test_both_copies_give_the_cuda_kernels_bits(isa, shape):
    assert torch.get_num_threads() >= 1
    assert_same_bits(ssim_both_backends(shape, seed=sum(shape)))


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_one_thread_and_many_give_the_same_bits(isa):
    shape = (1, 3, 101, 37)
    many = ssim_both_backends(shape, seed=5)["cpu"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = ssim_both_backends(shape, seed=5)["cpu"]
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, many):
        assert torch.equal(a, b)


def disassembly() -> dict[str, list[str]]:
    """The CPU library's functions (demangled name -> instructions), from objdump."""
    library = next(LIBRARY.directory.glob("_C.*so"))
    text = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(library)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
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
    body left out of line (it would be compiled once, for the baseline, and the AVX2 copy
    would silently run it without AVX2); the AVX2 copies use the 256-bit registers and the
    baseline copies no VEX-encoded instruction at all."""
    functions = disassembly()
    copies = {name: body for name, body in functions.items() if re.search(r"_(avx2|baseline)\(", name)}
    assert {re.search(r"::(\w+)_(?:avx2|baseline)\(", n).group(1) for n in copies} >= {"forward_rows", "backward_rows"}
    for name, body in copies.items():
        for instruction in body:
            target = re.match(r"(?:call|jmp)\s+[0-9a-f]+ <(.*)>$", instruction)
            if target and not target.group(1).endswith("@plt"):
                callee = re.sub(r"\+0x[0-9a-f]+$", "", target.group(1))
                assert callee == name or callee.startswith(name.split(" [clone")[0]), f"{name} calls {callee}"
        mnemonics = [i.split()[0] for i in body if i.split()]
        if "_avx2(" in name and "[clone" not in name:
            assert any("%ymm" in i for i in body), f"{name} uses no AVX register"
        if "_baseline(" in name:
            assert not any(m.startswith("v") for m in mnemonics), f"{name} holds VEX (AVX) instructions"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    isa_name=st.sampled_from(["baseline", "best"]),
    shape=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 60), st.integers(1, 60)),
    seed=st.integers(0, 2**16),
)
def test_property_both_copies_give_the_cuda_kernels_bits(monkeypatch, isa_name, shape, seed):
    monkeypatch.setenv("PREBUILD_CPU_ISA", isa_name)
    assert_same_bits(ssim_both_backends(shape, seed))
