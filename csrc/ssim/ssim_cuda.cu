// Fused SSIM on CUDA: thin __global__ wrappers over the block bodies of ssim_kernels.h, and
// the host functions registered for the CUDA dispatch key.
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>
#include "ssim.h"
#include "ssim_kernels.h"

namespace prebuild {
namespace ssim {
namespace {

__global__ void __launch_bounds__(kTile * kTile) ssim_forward_kernel(ForwardArgs args) {
  __shared__ SharedTile shared;
  forward_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kTile * kTile) ssim_backward_kernel(BackwardArgs args) {
  __shared__ SharedTile shared;
  backward_block(simt::DeviceContext{}, shared, args);
}

bool on_gpu(const Tensor& t) { return t.is_cuda(); }

std::tuple<Tensor, Tensor> forward_cuda(Tensor img1, Tensor img2, bool train) {
  return forward_tiled(img1, img2, train, "prebuild::fused_ssim_forward", "CUDA", on_gpu,
                       [&](const LaunchGeometry& g, const ForwardArgs& args) {
                         launch("fused_ssim_forward", ssim_forward_kernel, g, 0, img1, args);
                       });
}

std::tuple<Tensor, Tensor> backward_cuda(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS,
                                         bool grad_img2) {
  return backward_tiled(grad_map, img1, img2, dS, grad_img2, "prebuild::fused_ssim_backward", "CUDA",
                        on_gpu, [&](const LaunchGeometry& g, const BackwardArgs& args) {
                          launch("fused_ssim_backward", ssim_backward_kernel, g, 0, img1, args);
                        });
}

std::tuple<Tensor, Tensor, Tensor> forward_backward_cuda(Tensor img1, Tensor img2,
                                                         bool grad_img2) {
  return forward_backward_tiled(
      img1, img2, grad_img2, "prebuild::fused_ssim_forward_backward", "CUDA", on_gpu,
      [&](const LaunchGeometry& g, const ForwardArgs& args) {
        launch("fused_ssim_forward", ssim_forward_kernel, g, 0, img1, args);
      },
      [&](const LaunchGeometry& g, const BackwardArgs& args) {
        launch("fused_ssim_backward", ssim_backward_kernel, g, 0, img1, args);
      });
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_cuda));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_cuda));
  m.impl("fused_ssim_forward_backward", TORCH_BOX(&forward_backward_cuda));
}

}  // namespace ssim
}  // namespace prebuild
