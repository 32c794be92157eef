"""The machine a run measured: CPU, cores, memory, OS, Python, torch, nvcc and the load
average at the start (the report's "Machine:" line)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path


def machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    try:
        nvcc_version = re.findall(
            r"release ([\d.]+)",
            subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout,
        )[0]
    except (OSError, IndexError):
        nvcc_version = "none"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "nvcc": nvcc_version,
        "load_average": os.getloadavg(),
    }
