// Schemas of the fused SSIM ops (see ssim.h for what they compute).
#pragma once

namespace prebuild {
namespace ssim {

template <typename Library>
void define_ops(Library& m) {
  m.def(
      "fused_ssim_forward(Tensor img1, Tensor img2, bool train, bool grad_img2=True) -> "
      "(Tensor, Tensor)");
  m.def(
      "fused_ssim_backward(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS, "
      "bool grad_img2=True) -> (Tensor, Tensor)");
  m.def(
      "fused_ssim_forward_backward(Tensor img1, Tensor img2, bool grad_img2=True) -> "
      "(Tensor, Tensor, Tensor)");
}

}  // namespace ssim
}  // namespace prebuild
