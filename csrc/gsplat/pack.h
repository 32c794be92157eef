// Host side of the pack op family, shared by its backends (CPU, CUDA, simt): gsplat's packed
// layout of fully_fused_projection's dense outputs, in one op instead of a chain of PyTorch
// ops (a host-time cost per op on a GPU: see docs/gpu-checks).
//
//   pack_visible(radii [B,C,N,2] i32, means2d [B,C,N,2] f32, depths [B,C,N] f32,
//                conics [B,C,N,3] f32, compensations [B,C,N] f32?, opacities [B,N] f32?,
//                colors [B,N,F] f32?)
//     -> (batch_ids, camera_ids, gaussian_ids, image_ids [nnz] i64, radii [nnz,2] i32,
//         means2d [nnz,2], depths [nnz], conics [nnz,3], compensations [nnz],
//         opacities [nnz], colors [nnz,F]) (an absent input's output: [0])
//   pack_visible_backward(image_ids [nnz] i64, gaussian_ids [nnz] i64, v_means2d [nnz,2]?,
//                         v_depths [nnz]?, v_conics [nnz,3]?, v_compensations [nnz]?,
//                         v_opacities [nnz]?, v_colors [nnz,F]?, B, C, N)
//     -> (v_means2d [B,C,N,2], v_depths [B,C,N], v_conics [B,C,N,3], v_compensations [B,C,N],
//         v_opacities [B,N], v_colors [B,N,F]): zero but at the visible pairs (summed over
//        a Gaussian's pairs for the per-Gaussian ones), or [0] where the gradient is absent.
//
// opacities and colors are per Gaussian (shared by the C cameras): each pair gets its
// Gaussian's row, as rasterization() gathers them for the rasterizer.
//
// The visible pairs are those whose radii are both positive, in (batch, camera, Gaussian)
// order; their count nnz sizes the outputs: read back on the host (the one sync of packed
// mode, as gsplat's). Flow: flag, inclusive scan, total, pack (pack_kernels.h).
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include <prebuild/checks.h>
#include <prebuild/zeros.h>
#include "pack_kernels.h"
#include "scan.h"

namespace prebuild {
namespace gsplat {
namespace pack {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

constexpr const char* kForward = "pack_visible";
constexpr const char* kBackward = "pack_visible_backward";

// Shape [B, C, N, last...] (last: 0 for [B, C, N]) matching radii's first three sizes.
inline void check_pair_tensor(const Tensor& t, const Tensor& radii, int64_t last, const char* op,
                              const char* name) {
  const int64_t dims = last ? 4 : 3;
  bool ok = t.dim() == dims;
  for (int64_t d = 0; ok && d < 3; ++d) ok = t.size(d) == radii.size(d);
  if (ok && last) ok = t.size(3) == last;
  STD_TORCH_CHECK(ok, op, ": ", name, " must have shape [B, C, N", last ? ", " : "",
                  last ? std::to_string(last) : std::string(), "] matching radii [B, C, N, 2]");
  check_float_input(t, radii, op, name, "radii");
}

// A per-Gaussian tensor: [B, N] (last 0) or [B, N, F] (last -1: any F >= 1) matching radii.
inline void check_gaussian_tensor(const Tensor& t, const Tensor& radii, int64_t last,
                                  const char* op, const char* name) {
  const bool ok = t.dim() == (last ? 3 : 2) && t.size(0) == radii.size(0) &&
                  t.size(1) == radii.size(2) && (!last || t.size(2) >= 1);
  STD_TORCH_CHECK(ok, op, ": ", name, " must have shape [B, N", last ? ", F" : "",
                  "] matching radii [B, C, N, 2]");
  check_float_input(t, radii, op, name, "radii");
}

// A packed gradient: [nnz, last...] float32 on the ids' device, or absent (last -1: [nnz, F]
// for any F >= 1).
inline const float* packed_grad(const std::optional<Tensor>& t, const Tensor& ids, int64_t last,
                                const char* op, const char* name) {
  if (!t.has_value()) return nullptr;
  const int64_t dims = last ? 2 : 1;
  STD_TORCH_CHECK(t->dim() == dims && t->size(0) == ids.size(0) &&
                      (!last || (last < 0 ? t->size(1) >= 1 : t->size(1) == last)),
                  op, ": ", name, " must have shape [nnz", last ? ", " : "",
                  last > 0 ? std::to_string(last) : last < 0 ? "F" : "",
                  "] matching image_ids [nnz]");
  check_float_input(*t, ids, op, name, "image_ids");
  return t->const_data_ptr<float>();
}

// The host function of every backend (TORCH_BOX(&forward_op<Backend>)). A Backend has static
// members name (for messages), device and on_device(t) (OnCpu/OnCuda), and
//   flag(args, on), pack(args, on), unpack(args, on): run the kernels;
//   scan(cum, n, on): inclusive prefix sum of cum[0, n) in place;
//   total(cum, n, on): cum[n - 1] on the host (on CUDA: copied back, waited for).
template <typename Backend>
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>
forward_op(Tensor radii, Tensor means2d, Tensor depths, Tensor conics,
           std::optional<Tensor> compensations, std::optional<Tensor> opacities,
           std::optional<Tensor> colors) {
  const char* op = Backend::name;
  STD_TORCH_CHECK(radii.dim() == 4 && radii.size(3) == 2, op,
                  ": radii must have shape [B, C, N, 2], got ", radii.dim(), " dimensions");
  STD_TORCH_CHECK(radii.scalar_type() == ScalarType::Int, op, ": radii must be int32");
  check_contiguous(radii, op, "radii");
  check_backend<Backend>(radii, op);
  check_pair_tensor(means2d, radii, 2, op, "means2d");
  check_pair_tensor(depths, radii, 0, op, "depths");
  check_pair_tensor(conics, radii, 3, op, "conics");
  if (compensations.has_value()) check_pair_tensor(*compensations, radii, 0, op, "compensations");
  if (opacities.has_value()) check_gaussian_tensor(*opacities, radii, 0, op, "opacities");
  if (colors.has_value()) check_gaussian_tensor(*colors, radii, -1, op, "colors");
  const int64_t F = colors.has_value() ? colors->size(2) : 0;

  const int64_t C = radii.size(1), N = radii.size(2);
  const int64_t n = radii.size(0) * C * N;
  Tensor rank = torch::stable::new_empty(radii, {n}, ScalarType::Long);
  int64_t nnz = 0;
  if (n > 0) {
    Backend::flag(FlagArgs{radii.const_data_ptr<int32_t>(), n, rank.mutable_data_ptr<int64_t>()},
                  radii);
    Backend::scan(rank, n, radii);
    nnz = Backend::total(rank, n, radii);
  }
  auto ids = [&] { return torch::stable::new_empty(radii, {nnz}, ScalarType::Long); };
  Tensor batch_ids = ids(), camera_ids = ids(), gaussian_ids = ids(), image_ids = ids();
  Tensor radii_out = torch::stable::new_empty(radii, {nnz, 2});
  Tensor means2d_out = torch::stable::new_empty(means2d, {nnz, 2});
  Tensor depths_out = torch::stable::new_empty(depths, {nnz});
  Tensor conics_out = torch::stable::new_empty(conics, {nnz, 3});
  auto optional_out = [&](const std::optional<Tensor>& given,
                          std::initializer_list<int64_t> shape) {
    return torch::stable::new_empty(means2d, given.has_value()
                                                 ? torch::headeronly::IntHeaderOnlyArrayRef(shape)
                                                 : torch::headeronly::IntHeaderOnlyArrayRef({0}));
  };
  Tensor compensations_out = optional_out(compensations, {nnz});
  Tensor opacities_out = optional_out(opacities, {nnz});
  Tensor colors_out = optional_out(colors, {nnz, F});
  auto in = [](const std::optional<Tensor>& t) {
    return t.has_value() ? t->const_data_ptr<float>() : nullptr;
  };
  auto out = [](const std::optional<Tensor>& given, Tensor& t) {
    return given.has_value() ? t.mutable_data_ptr<float>() : nullptr;
  };
  if (nnz > 0) {
    PackArgs a{radii.const_data_ptr<int32_t>(),
               means2d.const_data_ptr<float>(),
               depths.const_data_ptr<float>(),
               conics.const_data_ptr<float>(),
               in(compensations),
               in(opacities),
               in(colors),
               rank.const_data_ptr<int64_t>(),
               n,
               C,
               N,
               F,
               batch_ids.mutable_data_ptr<int64_t>(),
               camera_ids.mutable_data_ptr<int64_t>(),
               gaussian_ids.mutable_data_ptr<int64_t>(),
               image_ids.mutable_data_ptr<int64_t>(),
               radii_out.mutable_data_ptr<int32_t>(),
               means2d_out.mutable_data_ptr<float>(),
               depths_out.mutable_data_ptr<float>(),
               conics_out.mutable_data_ptr<float>(),
               out(compensations, compensations_out),
               out(opacities, opacities_out),
               out(colors, colors_out)};
    Backend::pack(a, radii);
  }
  return {batch_ids,  camera_ids, gaussian_ids,      image_ids,     radii_out, means2d_out,
          depths_out, conics_out, compensations_out, opacities_out, colors_out};
}

template <typename Backend>
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> backward_op(
    Tensor image_ids, Tensor gaussian_ids, std::optional<Tensor> v_means2d,
    std::optional<Tensor> v_depths, std::optional<Tensor> v_conics,
    std::optional<Tensor> v_compensations, std::optional<Tensor> v_opacities,
    std::optional<Tensor> v_colors, int64_t B, int64_t C, int64_t N) {
  const char* op = Backend::name;
  STD_TORCH_CHECK(B >= 0 && C >= 0 && N >= 0, op, ": B, C and N must be non-negative");
  for (const Tensor* t : {&image_ids, &gaussian_ids}) {
    STD_TORCH_CHECK(t->dim() == 1 && t->size(0) == image_ids.size(0), op,
                    ": image_ids and gaussian_ids must have shape [nnz]");
    STD_TORCH_CHECK(t->scalar_type() == ScalarType::Long, op,
                    ": image_ids and gaussian_ids must be int64");
    check_contiguous(*t, op, t == &image_ids ? "image_ids" : "gaussian_ids");
  }
  check_same_device(image_ids, gaussian_ids, op, "image_ids", "gaussian_ids");
  check_backend<Backend>(image_ids, op);
  const int64_t nnz = image_ids.size(0), n = B * C * N;
  const int64_t F = v_colors.has_value() && v_colors->dim() == 2 ? v_colors->size(1) : 0;
  UnpackArgs a{image_ids.const_data_ptr<int64_t>(),
               gaussian_ids.const_data_ptr<int64_t>(),
               nnz,
               B * C,
               C,
               N,
               F,
               packed_grad(v_means2d, image_ids, 2, op, "v_means2d"),
               packed_grad(v_depths, image_ids, 0, op, "v_depths"),
               packed_grad(v_conics, image_ids, 3, op, "v_conics"),
               packed_grad(v_compensations, image_ids, 0, op, "v_compensations"),
               packed_grad(v_opacities, image_ids, 0, op, "v_opacities"),
               packed_grad(v_colors, image_ids, -1, op, "v_colors"),
               nullptr,
               nullptr,
               nullptr,
               nullptr,
               nullptr,
               nullptr};
  // Dense gradients: zeros where a packed one is given, [0] where it is absent.
  // (An empty tensor's data pointer may be null: presence is the optional's.)
  auto dense = [&](const std::optional<Tensor>& given, std::initializer_list<int64_t> leading,
                   std::initializer_list<int64_t> trailing, float** out) {
    if (!given.has_value()) return torch::stable::new_empty(image_ids, {0}, ScalarType::Float);
    std::vector<int64_t> shape(leading);
    shape.insert(shape.end(), trailing);
    Tensor t = prebuild::new_zeros(image_ids, shape, ScalarType::Float);
    *out = t.mutable_data_ptr<float>();
    return t;
  };
  Tensor d_means2d = dense(v_means2d, {B, C, N}, {2}, &a.d_means2d);
  Tensor d_depths = dense(v_depths, {B, C, N}, {}, &a.d_depths);
  Tensor d_conics = dense(v_conics, {B, C, N}, {3}, &a.d_conics);
  Tensor d_compensations = dense(v_compensations, {B, C, N}, {}, &a.d_compensations);
  Tensor d_opacities = dense(v_opacities, {B, N}, {}, &a.d_opacities);
  Tensor d_colors = dense(v_colors, {B, N}, {F}, &a.d_colors);
  if (nnz > 0 && n > 0) Backend::unpack(a, image_ids);
  return {d_means2d, d_depths, d_conics, d_compensations, d_opacities, d_colors};
}

// Registers the backend's implementations: STABLE_TORCH_LIBRARY_IMPL(ns, KEY, m) {
// register_ops<Backend>(m); }.
template <typename Backend, typename Library>
void register_ops(Library& m) {
  m.impl(kForward, TORCH_BOX(&forward_op<Backend>));
  m.impl(kBackward, TORCH_BOX(&backward_op<Backend>));
}

// The scan and total of the CPU and simt backends: on the host.
struct HostScan : OnCpu {
  static void scan(Tensor& cum, int64_t n, const Tensor&) {
    inclusive_scan_host(cum.mutable_data_ptr<int64_t>(), n);
  }
  static int64_t total(const Tensor& cum, int64_t n, const Tensor&) {
    return cum.const_data_ptr<int64_t>()[n - 1];
  }
};

}  // namespace pack
}  // namespace gsplat
}  // namespace prebuild
