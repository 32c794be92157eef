// scale_add on CUDA: a thin __global__ wrapper over the block body, launched through
// prebuild::launch (the inputs' device made current, PyTorch's current stream, the launch
// checked, "no kernel image" turned into the `prebuild wheel` command that fixes it).
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>

#include "scale_add.h"

namespace ${namespace} {
namespace {

__global__ void __launch_bounds__(kThreads) scale_add_kernel(ScaleAddArgs args) {
  prebuild::simt::NoShared shared;
  scale_add_block(prebuild::simt::DeviceContext{}, shared, args);
}

Tensor scale_add_cuda(Tensor x, Tensor y, double alpha) {
  check_inputs(x, y, "${namespace}::scale_add");
  Tensor out = torch::stable::empty_like(x);
  if (x.numel() == 0) return out;
  prebuild::launch("scale_add", scale_add_kernel, scale_add_geometry(x.numel()), 0, x,
                   make_args(x, y, alpha, out));
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(${namespace}, CUDA, m) { m.impl("scale_add", TORCH_BOX(&scale_add_cuda)); }

}  // namespace ${namespace}
