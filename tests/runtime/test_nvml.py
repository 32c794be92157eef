"""prebuild.runtime.nvml: the GPUs read through the driver's NVML by ctypes, against a stand-in
libnvidia-ml compiled here (two GPUs; or one whose nvmlInit fails, as without a driver)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from prebuild.runtime.nvml import Gpu, NvmlUnavailable, all_gpus, any_gpu_visible, visible_gpus

FAKE_NVML = r"""
#include <stdio.h>
#include <string.h>
static int inited = 0;
int nvmlInit_v2(void) { if (FAIL_INIT) return 9; inited = 1; return 0; }
int nvmlShutdown(void) { inited = 0; return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { if (!inited) return 1; *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { *h = (void *)(long)(i + 1); return 0; }
int nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {
  if ((long)h == 1) { *major = 9; *minor = 0; } else { *major = 12; *minor = 0; }
  return 0;
}
int nvmlDeviceGetName(void *h, char *name, unsigned len) {
  snprintf(name, len, "%s", (long)h == 1 ? "NVIDIA H100" : "NVIDIA GeForce RTX 5090");
  return 0;
}
int nvmlDeviceGetUUID(void *h, char *uuid, unsigned len) {
  snprintf(uuid, len, "GPU-%ld0000000-aaaa", (long)h);
  return 0;
}
"""


def fake_nvml(directory: Path, fail_init: bool = False) -> str:
    source = directory / "nvml.c"
    source.write_text(FAKE_NVML.replace("FAIL_INIT", "1" if fail_init else "0"))
    library = directory / "libnvidia-ml-fake.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return str(library)


pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def test_every_gpu_with_its_capability_name_and_uuid(tmp_path):
    library = fake_nvml(tmp_path)
    assert all_gpus(library) == [
        Gpu(0, "NVIDIA H100", (9, 0), "GPU-10000000-aaaa"),
        Gpu(1, "NVIDIA GeForce RTX 5090", (12, 0), "GPU-20000000-aaaa"),
    ]
    # as CUDA will number them: CUDA_VISIBLE_DEVICES=1 makes the RTX 5090 cuda:0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}, library) == (
        Gpu(0, "NVIDIA GeForce RTX 5090", (12, 0), "GPU-20000000-aaaa"),
    )
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, library) == ()
    assert len(visible_gpus({}, library)) == 2
    assert any_gpu_visible({}, library) and not any_gpu_visible(
        {"CUDA_VISIBLE_DEVICES": ""}, library
    )


def test_no_driver_and_a_failing_nvml_are_said_not_raised_as_crashes(tmp_path):
    with pytest.raises(NvmlUnavailable, match="no NVIDIA driver"):
        all_gpus(str(tmp_path / "libnvidia-ml.so.1"))
    with pytest.raises(NvmlUnavailable, match="nvmlInit_v2 returned NVML error 9"):
        all_gpus(fake_nvml(tmp_path, fail_init=True))
    assert not any_gpu_visible({}, str(tmp_path / "libnvidia-ml.so.1"))  # no driver: no GPU
