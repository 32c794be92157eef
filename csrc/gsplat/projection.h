// Host-side pieces of the fully fused projection op family shared by its backends (CPU,
// CUDA, simt): input checks, output allocation, kernel arguments.
//
//   fully_fused_projection_forward(means, covars?, quats?, scales?, viewmats, Ks, width,
//       height, eps2d, near_plane, far_plane, radius_clip, calc_compensations)
//     -> (means2d [C,N,2], depths [C,N], conics [C,N,3], compensations [C,N] or shape (0,)
//         unless calc_compensations, radii [C,N,2] int32)
//   fully_fused_projection_backward(means, covars?, quats?, scales?, viewmats, Ks, width,
//       height, eps2d, radii, conics, compensations, v_means2d, v_depths, v_conics,
//       v_compensations)
//     -> (v_means [N,3], v_covars [N,6], v_quats [N,4], v_scales [N,3]); the pair of the
//        path not taken (covars, or quats and scales) has shape (0,). compensations and
//        v_compensations may be shape (0,): then the compensation term has no gradient.
// Exactly one of covars and (quats, scales) is given. Everything float32 contiguous except
// radii (int32), on one device. Culled pairs (a radius 0) write zeros and get no gradient.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include <prebuild/checks.h>
#include "projection_kernels.h"

namespace prebuild {
namespace gsplat {
namespace projection {

using torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

constexpr const char* kForwardOp = "fully_fused_projection_forward";
constexpr const char* kBackwardOp = "fully_fused_projection_backward";

inline void check_tensor(const Tensor& t, const Tensor& like, int64_t dim, const char* op,
                         const char* name) {
  check_dim(t, dim, op, name);
  check_same_device(t, like, op, name, "means");
  check_contiguous(t, op, name);
}

inline void check_float_tensor(const Tensor& t, const Tensor& like, int64_t dim, const char* op,
                               const char* name) {
  check_tensor(t, like, dim, op, name);
  check_float32(t, op, name);
}

// Checks `t` has shape (rows, cols).
inline void check_rows(const Tensor& t, int64_t rows, int64_t cols, const char* op,
                       const char* name) {
  STD_TORCH_CHECK(t.size(0) == rows && t.size(1) == cols, op, ": ", name, " must have shape (",
                  rows, ", ", cols, "), got (", t.size(0), ", ", t.size(1), ")");
}

// Checks the inputs shared by the forward and backward; returns (C, N).
inline std::tuple<int64_t, int64_t> check_scene(const Tensor& means, const OptTensor& covars,
                                                const OptTensor& quats, const OptTensor& scales,
                                                const Tensor& viewmats, const Tensor& Ks,
                                                int64_t width, int64_t height, const char* op) {
  check_float_tensor(means, means, 2, op, "means (N, 3)");
  const int64_t N = means.size(0);
  check_rows(means, N, 3, op, "means");
  STD_TORCH_CHECK(covars.has_value() != (quats.has_value() || scales.has_value()), op,
                  ": give either covars or (quats and scales), not both and not neither");
  if (covars.has_value()) {
    check_float_tensor(*covars, means, 2, op, "covars (N, 6)");
    check_rows(*covars, N, 6, op, "covars");
  } else {
    STD_TORCH_CHECK(quats.has_value() && scales.has_value(), op,
                    ": quats and scales must be given together");
    check_float_tensor(*quats, means, 2, op, "quats (N, 4)");
    check_rows(*quats, N, 4, op, "quats");
    check_float_tensor(*scales, means, 2, op, "scales (N, 3)");
    check_rows(*scales, N, 3, op, "scales");
  }
  check_float_tensor(viewmats, means, 3, op, "viewmats (C, 4, 4)");
  const int64_t C = viewmats.size(0);
  STD_TORCH_CHECK(viewmats.size(1) == 4 && viewmats.size(2) == 4, op,
                  ": viewmats must have shape (C, 4, 4)");
  check_float_tensor(Ks, means, 3, op, "Ks (C, 3, 3)");
  STD_TORCH_CHECK(Ks.size(0) == C && Ks.size(1) == 3 && Ks.size(2) == 3, op,
                  ": Ks must have shape (C, 3, 3) with C = viewmats.size(0)");
  STD_TORCH_CHECK(width > 0 && height > 0 && width < (int64_t{1} << 30) &&
                      height < (int64_t{1} << 30),
                  op, ": width and height must be positive and below 2^30");
  return {C, N};
}

inline Scene make_scene(const Tensor& means, const OptTensor& covars, const OptTensor& quats,
                        const OptTensor& scales, const Tensor& viewmats, const Tensor& Ks,
                        int64_t C, int64_t N, int64_t width, int64_t height) {
  auto ptr = [](const OptTensor& t) -> const float* {
    return t.has_value() ? t->const_data_ptr<float>() : nullptr;
  };
  return {means.const_data_ptr<float>(), ptr(covars), ptr(quats), ptr(scales),
          viewmats.const_data_ptr<float>(), Ks.const_data_ptr<float>(), C, N,
          static_cast<int>(width), static_cast<int>(height)};
}

// check_scene, plus: the tensors are on the backend's device.
template <typename Backend>
std::tuple<int64_t, int64_t> check_call(const Tensor& means, const OptTensor& covars,
                                        const OptTensor& quats, const OptTensor& scales,
                                        const Tensor& viewmats, const Tensor& Ks, int64_t width,
                                        int64_t height, const char* op) {
  const auto sizes = check_scene(means, covars, quats, scales, viewmats, Ks, width, height, op);
  STD_TORCH_CHECK(Backend::on_device(means), op, ": this kernel runs on ", Backend::device,
                  " tensors");
  return sizes;
}

using ForwardResult = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;
using BackwardResult = std::tuple<Tensor, Tensor, Tensor, Tensor>;

// The forward and backward host functions of every backend, registered as
// TORCH_BOX(&forward_op<Backend>): checks, outputs, then the backend's kernel unless there is
// nothing to compute. A Backend has static members
//   forward_name, backward_name: the op names for messages; device: its device's name;
//   on_device(t): whether t is on that device;
//   run_forward(args, on), run_backward(args, on): run the kernels (`on`: a tensor of the call).
template <typename Backend>
ForwardResult forward_op(Tensor means, OptTensor covars, OptTensor quats, OptTensor scales,
                         Tensor viewmats, Tensor Ks, int64_t width, int64_t height, double eps2d,
                         double near_plane, double far_plane, double radius_clip,
                         bool calc_compensations) {
  const char* op = Backend::forward_name;
  const auto [C, N] =
      check_call<Backend>(means, covars, quats, scales, viewmats, Ks, width, height, op);
  Tensor radii = torch::stable::new_empty(means, {C, N, 2}, torch::headeronly::ScalarType::Int);
  Tensor means2d = torch::stable::new_empty(means, {C, N, 2});
  Tensor depths = torch::stable::new_empty(means, {C, N});
  Tensor conics = torch::stable::new_empty(means, {C, N, 3});
  Tensor compensations = calc_compensations ? torch::stable::new_empty(means, {C, N})
                                            : torch::stable::new_empty(means, {0});
  ForwardArgs args{make_scene(means, covars, quats, scales, viewmats, Ks, C, N, width, height),
                   {static_cast<float>(eps2d), static_cast<float>(near_plane),
                    static_cast<float>(far_plane), static_cast<float>(radius_clip)},
                   radii.mutable_data_ptr<int32_t>(),
                   means2d.mutable_data_ptr<float>(),
                   depths.mutable_data_ptr<float>(),
                   conics.mutable_data_ptr<float>(),
                   calc_compensations ? compensations.mutable_data_ptr<float>() : nullptr};
  if (C * N > 0) Backend::run_forward(args, means);
  return {means2d, depths, conics, compensations, radii};
}

// Checks a per-pair tensor of shape (C, N, last) (last = 0: (C, N)).
inline void check_pairs(const Tensor& t, const Tensor& means, int64_t C, int64_t N, int64_t last,
                        const char* op, const char* name) {
  check_tensor(t, means, last > 0 ? 3 : 2, op, name);
  STD_TORCH_CHECK(t.size(0) == C && t.size(1) == N && (last == 0 || t.size(2) == last), op, ": ",
                  name, " does not match (C, N) = (", C, ", ", N, ")");
}

template <typename Backend>
BackwardResult backward_op(Tensor means, OptTensor covars, OptTensor quats, OptTensor scales,
                           Tensor viewmats, Tensor Ks, int64_t width, int64_t height,
                           double eps2d, Tensor radii, Tensor conics, Tensor compensations,
                           Tensor v_means2d, Tensor v_depths, Tensor v_conics,
                           Tensor v_compensations) {
  const char* op = Backend::backward_name;
  const auto [C, N] =
      check_call<Backend>(means, covars, quats, scales, viewmats, Ks, width, height, op);
  check_pairs(radii, means, C, N, 2, op, "radii (C, N, 2)");
  STD_TORCH_CHECK(radii.scalar_type() == torch::headeronly::ScalarType::Int, op,
                  ": radii must be int32");
  check_pairs(conics, means, C, N, 3, op, "conics (C, N, 3)");
  check_float32(conics, op, "conics");
  check_pairs(v_means2d, means, C, N, 2, op, "v_means2d (C, N, 2)");
  check_float32(v_means2d, op, "v_means2d");
  check_pairs(v_depths, means, C, N, 0, op, "v_depths (C, N)");
  check_float32(v_depths, op, "v_depths");
  check_pairs(v_conics, means, C, N, 3, op, "v_conics (C, N, 3)");
  check_float32(v_conics, op, "v_conics");
  // The compensation term takes part when v_compensations is (C, N), not when it is empty.
  const bool with_compensation = v_compensations.dim() == 2;
  if (with_compensation) {
    check_pairs(v_compensations, means, C, N, 0, op, "v_compensations (C, N)");
    check_float32(v_compensations, op, "v_compensations");
    check_pairs(compensations, means, C, N, 0, op,
                "compensations (C, N) (from calc_compensations=True, needed with "
                "v_compensations)");
    check_float32(compensations, op, "compensations");
  } else {
    STD_TORCH_CHECK(v_compensations.dim() == 1 && v_compensations.size(0) == 0, op,
                    ": v_compensations must have shape (C, N) or (0,)");
  }

  const bool by_covars = covars.has_value();
  auto grad_of = [&](bool used, int64_t cols) {
    return used ? torch::stable::new_zeros(means, {N, cols}) : torch::stable::new_zeros(means, {0});
  };
  Tensor v_means = grad_of(true, 3);
  Tensor v_covars = grad_of(by_covars, 6);
  Tensor v_quats = grad_of(!by_covars, 4);
  Tensor v_scales = grad_of(!by_covars, 3);
  BackwardArgs args{make_scene(means, covars, quats, scales, viewmats, Ks, C, N, width, height),
                    static_cast<float>(eps2d),
                    radii.const_data_ptr<int32_t>(),
                    conics.const_data_ptr<float>(),
                    with_compensation ? compensations.const_data_ptr<float>() : nullptr,
                    v_means2d.const_data_ptr<float>(),
                    v_depths.const_data_ptr<float>(),
                    v_conics.const_data_ptr<float>(),
                    with_compensation ? v_compensations.const_data_ptr<float>() : nullptr,
                    v_means.mutable_data_ptr<float>(),
                    by_covars ? v_covars.mutable_data_ptr<float>() : nullptr,
                    by_covars ? nullptr : v_quats.mutable_data_ptr<float>(),
                    by_covars ? nullptr : v_scales.mutable_data_ptr<float>()};
  if (C * N > 0) Backend::run_backward(args, means);
  return {v_means, v_covars, v_quats, v_scales};
}

// The device part of the backends whose tensors live on the CPU (CPU kernels, simt).
struct OnCpu {
  static constexpr const char* device = "CPU";
  static bool on_device(const Tensor& t) { return t.is_cpu(); }
};

// Registers the backend's implementations: STABLE_TORCH_LIBRARY_IMPL(ns, KEY, m) {
// register_ops<Backend>(m); }.
template <typename Backend, typename Library>
void register_ops(Library& m) {
  m.impl("fully_fused_projection_forward", TORCH_BOX(&forward_op<Backend>));
  m.impl("fully_fused_projection_backward", TORCH_BOX(&backward_op<Backend>));
}

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
