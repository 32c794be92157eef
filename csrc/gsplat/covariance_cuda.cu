// quat_scale_to_covar_preci on CUDA: thin __global__ wrappers over the block bodies of
// covariance_kernels.h, registered for the CUDA dispatch key through covariance.h's host
// functions.
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>
#include "covariance.h"
#include "covariance_kernels.h"

namespace prebuild {
namespace gsplat {
namespace covariance {
namespace {

__global__ void __launch_bounds__(kBlock) covariance_forward_kernel(ForwardArgs args) {
  NoShared shared;
  forward_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kBlock) covariance_backward_kernel(BackwardArgs args) {
  NoShared shared;
  backward_block(simt::DeviceContext{}, shared, args);
}

struct CudaBackend : OnCuda {
  static constexpr const char* forward_name = "prebuild::quat_scale_to_covar_preci_forward";
  static constexpr const char* backward_name = "prebuild::quat_scale_to_covar_preci_backward";

  static void run_forward(const ForwardArgs& args, const Tensor& on) {
    launch(kForwardOp, covariance_forward_kernel, element_geometry(args.n), 0, on, args);
  }

  static void run_backward(const BackwardArgs& args, const Tensor& on) {
    launch(kBackwardOp, covariance_backward_kernel, element_geometry(args.n), 0, on, args);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) { register_ops<CudaBackend>(m); }

}  // namespace covariance
}  // namespace gsplat
}  // namespace prebuild
