// Host-side pieces of the quat_scale_to_covar_preci op family shared by its backends (CPU,
// CUDA, simt): input checks, output allocation, kernel arguments.
//
//   quat_scale_to_covar_preci_forward(quats [..., 4], scales [..., 3], compute_covar,
//       compute_preci, triu)
//     -> (covars, precis): each [..., 3, 3], or [..., 6] (xx, xy, xz, yy, yz, zz) with triu,
//        or shape (0,) when not computed
//   quat_scale_to_covar_preci_backward(quats, scales, triu, v_covars?, v_precis?)
//     -> (v_quats [..., 4], v_scales [..., 3]); zeros when neither gradient is given
// Any number of batch dimensions, the same for quats and scales (a single Gaussian is
// quats (4,), scales (3,)). Everything float32 contiguous, on one device.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include <prebuild/checks.h>
#include <prebuild/zeros.h>
#include "covariance_kernels.h"

namespace prebuild {
namespace gsplat {
namespace covariance {

using torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

constexpr const char* kForwardOp = "quat_scale_to_covar_preci_forward";
constexpr const char* kBackwardOp = "quat_scale_to_covar_preci_backward";

inline void check_input(const Tensor& t, const Tensor& quats, const char* op, const char* name) {
  check_float_input(t, quats, op, name, "quats");
}

// Whether `t` has shape batch + tail, batch being quats' sizes but the last.
inline bool has_batch_shape(const Tensor& t, const Tensor& quats, std::vector<int64_t> tail) {
  const int64_t batch = quats.dim() - 1;
  if (t.dim() != batch + static_cast<int64_t>(tail.size())) return false;
  for (int64_t d = 0; d < batch; ++d)
    if (t.size(d) != quats.size(d)) return false;
  for (size_t k = 0; k < tail.size(); ++k)
    if (t.size(batch + static_cast<int64_t>(k)) != tail[k]) return false;
  return true;
}

// quats' batch sizes followed by `tail`.
inline std::vector<int64_t> batch_shape(const Tensor& quats, std::vector<int64_t> tail) {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d + 1 < quats.dim(); ++d) shape.push_back(quats.size(d));
  shape.insert(shape.end(), tail.begin(), tail.end());
  return shape;
}

// The shape of a covariance or precision after quats' batch dimensions.
inline std::vector<int64_t> matrix_tail(bool triu) {
  return triu ? std::vector<int64_t>{6} : std::vector<int64_t>{3, 3};
}

// Checks quats and scales and that they are on the backend's device; returns the number of
// Gaussians.
template <typename Backend>
int64_t check_gaussians(const Tensor& quats, const Tensor& scales, const char* op) {
  STD_TORCH_CHECK(quats.dim() >= 1 && quats.size(quats.dim() - 1) == 4, op,
                  ": quats must have shape (..., 4)");
  check_input(quats, quats, op, "quats");
  STD_TORCH_CHECK(has_batch_shape(scales, quats, {3}), op,
                  ": scales must have shape (..., 3) with the batch dimensions of quats");
  check_input(scales, quats, op, "scales");
  check_backend<Backend>(quats, op);
  return quats.numel() / 4;
}

using ForwardResult = std::tuple<Tensor, Tensor>;
using BackwardResult = std::tuple<Tensor, Tensor>;

// The forward and backward host functions of every backend, registered as
// TORCH_BOX(&forward_op<Backend>): checks, outputs, then the backend's kernel unless there is
// nothing to compute. A Backend has static members
//   forward_name, backward_name: the op names for messages; device: its device's name;
//   on_device(t): whether t is on that device;
//   run_forward(args, on), run_backward(args, on): run the kernels (`on`: a tensor of the call).
template <typename Backend>
ForwardResult forward_op(Tensor quats, Tensor scales, bool compute_covar, bool compute_preci,
                         bool triu) {
  const char* op = Backend::forward_name;
  const int64_t n = check_gaussians<Backend>(quats, scales, op);
  const std::vector<int64_t> shape = batch_shape(quats, matrix_tail(triu));
  auto output = [&](bool computed) {
    return torch::stable::new_empty(quats, computed ? shape : std::vector<int64_t>{0});
  };
  Tensor covars = output(compute_covar);
  Tensor precis = output(compute_preci);
  ForwardArgs args{quats.const_data_ptr<float>(),
                   scales.const_data_ptr<float>(),
                   n,
                   triu,
                   compute_covar ? covars.mutable_data_ptr<float>() : nullptr,
                   compute_preci ? precis.mutable_data_ptr<float>() : nullptr};
  if (n > 0 && (compute_covar || compute_preci)) Backend::run_forward(args, quats);
  return {covars, precis};
}

// Checks an incoming gradient: the shape of the output it belongs to.
inline void check_output_grad(const Tensor& v, const Tensor& quats, bool triu, const char* op,
                              const char* name) {
  STD_TORCH_CHECK(has_batch_shape(v, quats, matrix_tail(triu)), op, ": ", name,
                  " must have the batch dimensions of quats, then ",
                  triu ? "6 (triu=True)" : "3, 3 (triu=False)");
  check_input(v, quats, op, name);
}

template <typename Backend>
BackwardResult backward_op(Tensor quats, Tensor scales, bool triu, OptTensor v_covars,
                           OptTensor v_precis) {
  const char* op = Backend::backward_name;
  const int64_t n = check_gaussians<Backend>(quats, scales, op);
  if (v_covars.has_value()) check_output_grad(*v_covars, quats, triu, op, "v_covars");
  if (v_precis.has_value()) check_output_grad(*v_precis, quats, triu, op, "v_precis");
  if (!v_covars.has_value() && !v_precis.has_value()) {
    return {prebuild::new_zeros(quats, batch_shape(quats, {4})),
            prebuild::new_zeros(quats, batch_shape(quats, {3}))};
  }
  Tensor v_quats = torch::stable::new_empty(quats, batch_shape(quats, {4}));
  Tensor v_scales = torch::stable::new_empty(quats, batch_shape(quats, {3}));
  auto ptr = [](const OptTensor& t) -> const float* {
    return t.has_value() ? t->const_data_ptr<float>() : nullptr;
  };
  BackwardArgs args{quats.const_data_ptr<float>(),
                    scales.const_data_ptr<float>(),
                    n,
                    triu,
                    ptr(v_covars),
                    ptr(v_precis),
                    v_quats.mutable_data_ptr<float>(),
                    v_scales.mutable_data_ptr<float>()};
  if (n > 0) Backend::run_backward(args, quats);
  return {v_quats, v_scales};
}

// Registers the backend's implementations: STABLE_TORCH_LIBRARY_IMPL(ns, KEY, m) {
// register_ops<Backend>(m); }.
template <typename Backend, typename Library>
void register_ops(Library& m) {
  m.impl(kForwardOp, TORCH_BOX(&forward_op<Backend>));
  m.impl(kBackwardOp, TORCH_BOX(&backward_op<Backend>));
}

}  // namespace covariance
}  // namespace gsplat
}  // namespace prebuild
