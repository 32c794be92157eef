// Host-side pieces of the spherical-harmonics op family shared by its backends (CPU, CUDA,
// simt): input checks, output allocation, kernel arguments.
//
//   spherical_harmonics_forward(degrees_to_use, dirs [..., 3], coeffs [..., K, 3],
//       masks [...] bool?) -> colors [..., 3]
//   spherical_harmonics_backward(degrees_to_use, dirs, coeffs, masks?, v_colors [..., 3],
//       compute_v_dirs) -> (v_coeffs [..., K, 3], v_dirs [..., 3], or shape (0,) unless
//       compute_v_dirs)
// 0 <= degrees_to_use <= 4 and (degrees_to_use + 1)^2 <= K; dirs and coeffs share their batch
// dimensions (gsplat 1.5.3's spherical_harmonics: no broadcasting). Everything float32
// contiguous except masks (bool), on one device. Masked directions (masks false) get zero
// colours and zero gradients; see sh_math.h for the math.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include <prebuild/checks.h>
#include "sh_kernels.h"

namespace prebuild {
namespace gsplat {
namespace sh {

using torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

constexpr const char* kForwardOp = "spherical_harmonics_forward";
constexpr const char* kBackwardOp = "spherical_harmonics_backward";

inline void check_float_tensor(const Tensor& t, const Tensor& dirs, const char* op,
                               const char* name) {
  check_float_input(t, dirs, op, name, "dirs");
}

// Whether t's first `count` sizes are those of `like`.
inline bool same_leading_sizes(const Tensor& t, const Tensor& like, int64_t count) {
  for (int64_t d = 0; d < count; ++d) {
    if (t.size(d) != like.size(d)) return false;
  }
  return true;
}

// Checks the inputs shared by the forward and backward; returns them as kernel inputs.
inline Inputs check_inputs(int64_t degree, const Tensor& dirs, const Tensor& coeffs,
                           const OptTensor& masks, const char* op) {
  STD_TORCH_CHECK(degree >= 0 && degree <= kMaxDegree, op,
                  ": degrees_to_use must be in [0, 4], got ", degree);
  check_float_tensor(dirs, dirs, op, "dirs [..., 3]");
  const int64_t batch = dirs.dim() - 1;
  STD_TORCH_CHECK(batch >= 0 && dirs.size(batch) == 3, op, ": dirs must have shape [..., 3]");
  check_float_tensor(coeffs, dirs, op, "coeffs [..., K, 3]");
  STD_TORCH_CHECK(coeffs.dim() == batch + 2 && same_leading_sizes(coeffs, dirs, batch) &&
                      coeffs.size(batch + 1) == 3,
                  op, ": coeffs must have shape [..., K, 3] with the batch dimensions of dirs");
  const int64_t K = coeffs.size(batch);
  STD_TORCH_CHECK(num_bases(static_cast<int>(degree)) <= K, op, ": degree ", degree, " needs ",
                  num_bases(static_cast<int>(degree)), " coefficients per channel, coeffs has K = ",
                  K);
  const uint8_t* mask_data = nullptr;
  if (masks.has_value()) {
    check_same_device(*masks, dirs, op, "masks", "dirs");
    STD_TORCH_CHECK(masks->scalar_type() == torch::headeronly::ScalarType::Bool, op,
                    ": masks must be bool");
    check_contiguous(*masks, op, "masks");
    STD_TORCH_CHECK(masks->dim() == batch && same_leading_sizes(*masks, dirs, batch), op,
                    ": masks must have the batch shape of dirs (dirs without its last dimension)");
    mask_data = static_cast<const uint8_t*>(masks->const_data_ptr());
  }
  return {static_cast<int>(degree), dirs.numel() / 3, K, dirs.const_data_ptr<float>(),
          coeffs.const_data_ptr<float>(), mask_data};
}

// check_inputs, plus: the tensors are on the backend's device.
template <typename Backend>
Inputs check_call(int64_t degree, const Tensor& dirs, const Tensor& coeffs,
                  const OptTensor& masks, const char* op) {
  const Inputs in = check_inputs(degree, dirs, coeffs, masks, op);
  check_backend<Backend>(dirs, op);
  return in;
}

// The forward and backward host functions of every backend, registered as
// TORCH_BOX(&forward_op<Backend>): checks, outputs, then the backend's kernel unless there is
// nothing to compute. A Backend has static members
//   forward_name, backward_name: the op names for messages; device: its device's name;
//   on_device(t): whether t is on that device;
//   run_forward(args, on), run_backward(args, on): run the kernels (`on`: a tensor of the call).
template <typename Backend>
Tensor forward_op(int64_t degrees_to_use, Tensor dirs, Tensor coeffs, OptTensor masks) {
  const Inputs in =
      check_call<Backend>(degrees_to_use, dirs, coeffs, masks, Backend::forward_name);
  Tensor colors = torch::stable::empty_like(dirs);
  const ForwardArgs args{in, colors.mutable_data_ptr<float>()};
  if (in.N > 0) Backend::run_forward(args, dirs);
  return colors;
}

template <typename Backend>
std::tuple<Tensor, Tensor> backward_op(int64_t degrees_to_use, Tensor dirs, Tensor coeffs,
                                       OptTensor masks, Tensor v_colors, bool compute_v_dirs) {
  const char* op = Backend::backward_name;
  const Inputs in = check_call<Backend>(degrees_to_use, dirs, coeffs, masks, op);
  check_float_tensor(v_colors, dirs, op, "v_colors [..., 3]");
  check_same_shape(v_colors, dirs, op, "v_colors", "dirs");
  Tensor v_coeffs = torch::stable::empty_like(coeffs);
  Tensor v_dirs = compute_v_dirs ? torch::stable::empty_like(dirs)
                                 : torch::stable::new_empty(dirs, {0});
  const BackwardArgs args{in, v_colors.const_data_ptr<float>(),
                          v_coeffs.mutable_data_ptr<float>(),
                          compute_v_dirs ? v_dirs.mutable_data_ptr<float>() : nullptr};
  if (in.N > 0) Backend::run_backward(args, dirs);
  return {v_coeffs, v_dirs};
}

// Registers the backend's implementations: STABLE_TORCH_LIBRARY_IMPL(ns, KEY, m) {
// register_ops<Backend>(m); }.
template <typename Backend, typename Library>
void register_ops(Library& m) {
  m.impl(kForwardOp, TORCH_BOX(&forward_op<Backend>));
  m.impl(kBackwardOp, TORCH_BOX(&backward_op<Backend>));
}

}  // namespace sh
}  // namespace gsplat
}  // namespace prebuild
