// Host-side declarations of the fused SSIM op family (CPU and CUDA implementations).
//
//   fused_ssim_forward(img1, img2, train) -> (ssim_map, dS)
//     img1, img2: (B, C, H, W) float32, contiguous, same shape and device.
//     ssim_map:   (B, C, H, W) SSIM at every pixel ("same" zero padding).
//     dS:         (5, B, C, H, W) dS/d(window sum) per Moment when train, else shape (0,).
//   fused_ssim_backward(grad_map, img1, img2, dS) -> (grad_img1, grad_img2)
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <tuple>

#include "../common/checks.h"

namespace prebuild {
namespace ssim {

using torch::stable::Tensor;

// Checks shared by both backends; `op` names the op in the message.
inline void check_images(const Tensor& img1, const Tensor& img2, const char* op) {
  check_dim(img1, 4, op, "img1 (B, C, H, W)");
  check_same_shape(img1, img2, op, "img1", "img2");
  check_same_device(img1, img2, op, "img1", "img2");
  check_float32(img1, op, "img1");
  check_float32(img2, op, "img2");
  check_contiguous(img1, op, "img1");
  check_contiguous(img2, op, "img2");
}

inline void check_backward_inputs(const Tensor& grad_map, const Tensor& img1,
                                  const Tensor& img2, const Tensor& dS, const char* op) {
  check_images(img1, img2, op);
  check_same_shape(grad_map, img1, op, "grad_map", "img1");
  check_same_device(grad_map, img1, op, "grad_map", "img1");
  check_float32(grad_map, op, "grad_map");
  check_contiguous(grad_map, op, "grad_map");
  check_dim(dS, 5, op, "dS (5, B, C, H, W) from fused_ssim_forward(train=True)");
  STD_TORCH_CHECK(dS.size(0) == 5 && dS.size(1) == img1.size(0) && dS.size(2) == img1.size(1) &&
                      dS.size(3) == img1.size(2) && dS.size(4) == img1.size(3),
                  op, ": dS must have shape (5, B, C, H, W) matching img1");
  check_same_device(dS, img1, op, "dS", "img1");
  check_float32(dS, op, "dS");
  check_contiguous(dS, op, "dS");
}

std::tuple<Tensor, Tensor> forward_cpu(Tensor img1, Tensor img2, bool train);
std::tuple<Tensor, Tensor> backward_cpu(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS);

}  // namespace ssim
}  // namespace prebuild
