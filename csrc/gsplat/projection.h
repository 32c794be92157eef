// Host-side pieces of the projection op family shared by its backends (CPU, CUDA, simt):
// input checks, output allocation, kernel arguments. B batches of N Gaussians and C cameras
// (the Python wrapper flattens gsplat's leading batch dimensions into B).
//
//   fully_fused_projection_forward(means [B,N,3], covars? [B,N,6], quats? [B,N,4],
//       scales? [B,N,3], opacities? [B,N], viewmats [B,C,4,4], Ks [B,C,3,3], width, height,
//       eps2d, near_plane, far_plane, radius_clip, calc_compensations, camera_model)
//     -> (means2d [B,C,N,2], depths [B,C,N], conics [B,C,N,3], compensations [B,C,N] or
//         shape (0,) unless calc_compensations, radii [B,C,N,2] int32)
//   fully_fused_projection_backward(means, covars?, quats?, scales?, viewmats, Ks, width,
//       height, eps2d, camera_model, radii, conics, compensations, v_means2d, v_depths,
//       v_conics, v_compensations, viewmats_requires_grad)
//     -> (v_means [B,N,3], v_covars [B,N,6], v_quats [B,N,4], v_scales [B,N,3],
//         v_viewmats [B,C,4,4]); the pair of the path not taken (covars, or quats and scales)
//        has shape (0,), and so does v_viewmats unless viewmats_requires_grad. compensations
//        and v_compensations may be shape (0,): then the compensation term has no gradient;
//        v_depths too, when the loss does not use the depths (the same as zeros).
//   proj_forward(means [I,N,3], covars [I,N,3,3], Ks [I,3,3], width, height, camera_model)
//     -> (means2d [I,N,2], covars2d [I,N,2,2])       camera space in, no culling, no blur
//   proj_backward(means, covars, Ks, width, height, camera_model, v_means2d, v_covars2d)
//     -> (v_means [I,N,3], v_covars [I,N,3,3])
// Exactly one of covars and (quats, scales) is given; opacities, when given, bound the radii
// (gsplat's opacity-aware extent, projection_math.h). Everything float32 contiguous except
// radii (int32), on one device. Culled pairs (a radius 0) write zeros and get no gradient.
// camera_model: 0 pinhole, 1 ortho, 2 fisheye (CameraModel in projection_math.h).
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include <prebuild/checks.h>
#include <prebuild/zeros.h>
#include "projection_kernels.h"

namespace prebuild {
namespace gsplat {
namespace projection {

using torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;

constexpr const char* kForwardOp = "fully_fused_projection_forward";
constexpr const char* kBackwardOp = "fully_fused_projection_backward";
constexpr const char* kProjForwardOp = "proj_forward";
constexpr const char* kProjBackwardOp = "proj_backward";

inline void check_tensor(const Tensor& t, const Tensor& like, int64_t dim, const char* op,
                         const char* name) {
  check_dim(t, dim, op, name);
  check_same_device(t, like, op, name, "means");
  check_contiguous(t, op, name);
}

inline void check_float_tensor(const Tensor& t, const Tensor& like, int64_t dim, const char* op,
                               const char* name) {
  check_dim(t, dim, op, name);
  check_float_input(t, like, op, name, "means");
}

// Checks `t` (of the right number of dimensions) has shape (d0, d1, d2[, d3]) (d3 < 0: a
// 3-D tensor).
inline void check_shape(const Tensor& t, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                        const char* op, const char* name) {
  const bool four = d3 >= 0;
  const bool ok =
      t.size(0) == d0 && t.size(1) == d1 && t.size(2) == d2 && (!four || t.size(3) == d3);
  STD_TORCH_CHECK(ok, op, ": ", name, " must have shape (", d0, ", ", d1, ", ", d2,
                  four ? ", " : "", four ? std::to_string(d3) : "", "), got (", t.size(0), ", ",
                  t.size(1), ", ", t.size(2), four ? ", " : "",
                  four ? std::to_string(t.size(3)) : "", ")");
}

inline void check_camera_model(int64_t camera_model, const char* op) {
  STD_TORCH_CHECK(is_camera_model(camera_model), op,
                  ": camera_model must be 0 (pinhole), 1 (ortho) or 2 (fisheye), got ",
                  camera_model);
}

inline void check_image_size(int64_t width, int64_t height, const char* op) {
  STD_TORCH_CHECK(width > 0 && height > 0 && width < (int64_t{1} << 30) &&
                      height < (int64_t{1} << 30),
                  op, ": width and height must be positive and below 2^30");
}

struct SceneSize {
  int64_t B, C, N;
};

// Checks the inputs shared by the forward and backward; returns (B, C, N).
inline SceneSize check_scene(const Tensor& means, const OptTensor& covars, const OptTensor& quats,
                             const OptTensor& scales, const Tensor& viewmats, const Tensor& Ks,
                             int64_t width, int64_t height, int64_t camera_model,
                             const char* op) {
  check_float_tensor(means, means, 3, op, "means (B, N, 3)");
  const int64_t B = means.size(0), N = means.size(1);
  STD_TORCH_CHECK(means.size(2) == 3, op, ": means must have shape (B, N, 3)");
  STD_TORCH_CHECK(covars.has_value() != (quats.has_value() || scales.has_value()), op,
                  ": give either covars or (quats and scales), not both and not neither");
  if (covars.has_value()) {
    check_float_tensor(*covars, means, 3, op, "covars (B, N, 6)");
    check_shape(*covars, B, N, 6, -1, op, "covars");
  } else {
    STD_TORCH_CHECK(quats.has_value() && scales.has_value(), op,
                    ": quats and scales must be given together");
    check_float_tensor(*quats, means, 3, op, "quats (B, N, 4)");
    check_shape(*quats, B, N, 4, -1, op, "quats");
    check_float_tensor(*scales, means, 3, op, "scales (B, N, 3)");
    check_shape(*scales, B, N, 3, -1, op, "scales");
  }
  check_float_tensor(viewmats, means, 4, op, "viewmats (B, C, 4, 4)");
  const int64_t C = viewmats.size(1);
  check_shape(viewmats, B, C, 4, 4, op, "viewmats");
  check_float_tensor(Ks, means, 4, op, "Ks (B, C, 3, 3)");
  check_shape(Ks, B, C, 3, 3, op, "Ks");
  check_image_size(width, height, op);
  check_camera_model(camera_model, op);
  return {B, C, N};
}

inline Scene make_scene(const Tensor& means, const OptTensor& covars, const OptTensor& quats,
                        const OptTensor& scales, const Tensor& viewmats, const Tensor& Ks,
                        const SceneSize& n, int64_t width, int64_t height,
                        int64_t camera_model) {
  auto ptr = [](const OptTensor& t) -> const float* {
    return t.has_value() ? t->const_data_ptr<float>() : nullptr;
  };
  return {means.const_data_ptr<float>(), ptr(covars), ptr(quats), ptr(scales),
          viewmats.const_data_ptr<float>(), Ks.const_data_ptr<float>(), n.B, n.C, n.N,
          static_cast<int>(width), static_cast<int>(height), static_cast<int>(camera_model)};
}

using ForwardResult = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;
using BackwardResult = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;
using ProjResult = std::tuple<Tensor, Tensor>;

// The host functions of every backend, registered as TORCH_BOX(&forward_op<Backend>):
// checks, outputs, then the backend's kernel unless there is nothing to compute. A Backend
// has static members
//   forward_name, backward_name, proj_forward_name, proj_backward_name: the op names for
//   messages; device: its device's name; on_device(t): whether t is on that device;
//   run_forward, run_backward, run_proj_forward, run_proj_backward(args, on): run the kernels
//   (`on`: a tensor of the call).
template <typename Backend>
ForwardResult forward_op(Tensor means, OptTensor covars, OptTensor quats, OptTensor scales,
                         OptTensor opacities, Tensor viewmats, Tensor Ks, int64_t width,
                         int64_t height, double eps2d, double near_plane, double far_plane,
                         double radius_clip, bool calc_compensations, int64_t camera_model) {
  const char* op = Backend::forward_name;
  const SceneSize n = check_scene(means, covars, quats, scales, viewmats, Ks, width, height,
                                  camera_model, op);
  check_backend<Backend>(means, op);
  const int64_t B = n.B, C = n.C, N = n.N;
  if (opacities.has_value()) {
    check_float_tensor(*opacities, means, 2, op, "opacities (B, N)");
    STD_TORCH_CHECK(opacities->size(0) == B && opacities->size(1) == N, op,
                    ": opacities must have shape (", B, ", ", N, "), got (", opacities->size(0),
                    ", ", opacities->size(1), ")");
  }
  Tensor radii =
      torch::stable::new_empty(means, {B, C, N, 2}, torch::headeronly::ScalarType::Int);
  Tensor means2d = torch::stable::new_empty(means, {B, C, N, 2});
  Tensor depths = torch::stable::new_empty(means, {B, C, N});
  Tensor conics = torch::stable::new_empty(means, {B, C, N, 3});
  Tensor compensations = calc_compensations ? torch::stable::new_empty(means, {B, C, N})
                                            : torch::stable::new_empty(means, {0});
  ForwardArgs args{
      make_scene(means, covars, quats, scales, viewmats, Ks, n, width, height, camera_model),
      {static_cast<float>(eps2d), static_cast<float>(near_plane), static_cast<float>(far_plane),
       static_cast<float>(radius_clip), calc_compensations},
      opacities.has_value() ? opacities->const_data_ptr<float>() : nullptr,
      radii.mutable_data_ptr<int32_t>(),
      means2d.mutable_data_ptr<float>(),
      depths.mutable_data_ptr<float>(),
      conics.mutable_data_ptr<float>(),
      calc_compensations ? compensations.mutable_data_ptr<float>() : nullptr};
  if (B * C * N > 0) Backend::run_forward(args, means);
  return {means2d, depths, conics, compensations, radii};
}

// Checks a per-pair tensor of shape (B, C, N[, last]) (last = 0: (B, C, N)).
inline void check_pairs(const Tensor& t, const Tensor& means, const SceneSize& n, int64_t last,
                        const char* op, const char* name) {
  check_tensor(t, means, last > 0 ? 4 : 3, op, name);
  STD_TORCH_CHECK(t.size(0) == n.B && t.size(1) == n.C && t.size(2) == n.N &&
                      (last == 0 || t.size(3) == last),
                  op, ": ", name, " does not match (B, C, N) = (", n.B, ", ", n.C, ", ", n.N,
                  ")");
}

template <typename Backend>
BackwardResult backward_op(Tensor means, OptTensor covars, OptTensor quats, OptTensor scales,
                           Tensor viewmats, Tensor Ks, int64_t width, int64_t height,
                           double eps2d, int64_t camera_model, Tensor radii, Tensor conics,
                           Tensor compensations, Tensor v_means2d, Tensor v_depths,
                           Tensor v_conics, Tensor v_compensations,
                           bool viewmats_requires_grad) {
  const char* op = Backend::backward_name;
  const SceneSize n = check_scene(means, covars, quats, scales, viewmats, Ks, width, height,
                                  camera_model, op);
  check_backend<Backend>(means, op);
  check_pairs(radii, means, n, 2, op, "radii (B, C, N, 2)");
  STD_TORCH_CHECK(radii.scalar_type() == torch::headeronly::ScalarType::Int, op,
                  ": radii must be int32");
  check_pairs(conics, means, n, 3, op, "conics (B, C, N, 3)");
  check_float32(conics, op, "conics");
  check_pairs(v_means2d, means, n, 2, op, "v_means2d (B, C, N, 2)");
  check_float32(v_means2d, op, "v_means2d");
  const bool with_depths = !(v_depths.dim() == 1 && v_depths.size(0) == 0);  // (0,): zeros
  if (with_depths) {
    check_pairs(v_depths, means, n, 0, op, "v_depths (B, C, N) or (0,)");
    check_float32(v_depths, op, "v_depths");
  }
  check_pairs(v_conics, means, n, 3, op, "v_conics (B, C, N, 3)");
  check_float32(v_conics, op, "v_conics");
  // The compensation term takes part when v_compensations is (B, C, N), not when it is empty.
  const bool with_compensation = v_compensations.dim() == 3;
  if (with_compensation) {
    check_pairs(v_compensations, means, n, 0, op, "v_compensations (B, C, N)");
    check_float32(v_compensations, op, "v_compensations");
    check_pairs(compensations, means, n, 0, op,
                "compensations (B, C, N) (from calc_compensations=True, needed with "
                "v_compensations)");
    check_float32(compensations, op, "compensations");
  } else {
    STD_TORCH_CHECK(v_compensations.dim() == 1 && v_compensations.size(0) == 0, op,
                    ": v_compensations must have shape (B, C, N) or (0,)");
  }

  const int64_t B = n.B, C = n.C, N = n.N;
  const bool by_covars = covars.has_value();
  auto grad_of = [&](bool used, std::initializer_list<int64_t> shape) {
    return used ? prebuild::new_zeros(means, shape) : prebuild::new_zeros(means, {0});
  };
  Tensor v_means = grad_of(true, {B, N, 3});
  Tensor v_covars = grad_of(by_covars, {B, N, 6});
  Tensor v_quats = grad_of(!by_covars, {B, N, 4});
  Tensor v_scales = grad_of(!by_covars, {B, N, 3});
  Tensor v_viewmats = grad_of(viewmats_requires_grad, {B, C, 4, 4});
  BackwardArgs args{
      make_scene(means, covars, quats, scales, viewmats, Ks, n, width, height, camera_model),
      static_cast<float>(eps2d),
      radii.const_data_ptr<int32_t>(),
      conics.const_data_ptr<float>(),
      with_compensation ? compensations.const_data_ptr<float>() : nullptr,
      v_means2d.const_data_ptr<float>(),
      with_depths ? v_depths.const_data_ptr<float>() : nullptr,
      v_conics.const_data_ptr<float>(),
      with_compensation ? v_compensations.const_data_ptr<float>() : nullptr,
      v_means.mutable_data_ptr<float>(),
      by_covars ? v_covars.mutable_data_ptr<float>() : nullptr,
      by_covars ? nullptr : v_quats.mutable_data_ptr<float>(),
      by_covars ? nullptr : v_scales.mutable_data_ptr<float>(),
      viewmats_requires_grad ? v_viewmats.mutable_data_ptr<float>() : nullptr};
  if (B * C * N > 0) Backend::run_backward(args, means);
  return {v_means, v_covars, v_quats, v_scales, v_viewmats};
}

// ------------------------------------------------------------------------------- proj

// Checks proj's inputs; returns (I, N).
inline std::tuple<int64_t, int64_t> check_proj(const Tensor& means, const Tensor& covars,
                                               const Tensor& Ks, int64_t width, int64_t height,
                                               int64_t camera_model, const char* op) {
  check_float_tensor(means, means, 3, op, "means (I, N, 3)");
  const int64_t I = means.size(0), N = means.size(1);
  STD_TORCH_CHECK(means.size(2) == 3, op, ": means must have shape (I, N, 3)");
  check_float_tensor(covars, means, 4, op, "covars (I, N, 3, 3)");
  check_shape(covars, I, N, 3, 3, op, "covars");
  check_float_tensor(Ks, means, 3, op, "Ks (I, 3, 3)");
  STD_TORCH_CHECK(Ks.size(0) == I && Ks.size(1) == 3 && Ks.size(2) == 3, op,
                  ": Ks must have shape (I, 3, 3) with I = means.size(0)");
  check_image_size(width, height, op);
  check_camera_model(camera_model, op);
  return {I, N};
}

inline ProjArgs make_proj_args(const Tensor& means, const Tensor& covars, const Tensor& Ks,
                               int64_t I, int64_t N, int64_t width, int64_t height,
                               int64_t camera_model) {
  ProjArgs a{};
  a.means = means.const_data_ptr<float>();
  a.covars = covars.const_data_ptr<float>();
  a.Ks = Ks.const_data_ptr<float>();
  a.I = I;
  a.N = N;
  a.width = static_cast<int>(width);
  a.height = static_cast<int>(height);
  a.camera_model = static_cast<int>(camera_model);
  return a;
}

template <typename Backend>
ProjResult proj_forward_op(Tensor means, Tensor covars, Tensor Ks, int64_t width, int64_t height,
                           int64_t camera_model) {
  const char* op = Backend::proj_forward_name;
  const auto [I, N] = check_proj(means, covars, Ks, width, height, camera_model, op);
  check_backend<Backend>(means, op);
  Tensor means2d = torch::stable::new_empty(means, {I, N, 2});
  Tensor covars2d = torch::stable::new_empty(means, {I, N, 2, 2});
  ProjArgs args = make_proj_args(means, covars, Ks, I, N, width, height, camera_model);
  args.means2d = means2d.mutable_data_ptr<float>();
  args.covars2d = covars2d.mutable_data_ptr<float>();
  if (I * N > 0) Backend::run_proj_forward(args, means);
  return {means2d, covars2d};
}

template <typename Backend>
ProjResult proj_backward_op(Tensor means, Tensor covars, Tensor Ks, int64_t width,
                            int64_t height, int64_t camera_model, Tensor v_means2d,
                            Tensor v_covars2d) {
  const char* op = Backend::proj_backward_name;
  const auto [I, N] = check_proj(means, covars, Ks, width, height, camera_model, op);
  check_backend<Backend>(means, op);
  check_float_tensor(v_means2d, means, 3, op, "v_means2d (I, N, 2)");
  STD_TORCH_CHECK(v_means2d.size(0) == I && v_means2d.size(1) == N && v_means2d.size(2) == 2,
                  op, ": v_means2d must have shape (I, N, 2)");
  check_float_tensor(v_covars2d, means, 4, op, "v_covars2d (I, N, 2, 2)");
  check_shape(v_covars2d, I, N, 2, 2, op, "v_covars2d");
  Tensor v_means = torch::stable::new_empty(means, {I, N, 3});
  Tensor v_covars = torch::stable::new_empty(means, {I, N, 3, 3});
  ProjArgs args = make_proj_args(means, covars, Ks, I, N, width, height, camera_model);
  args.v_means2d = v_means2d.const_data_ptr<float>();
  args.v_covars2d = v_covars2d.const_data_ptr<float>();
  args.v_means = v_means.mutable_data_ptr<float>();
  args.v_covars = v_covars.mutable_data_ptr<float>();
  if (I * N > 0) Backend::run_proj_backward(args, means);
  return {v_means, v_covars};
}

// Registers the backend's implementations: STABLE_TORCH_LIBRARY_IMPL(ns, KEY, m) {
// register_ops<Backend>(m); }.
template <typename Backend, typename Library>
void register_ops(Library& m) {
  m.impl(kForwardOp, TORCH_BOX(&forward_op<Backend>));
  m.impl(kBackwardOp, TORCH_BOX(&backward_op<Backend>));
  m.impl(kProjForwardOp, TORCH_BOX(&proj_forward_op<Backend>));
  m.impl(kProjBackwardOp, TORCH_BOX(&proj_backward_op<Backend>));
}

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
