"""ptxas's resource report (nvcc --resource-usage) read into rows per kernel and arch, and the
note that names kernels which spill (prebuild.tool.builder.resources)."""

from __future__ import annotations

from prebuild.tool.builder.resources import (
    KernelResources,
    parse_ptxas,
    read_objects,
    read_report,
    short_name,
    spill_warning,
    write_report,
)

BWD = (
    "_ZN8prebuild6gsplat54_GLOBAL__N__10edb2ce_17_rasterize_cuda_cu_6c8c69ec_77325"
    "rasterize_backward_kernelILi16EEEvNS0_12BackwardArgsE"
)
FWD = (
    "_ZN8prebuild4ssim50_GLOBAL__N__6b0e5101_12_ssim_cuda_cu_48a190c7_614719"
    "ssim_forward_kernelENS0_11ForwardArgsE"
)

# nvcc 13.0's own wording (two archs of two kernels, a device function, a warning).
REPORT = f"""\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '{BWD}' for 'sm_80'
ptxas info    : Function properties for {BWD}
    40 bytes stack frame, 36 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 24576 bytes smem, 728 bytes cmem[0]
ptxas info    : Function properties for _ZN8prebuild6helperEv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '{FWD}' for 'sm_90'
ptxas info    : Function properties for {FWD}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 56 registers, used 1 barriers, 40992 bytes smem, 576 bytes cmem[0]
csrc/ssim/ssim_kernels.h(12): warning #177-D: variable "x" was declared but never referenced
"""


def test_each_kernel_and_arch_is_one_row():
    rows = parse_ptxas(REPORT)
    assert rows == [
        KernelResources(BWD, "sm_80", 64, 24576, 40, 36, 36),
        KernelResources(FWD, "sm_90", 56, 40992, 0, 0, 0),
    ]
    assert rows[0].spills and not rows[1].spills


def test_short_names_tell_our_kernels_apart():
    assert short_name(BWD) == "rasterize_backward_kernel<16>"
    assert short_name(FWD) == "ssim_forward_kernel"


def test_the_note_names_only_the_kernels_that_spill():
    rows = parse_ptxas(REPORT)
    note = spill_warning(rows)
    assert note is not None and "rasterize_backward_kernel<16> [sm_80, 36 B]" in note
    assert "ssim_forward_kernel" not in note
    assert spill_warning(rows[1:]) is None


def test_reports_beside_objects_become_one_file(tmp_path):
    obj = tmp_path / "ssim_cuda.o"
    (tmp_path / "ssim_cuda.o.ptxas").write_text(REPORT)
    rows = read_objects([obj, tmp_path / "missing.o"])  # an object without a report: nothing
    assert len(rows) == 2
    assert read_report(write_report(rows, tmp_path / "resources.json")) == rows
