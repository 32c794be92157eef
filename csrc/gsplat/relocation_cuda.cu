// compute_relocation on CUDA: a thin __global__ wrapper over the block body of
// relocation_kernels.h, registered for the CUDA dispatch key through relocation.h's host
// function.
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>
#include "relocation.h"
#include "relocation_kernels.h"

namespace prebuild {
namespace gsplat {
namespace relocation {
namespace {

__global__ void __launch_bounds__(kBlock) relocation_kernel(Args args) {
  NoShared shared;
  relocation_block(simt::DeviceContext{}, shared, args);
}

struct CudaBackend : OnCuda {
  static constexpr const char* name = "prebuild::compute_relocation";

  static void run(const Args& args, const Tensor& on) {
    launch(kOp, relocation_kernel, element_geometry(args.n), 0, on, args);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) { register_ops<CudaBackend>(m); }

}  // namespace relocation
}  // namespace gsplat
}  // namespace prebuild
