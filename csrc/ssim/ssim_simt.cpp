// Fused SSIM's CUDA block bodies (ssim_kernels.h) run on the CPU by the SIMT launcher, for
// tests: registered as the CPU kernels of torch.ops.prebuild_simt.fused_ssim_*.
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "ssim.h"
#include "ssim_kernels.h"

namespace prebuild {
namespace ssim {
namespace {

// The launches for ssim.h's tiled host functions, on the CPU.
struct Simt {
  const char* op;
  const char* device = "CPU";
  bool on_device(const Tensor& t) const { return t.is_cpu(); }
  void forward(const LaunchGeometry& g, const ForwardArgs& args) const {
    simt::launch_op<ForwardShared>(op, g, args, forward_block<simt::HostContext>);
  }
  template <int M>
  void backward(const LaunchGeometry& g, const BackwardArgs& args) const {
    simt::launch_op<BackwardShared<M>>(op, g, args, backward_block<M, simt::HostContext>);
  }
};

std::tuple<Tensor, Tensor> forward_simt(Tensor img1, Tensor img2, bool train, bool grad_img2) {
  constexpr const char* op = "prebuild_simt::fused_ssim_forward";
  return forward_tiled(img1, img2, train, grad_img2, op, Simt{op});
}

std::tuple<Tensor, Tensor> backward_simt(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS,
                                         bool grad_img2) {
  constexpr const char* op = "prebuild_simt::fused_ssim_backward";
  return backward_tiled(grad_map, img1, img2, dS, grad_img2, op, Simt{op});
}

std::tuple<Tensor, Tensor, Tensor> forward_backward_simt(Tensor img1, Tensor img2,
                                                         bool grad_img2) {
  constexpr const char* op = "prebuild_simt::fused_ssim_forward_backward";
  return forward_backward_tiled(img1, img2, grad_img2, op, Simt{op});
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_simt));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_simt));
  m.impl("fused_ssim_forward_backward", TORCH_BOX(&forward_backward_simt));
}

}  // namespace ssim
}  // namespace prebuild
