// The projection ops on CUDA: thin __global__ wrappers over the block bodies of
// projection_kernels.h, registered for the CUDA dispatch key through projection.h's host
// functions.
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>
#include "projection.h"
#include "projection_kernels.h"

namespace prebuild {
namespace gsplat {
namespace projection {
namespace {

__global__ void __launch_bounds__(kBlock) projection_forward_kernel(ForwardArgs args) {
  NoShared shared;
  forward_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kBlock) projection_backward_kernel(BackwardArgs args) {
  __shared__ BackwardShared shared;
  backward_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kBlock) proj_forward_kernel(ProjArgs args) {
  NoShared shared;
  proj_forward_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kBlock) proj_backward_kernel(ProjArgs args) {
  NoShared shared;
  proj_backward_block(simt::DeviceContext{}, shared, args);
}

struct CudaBackend : OnCuda {
  static constexpr const char* forward_name = "prebuild::fully_fused_projection_forward";
  static constexpr const char* backward_name = "prebuild::fully_fused_projection_backward";
  static constexpr const char* proj_forward_name = "prebuild::proj_forward";
  static constexpr const char* proj_backward_name = "prebuild::proj_backward";

  static void run_forward(const ForwardArgs& args, const Tensor& on) {
    launch(kForwardOp, projection_forward_kernel, element_geometry(pair_count(args.scene)), 0, on,
           args);
  }

  static void run_backward(const BackwardArgs& args, const Tensor& on) {
    launch(kBackwardOp, projection_backward_kernel, element_geometry(pair_count(args.scene)), 0,
           on, args);
  }

  static void run_proj_forward(const ProjArgs& args, const Tensor& on) {
    launch(kProjForwardOp, proj_forward_kernel, element_geometry(args.I * args.N), 0, on, args);
  }

  static void run_proj_backward(const ProjArgs& args, const Tensor& on) {
    launch(kProjBackwardOp, proj_backward_kernel, element_geometry(args.I * args.N), 0, on, args);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) { register_ops<CudaBackend>(m); }

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
