"""Section 6, CUDA kernels on a GPU: fused_ssim and rasterization against the peers installed
beside them (upstream fused-ssim, gsplat, pytorch-msssim) and plain PyTorch, as shares of the
GPU's own measured peaks; skipped, saying so, where no GPU is visible."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import ROOT
from .cpu import (
    OURS_RASTER,
    OURS_SSIM,
    machine_peaks,
    ours_rasterization,
    plain_conv2d_ssim,
    raster_rows,
    ssim_rows,
)
from .stats import time_fn


def sfu_exps_per_flop(capability: tuple[int, int]) -> float:
    """Exps a GPU's special-function units give per FLOP of its float32 peak: 16 per SM and clock
    against 64 FP32 lanes (sm_80 and older) or 128 (sm_86 on), each lane an FMA (2 FLOP) per
    clock. torch.exp cannot show that rate (it is bound by memory), so the exp peak is taken from
    the measured FLOP peak: an upper bound, as a peak must be (expf takes more than one SFU op)."""
    lanes = 64 if tuple(capability) <= (8, 0) else 128
    return 16 / (2 * lanes)


def device_peaks(device, quick: bool, repeats: int) -> dict:
    """The device's float32 FLOP/s (a large matmul, TF32 off: the kernels compute in float32),
    copy bandwidth (read + write) and exp rate, each the best of ``repeats`` runs; on the CPU,
    machine_peaks."""
    import torch

    if device.type != "cuda":
        return machine_peaks(quick, repeats)

    def sync():
        torch.cuda.synchronize(device)

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        n = 512 if quick else 8192
        a, b = torch.rand(n, n, device=device), torch.rand(n, n, device=device)
        mm = time_fn(lambda: torch.mm(a, b), repeats, sync=sync)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    size = (8 if quick else 1024) << 20
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    cp = time_fn(lambda: dst.copy_(src), repeats, sync=sync)
    flops = 2 * n**3 / mm["min"]
    per_flop = sfu_exps_per_flop(torch.cuda.get_device_capability(device))
    return {
        "flops": flops,
        "bandwidth": 2 * size / cp["min"],
        "shared": shared_bandwidth(device),
        "matmul_n": n,
        "copy_bytes": size,
        "matmul": mm,
        "copy": cp,
        "exps": flops * per_flop,
        "exps_per_flop": per_flop,
    }


# What prebuild's CUDA training step (fused_ssim, img1's gradient) must move per pixel and
# channel, from the kernels' shapes (csrc/ssim/ssim_kernels.h); the bound of section 6 is the
# larger of its two times. Device memory: the forward reads x, y (8) and writes the map (4) and
# img1's 3 derivative maps (12), the mean reads the map (4), the backward reads the 3 maps and
# x, y (20) and writes the gradient (4): 52 bytes (the halo's re-reads hit L2: not counted).
SSIM_CUDA_DRAM_BYTES = 52
# Shared memory, in 4-byte words: a tile 32 wide and T rows tall stages (32 + 10) x (T + 10)
# pixels; each of its T + 10 staged rows gets a horizontal sum per column (11 taps of each
# staged plane read, one sum per output plane written), and each thread reads R + 10 sums per
# output plane for its R rows. Forward: 2 staged planes, 5 sums, T = 32, R = 4; img1's
# backward: 3 and 3, T = 32, R = 4.


def ssim_shared_words(staged: int, sums: int, rows: int, per_thread: int) -> float:
    halo = (32 + 10) * (rows + 10) / (32 * rows)  # staged pixels per output pixel
    row_share = (rows + 10) / rows  # horizontal sums per output pixel
    return staged * halo + row_share * (staged * 11 + sums) + sums * (per_thread + 10) / per_thread


SSIM_CUDA_SHARED_WORDS = ssim_shared_words(2, 5, 32, 4) + ssim_shared_words(3, 3, 32, 4)


def shared_bandwidth(device) -> float | None:
    """Bytes a second the GPU's shared memory can serve: 32 banks of 4 bytes per SM and clock,
    at the SM's highest clock (NVML's; CUDA 13 dropped the clock from the device properties).
    None without NVML."""
    import torch

    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:  # no NVML here: the bound is then the memory's alone
        return None
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return sms * 128 * mhz * 1e6


def ssim_cuda_bound(pixels: int, peaks: dict) -> dict:
    """The time prebuild's CUDA training step cannot beat: its device-memory bytes at the
    measured copy bandwidth, and its shared-memory words at the shared-memory pipe's rate."""
    memory = pixels * SSIM_CUDA_DRAM_BYTES / peaks["bandwidth"]
    shared = pixels * SSIM_CUDA_SHARED_WORDS * 4 / peaks["shared"] if peaks.get("shared") else None
    return {
        "memory_seconds": memory,
        "shared_seconds": shared,
        "seconds": max(memory, shared or 0.0),
        "bound": "shared memory" if shared and shared > memory else "device memory",
    }


def profile_step(step, device, steps: int = 5, top: int = 4) -> dict:
    """Where one step's time goes on a GPU, apart from the wall time the tables give: the time
    its kernels ran (the profiler's device time, summed), how many it launched, the host time
    until the step returned (the time to enqueue it, and any wait for the GPU inside), how
    many times it made the host wait for the GPU (torch's sync debug mode counts the syncs it
    knows: .item(), nonzero, copies to the host), and its costliest kernels; per step, the
    mean of ``steps``. None on the CPU (no device time to tell apart)."""
    import time
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    host = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize(device)
    syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device)
    from torch.autograd import DeviceType

    kernels = []  # the GPU's own rows (kernels, copies, fills); an op's row adds its kernels'
    for e in prof.key_averages():
        if e.device_type != DeviceType.CUDA:
            continue
        t = getattr(e, "self_device_time_total", None)
        if t is None:  # torch < 2.4 named it after CUDA
            t = e.self_cuda_time_total
        kernels.append((e.key, t * 1e-6 / steps, e.count / steps))
    kernels.sort(key=lambda k: -k[1])
    return {
        "kernel_seconds": sum(k[1] for k in kernels),
        "launches": sum(k[2] for k in kernels),
        "host_seconds": sorted(host)[len(host) // 2],
        "syncs": syncs,
        "top": [{"name": n, "seconds": t, "count": c} for n, t, c in kernels[:top]],
    }


def ssim_peers(device) -> tuple[dict, dict]:
    """The SSIM implementations a user would pick instead, that this Python has: name -> fn, and
    name -> why it is not timed."""
    have, absent = {"plain conv2d": plain_conv2d_ssim}, {}
    try:
        from fused_ssim import fused_ssim as upstream

        if device.type == "cuda":
            have["fused-ssim (upstream)"] = lambda x, y: upstream(x, y)
        else:
            absent["fused-ssim (upstream)"] = "CUDA only"
    except ImportError as exc:
        absent["fused-ssim (upstream)"] = f"not installed ({exc})"
    try:
        from pytorch_msssim import ssim as msssim

        have["pytorch_msssim.ssim"] = lambda x, y: msssim(x, y, data_range=1.0, size_average=True)
    except ImportError as exc:
        absent["pytorch_msssim.ssim"] = f"not installed ({exc})"
    return have, absent


def raster_peers(device) -> tuple[dict, dict]:
    try:
        import gsplat
    except ImportError as exc:
        return {}, {"gsplat.rasterization": f"not installed ({exc})"}
    if device.type != "cuda":
        return {}, {"gsplat.rasterization": "CUDA only"}

    def rasterize(s, size):
        return gsplat.rasterization(**s, width=size, height=size)[0]

    return {f"gsplat {gsplat.__version__} rasterization": rasterize}, {}


def section_cuda(cfg: argparse.Namespace, work: Path) -> dict:
    """Our CUDA kernels on one GPU against the peers installed beside them (upstream fused-ssim,
    gsplat, pytorch-msssim) and plain PyTorch; shares of the GPU's own measured peaks."""
    import torch

    import prebuild

    device = torch.device(cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return {
            "skipped": f"no CUDA GPU visible (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'})"
        }
    sys.path.insert(0, str(ROOT / "tests" / "ops"))  # plain conv2d SSIM
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else "CPU (a smoke run of the section)"
    )
    # A GPU step takes milliseconds, so many runs are cheap, and the small rows are bound by
    # the host, whose time varies from run to run (a third and more between the fastest and
    # the median in the 2026-11-27 checks): 50 runs keep their medians steady.
    repeats = max(cfg.repeats, 2 if cfg.quick else 50)
    peaks = device_peaks(device, cfg.quick, max(repeats, 3) if cfg.quick else 10)
    ssim_have, absent = ssim_peers(device)

    def profile(step):
        return profile_step(step, device, 2 if cfg.quick else 5)

    # warm-up: the first calls load modules, fill the caching allocator, tune cuDNN (conv2d)
    ssim = ssim_rows(
        cfg,
        peaks,
        {OURS_SSIM: prebuild.fused_ssim, **ssim_have},
        repeats,
        device,
        sync,
        profile,
        warmup=1 if cfg.quick else 5,
    )
    for r in ssim:  # the bound of our CUDA kernels' own traffic (not a work model's)
        h, w = map(int, r["size"].split("x"))
        r["cuda_bound"] = ssim_cuda_bound(r["batch"] * 3 * h * w, peaks)
        kernels = (r["profiles"].get(OURS_SSIM) or {}).get("kernel_seconds")
        r["cuda_bound"]["share_of_kernels"] = (
            r["cuda_bound"]["seconds"] / kernels if kernels else None
        )
    raster_have, raster_absent = raster_peers(device)
    absent.update(raster_absent)
    impls = {OURS_RASTER: ours_rasterization, **raster_have}
    raster = raster_rows(
        cfg,
        peaks,
        impls,
        [100] if cfg.quick else [10_000, 100_000],
        32 if cfg.quick else 1024,
        {k: (repeats, 1 if cfg.quick else 5) for k in impls},
        device,
        sync,
        profile,
    )
    return {
        "device": str(device),
        "name": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "peaks": peaks,
        "ssim": ssim,
        "raster": raster,
        "absent": absent,
    }
