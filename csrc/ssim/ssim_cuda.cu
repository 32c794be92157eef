// Fused SSIM on CUDA: thin __global__ wrappers over the block bodies of ssim_kernels.h, and
// the host functions registered for the CUDA dispatch key.
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>
#include "ssim.h"
#include "ssim_kernels.h"

namespace prebuild {
namespace ssim {
namespace {

// 4 blocks of 256 threads per SM at least (41 KiB of shared memory each): at most 64
// registers a thread.
__global__ void __launch_bounds__(kThreads, 4) ssim_forward_kernel(ForwardArgs args) {
  __shared__ ForwardShared shared;
  forward_block(simt::DeviceContext{}, shared, args);
}

template <int M>
__global__ void __launch_bounds__(kThreads, 4) ssim_backward_kernel(BackwardArgs args) {
  __shared__ BackwardShared<M> shared;
  backward_block<M>(simt::DeviceContext{}, shared, args);
}

// The launches for ssim.h's tiled host functions, on the inputs' device and stream.
struct Cuda {
  const Tensor& on;
  const char* device = "CUDA";
  bool on_device(const Tensor& t) const { return t.is_cuda(); }
  void forward(const LaunchGeometry& g, const ForwardArgs& args) const {
    launch("fused_ssim_forward", ssim_forward_kernel, g, 0, on, args);
  }
  template <int M>
  void backward(const LaunchGeometry& g, const BackwardArgs& args) const {
    launch("fused_ssim_backward", ssim_backward_kernel<M>, g, 0, on, args);
  }
};

std::tuple<Tensor, Tensor> forward_cuda(Tensor img1, Tensor img2, bool train, bool grad_img2) {
  return forward_tiled(img1, img2, train, grad_img2, "prebuild::fused_ssim_forward", Cuda{img1});
}

std::tuple<Tensor, Tensor> backward_cuda(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS,
                                         bool grad_img2) {
  return backward_tiled(grad_map, img1, img2, dS, grad_img2, "prebuild::fused_ssim_backward",
                        Cuda{img1});
}

std::tuple<Tensor, Tensor, Tensor> forward_backward_cuda(Tensor img1, Tensor img2,
                                                         bool grad_img2) {
  return forward_backward_tiled(img1, img2, grad_img2, "prebuild::fused_ssim_forward_backward",
                                Cuda{img1});
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_cuda));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_cuda));
  m.impl("fused_ssim_forward_backward", TORCH_BOX(&forward_backward_cuda));
}

}  // namespace ssim
}  // namespace prebuild
