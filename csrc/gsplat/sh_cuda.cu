// Spherical harmonics on CUDA: thin __global__ wrappers over the block bodies of
// sh_kernels.h, registered for the CUDA dispatch key through sh.h's host functions.
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>
#include "sh.h"
#include "sh_kernels.h"

namespace prebuild {
namespace gsplat {
namespace sh {
namespace {

__global__ void __launch_bounds__(kBlock) sh_forward_kernel(ForwardArgs args) {
  NoShared shared;
  forward_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kBlock) sh_backward_kernel(BackwardArgs args) {
  NoShared shared;
  backward_block(simt::DeviceContext{}, shared, args);
}

struct CudaBackend : OnCuda {
  static constexpr const char* forward_name = "prebuild::spherical_harmonics_forward";
  static constexpr const char* backward_name = "prebuild::spherical_harmonics_backward";

  static void run_forward(const ForwardArgs& args, const Tensor& on) {
    launch(kForwardOp, sh_forward_kernel, element_geometry(args.in.N), 0, on, args);
  }

  static void run_backward(const BackwardArgs& args, const Tensor& on) {
    launch(kBackwardOp, sh_backward_kernel, element_geometry(args.in.N), 0, on, args);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) { register_ops<CudaBackend>(m); }

}  // namespace sh
}  // namespace gsplat
}  // namespace prebuild
