// Host-side pieces of rasterize_to_pixels shared by its backends (CPU, CUDA, simt).
//
//   rasterize_to_pixels_forward(means2d, conics, colors, opacities, backgrounds [I,D]?,
//       image_width, image_height, tile_size, isect_offsets [I,tiles_y,tiles_x] int32,
//       flatten_ids [M] int32, masks [I,tiles_y,tiles_x] bool?, absgrad)
//     -> (render_colors [I,H,W,D], render_alphas [I,H,W,1], last_ids [I,H,W] int32)
//   The per-Gaussian inputs are dense, means2d [I,N,2], conics [I,N,3], colors [I,N,D],
//   opacities [I,N], or packed, [nnz,2], [nnz,3], [nnz,D], [nnz]: flatten_ids index them as
//   one flat list either way. I (images) comes from isect_offsets.
//   last_ids: per pixel, the index into flatten_ids of the last Gaussian composited (-1: none).
//   A tile whose mask is false renders the background with alpha 0 and gets no gradients.
//   absgrad is not used by the forward: the autograd formula passes it to the backward.
//   rasterize_to_pixels_backward(<the forward's inputs but absgrad>, render_alphas, last_ids,
//       v_render_colors [I,H,W,D], v_render_alphas [I,H,W,1]? (None: zeros), absgrad)
//     -> (v_means2d, v_conics, v_colors, v_opacities, v_means2d_abs)
//   v_means2d_abs (absgrad): like means2d, the sum over pixels of the absolute value of each
//   pixel's contribution to v_means2d (gsplat's means2d.absgrad); [0] without absgrad.
//   (the background's gradient, sum over pixels of (1 - alpha) v_render_colors, is a plain
//   reduction done by the Python autograd formula, as gsplat does).
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>

#include <prebuild/checks.h>
#include <prebuild/zeros.h>
#include "rasterize_kernels.h"

namespace prebuild {
namespace gsplat {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

inline void check_int32(const Tensor& t, const char* op, const char* name) {
  STD_TORCH_CHECK(t.scalar_type() == torch::headeronly::ScalarType::Int, op, ": ", name,
                  " must be int32");
}

inline void check_sizes(const Tensor& t, std::initializer_list<int64_t> sizes, const char* op,
                        const char* name, const char* shape) {
  bool ok = t.dim() == static_cast<int64_t>(sizes.size());
  int64_t d = 0;
  for (int64_t s : sizes) ok = ok && t.size(d++) == s;
  STD_TORCH_CHECK(ok, op, ": ", name, " must have shape ", shape);
}

// t has means2d's leading dimensions ([I, N] or [nnz]), then `last` (none when last < 0).
inline void check_rows(const Tensor& t, const Tensor& means2d, int64_t last, const char* op,
                       const char* name, const char* shape) {
  const int64_t lead = means2d.dim() - 1;
  bool ok = t.dim() == lead + (last < 0 ? 0 : 1);
  for (int64_t d = 0; ok && d < lead; ++d) ok = t.size(d) == means2d.size(d);
  if (ok && last >= 0) ok = t.size(lead) == last;
  STD_TORCH_CHECK(ok, op, ": ", name, " must have shape ", shape);
}

inline void check_tensor(const Tensor& t, const Tensor& ref, ScalarType dtype, const char* op,
                         const char* name) {
  check_same_device(t, ref, op, name, "means2d");
  if (dtype == ScalarType::Float) {
    check_float32(t, op, name);
  } else if (dtype == ScalarType::Int) {
    check_int32(t, op, name);
  } else {
    STD_TORCH_CHECK(t.scalar_type() == ScalarType::Bool, op, ": ", name, " must be bool");
  }
  check_contiguous(t, op, name);
}

// Validates the forward's inputs (also the backward's) and returns the shape of the problem.
inline RasterShape check_forward_inputs(const Tensor& means2d, const Tensor& conics,
                                        const Tensor& colors, const Tensor& opacities,
                                        const std::optional<Tensor>& backgrounds,
                                        int64_t image_width, int64_t image_height,
                                        int64_t tile_size, const Tensor& isect_offsets,
                                        const Tensor& flatten_ids,
                                        const std::optional<Tensor>& masks, const char* op) {
  STD_TORCH_CHECK(tile_size >= 1, op, ": tile_size must be positive, got ", tile_size);
  STD_TORCH_CHECK(image_width >= 1 && image_height >= 1, op,
                  ": image_width and image_height must be positive");
  STD_TORCH_CHECK(image_width < (int64_t{1} << 30) && image_height < (int64_t{1} << 30), op,
                  ": image_width and image_height must be below 2^30");
  const int64_t tiles_y = (image_height + tile_size - 1) / tile_size;
  const int64_t tiles_x = (image_width + tile_size - 1) / tile_size;
  STD_TORCH_CHECK(isect_offsets.dim() == 3 && isect_offsets.size(1) == tiles_y &&
                      isect_offsets.size(2) == tiles_x,
                  op, ": tile_size does not match the tile grid of isect_offsets (expected "
                  "shape [I, ceil(H / tile_size), ceil(W / tile_size)] = [I, ", tiles_y, ", ",
                  tiles_x, "])");
  const int64_t I = isect_offsets.size(0);
  const bool packed = means2d.dim() == 2;
  STD_TORCH_CHECK((means2d.dim() == 3 || packed) && means2d.size(means2d.dim() - 1) == 2, op,
                  ": means2d must have shape [I, N, 2] or [nnz, 2] (packed)");
  STD_TORCH_CHECK(packed || means2d.size(0) == I, op, ": means2d [I, N, 2] must have I = ", I,
                  " images like isect_offsets, got ", means2d.size(0));
  check_rows(conics, means2d, 3, op, "conics", "[I, N, 3] or [nnz, 3] matching means2d");
  STD_TORCH_CHECK(colors.dim() == means2d.dim(), op,
                  ": colors must have shape [I, N, D] or [nnz, D] matching means2d");
  const int64_t D = colors.size(colors.dim() - 1);
  check_rows(colors, means2d, D, op, "colors", "[I, N, D] or [nnz, D] matching means2d");
  STD_TORCH_CHECK(D >= 1, op, ": colors must have at least one channel (D >= 1)");
  check_rows(opacities, means2d, -1, op, "opacities", "[I, N] or [nnz] matching means2d");
  STD_TORCH_CHECK(flatten_ids.dim() == 1, op, ": flatten_ids must be 1-D");
  const int64_t n_gaussians = opacities.numel();
  STD_TORCH_CHECK(n_gaussians < (int64_t{1} << 31), op,
                  ": the number of Gaussians (I * N, or nnz) must fit in int32 (flatten_ids)");
  STD_TORCH_CHECK(flatten_ids.size(0) < (int64_t{1} << 31), op,
                  ": flatten_ids must have fewer than 2^31 entries");
  check_tensor(means2d, means2d, ScalarType::Float, op, "means2d");
  check_tensor(conics, means2d, ScalarType::Float, op, "conics");
  check_tensor(colors, means2d, ScalarType::Float, op, "colors");
  check_tensor(opacities, means2d, ScalarType::Float, op, "opacities");
  check_tensor(isect_offsets, means2d, ScalarType::Int, op, "isect_offsets");
  check_tensor(flatten_ids, means2d, ScalarType::Int, op, "flatten_ids");
  if (backgrounds.has_value()) {
    check_sizes(*backgrounds, {I, D}, op, "backgrounds",
                "[I, D] matching isect_offsets and colors");
    check_tensor(*backgrounds, means2d, ScalarType::Float, op, "backgrounds");
  }
  if (masks.has_value()) {
    check_sizes(*masks, {I, tiles_y, tiles_x}, op, "masks",
                "[I, tiles_y, tiles_x] like isect_offsets");
    check_tensor(*masks, means2d, ScalarType::Bool, op, "masks");
  }
  return RasterShape{I, n_gaussians, D, static_cast<int>(image_width),
                     static_cast<int>(image_height), static_cast<int>(tile_size),
                     static_cast<int>(tiles_x), static_cast<int>(tiles_y), flatten_ids.size(0),
                     0, 0};
}

inline void check_backward_inputs(const RasterShape& s, const Tensor& means2d,
                                  const Tensor& render_alphas, const Tensor& last_ids,
                                  const Tensor& v_render_colors,
                                  const std::optional<Tensor>& v_render_alphas, const char* op) {
  const int64_t I = s.n_images, H = s.height, W = s.width;
  check_sizes(render_alphas, {I, H, W, 1}, op, "render_alphas", "[I, H, W, 1]");
  check_sizes(last_ids, {I, H, W}, op, "last_ids", "[I, H, W]");
  check_sizes(v_render_colors, {I, H, W, s.D}, op, "v_render_colors", "[I, H, W, D]");
  check_tensor(render_alphas, means2d, ScalarType::Float, op, "render_alphas");
  check_tensor(last_ids, means2d, ScalarType::Int, op, "last_ids");
  check_tensor(v_render_colors, means2d, ScalarType::Float, op, "v_render_colors");
  if (v_render_alphas.has_value()) {  // None: the loss does not use render_alphas (zeros)
    check_sizes(*v_render_alphas, {I, H, W, 1}, op, "v_render_alphas", "[I, H, W, 1]");
    check_tensor(*v_render_alphas, means2d, ScalarType::Float, op, "v_render_alphas");
  }
}

inline const float* optional_ptr(const std::optional<Tensor>& t) {
  return t.has_value() ? t->const_data_ptr<float>() : nullptr;
}

// The stable ABI has no typed data pointer for bool (checked by check_tensor).
inline const bool* masks_ptr(const std::optional<Tensor>& masks) {
  return masks.has_value() ? static_cast<const bool*>(masks->const_data_ptr()) : nullptr;
}

struct ForwardOutputs {
  Tensor render_colors, render_alphas, last_ids;
  ForwardArgs args;
};

inline ForwardOutputs allocate_forward(const RasterShape& s, const Tensor& means2d,
                                       const Tensor& conics, const Tensor& colors,
                                       const Tensor& opacities,
                                       const std::optional<Tensor>& backgrounds,
                                       const Tensor& isect_offsets, const Tensor& flatten_ids,
                                       const std::optional<Tensor>& masks) {
  const int64_t I = s.n_images, H = s.height, W = s.width;
  Tensor render_colors = torch::stable::new_empty(means2d, {I, H, W, s.D});
  Tensor render_alphas = torch::stable::new_empty(means2d, {I, H, W, 1});
  Tensor last_ids = torch::stable::new_empty(means2d, {I, H, W}, ScalarType::Int);
  ForwardArgs args{means2d.const_data_ptr<float>(),     conics.const_data_ptr<float>(),
                   colors.const_data_ptr<float>(),      opacities.const_data_ptr<float>(),
                   optional_ptr(backgrounds),           masks_ptr(masks),
                   isect_offsets.const_data_ptr<int32_t>(),
                   flatten_ids.const_data_ptr<int32_t>(), s,
                   render_colors.mutable_data_ptr<float>(),
                   render_alphas.mutable_data_ptr<float>(), last_ids.mutable_data_ptr<int32_t>()};
  return {render_colors, render_alphas, last_ids, args};
}

struct BackwardOutputs {
  Tensor v_means2d, v_conics, v_colors, v_opacities, v_means2d_abs;
  BackwardArgs args;

  std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> tuple() const {
    return {v_means2d, v_conics, v_colors, v_opacities, v_means2d_abs};
  }
};

// Zero-initialised gradients shaped like their inputs (the kernels accumulate into them).
inline BackwardOutputs allocate_backward(const RasterShape& s, const Tensor& means2d,
                                         const Tensor& conics, const Tensor& colors,
                                         const Tensor& opacities,
                                         const std::optional<Tensor>& backgrounds,
                                         const Tensor& isect_offsets, const Tensor& flatten_ids,
                                         const std::optional<Tensor>& masks,
                                         const Tensor& render_alphas, const Tensor& last_ids,
                                         const Tensor& v_render_colors,
                                         const std::optional<Tensor>& v_render_alphas,
                                         bool absgrad) {
  Tensor v_means2d = prebuild::new_zeros(means2d, means2d.sizes());
  Tensor v_conics = prebuild::new_zeros(means2d, conics.sizes());
  Tensor v_colors = prebuild::new_zeros(means2d, colors.sizes());
  Tensor v_opacities = prebuild::new_zeros(means2d, opacities.sizes());
  Tensor v_means2d_abs = absgrad ? prebuild::new_zeros(means2d, means2d.sizes())
                                 : torch::stable::new_empty(means2d, {0});
  BackwardArgs args{means2d.const_data_ptr<float>(),
                    conics.const_data_ptr<float>(),
                    colors.const_data_ptr<float>(),
                    opacities.const_data_ptr<float>(),
                    optional_ptr(backgrounds),
                    masks_ptr(masks),
                    isect_offsets.const_data_ptr<int32_t>(),
                    flatten_ids.const_data_ptr<int32_t>(),
                    render_alphas.const_data_ptr<float>(),
                    last_ids.const_data_ptr<int32_t>(),
                    v_render_colors.const_data_ptr<float>(),
                    optional_ptr(v_render_alphas),
                    s,
                    v_means2d.mutable_data_ptr<float>(),
                    v_conics.mutable_data_ptr<float>(),
                    v_colors.mutable_data_ptr<float>(),
                    v_opacities.mutable_data_ptr<float>(),
                    absgrad ? v_means2d_abs.mutable_data_ptr<float>() : nullptr};
  return {v_means2d, v_conics, v_colors, v_opacities, v_means2d_abs, args};
}

// ---------------------------------------------------------------- CUDA and simt launches

template <int K>
using Chunk = std::integral_constant<int, K>;

// Calls fn(Chunk<K>{}, c0, nc) for consecutive channel chunks [c0, c0 + nc) covering D,
// nc <= kMax, K the smallest bucket holding nc.
template <int kMax, typename Fn>
void for_each_channel_chunk(int64_t D, const Fn& fn) {
  static_assert(kMax == 16 || kMax == 32, "channel buckets: 1, 2, 3, 4, 8, 16, 32");
  for (int64_t c0 = 0; c0 < D; c0 += kMax) {
    const int nc = static_cast<int>(D - c0 < kMax ? D - c0 : kMax);
    const int c = static_cast<int>(c0);
    if (nc <= 1) fn(Chunk<1>{}, c, nc);
    else if (nc <= 2) fn(Chunk<2>{}, c, nc);
    else if (nc <= 3) fn(Chunk<3>{}, c, nc);
    else if (nc <= 4) fn(Chunk<4>{}, c, nc);
    else if (nc <= 8) fn(Chunk<8>{}, c, nc);
    else if (nc <= 16) fn(Chunk<16>{}, c, nc);
    else fn(Chunk<kMax>{}, c, nc);
  }
}

using simt::LaunchGeometry;

// Grid (I, tiles_y, tiles_x) of tile_size x tile_size blocks, as gsplat.
inline LaunchGeometry launch_geometry(const RasterShape& s, const char* op) {
  STD_TORCH_CHECK(int64_t{s.tile_size} * s.tile_size <= kMaxBlockThreads, op,
                  ": tile_size must be at most 32 on this backend (one thread per pixel of a "
                  "tile: tile_size^2 <= 1024), got ", s.tile_size);
  STD_TORCH_CHECK(s.tiles_y <= kMaxGridYZ && s.tiles_x <= kMaxGridYZ, op,
                  ": the image is too large: at most ", kMaxGridYZ, " tiles per axis");
  STD_TORCH_CHECK(s.n_images < (int64_t{1} << 31), op, ": too many images");
  return {{static_cast<int>(s.n_images), s.tiles_y, s.tiles_x}, {s.tile_size, s.tile_size, 1}};
}

// The host side of the CUDA and simt backends: checks, outputs, then per channel chunk
// `launch(Chunk<K>{}, geometry, args)` unless there is nothing to compute.
template <typename OnDevice, typename Launch>
std::tuple<Tensor, Tensor, Tensor> forward_tiled(
    const Tensor& means2d, const Tensor& conics, const Tensor& colors, const Tensor& opacities,
    const std::optional<Tensor>& backgrounds, int64_t image_width, int64_t image_height,
    int64_t tile_size, const Tensor& isect_offsets, const Tensor& flatten_ids,
    const std::optional<Tensor>& masks, const char* op, const char* device,
    const OnDevice& on_device, const Launch& launch) {
  const RasterShape s = check_forward_inputs(means2d, conics, colors, opacities, backgrounds,
                                             image_width, image_height, tile_size,
                                             isect_offsets, flatten_ids, masks, op);
  STD_TORCH_CHECK(on_device(means2d), op, ": this kernel runs on ", device, " tensors");
  const LaunchGeometry g = launch_geometry(s, op);
  ForwardOutputs out = allocate_forward(s, means2d, conics, colors, opacities, backgrounds,
                                        isect_offsets, flatten_ids, masks);
  if (s.n_images > 0) {
    for_each_channel_chunk<kMaxForwardChunk>(s.D, [&](auto chunk, int c0, int nc) {
      ForwardArgs args = out.args;
      args.s.c0 = c0;
      args.s.nc = nc;
      launch(chunk, g, args);
    });
  }
  return {out.render_colors, out.render_alphas, out.last_ids};
}

template <typename OnDevice, typename Launch>
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> backward_tiled(
    const Tensor& means2d, const Tensor& conics, const Tensor& colors, const Tensor& opacities,
    const std::optional<Tensor>& backgrounds, int64_t image_width, int64_t image_height,
    int64_t tile_size, const Tensor& isect_offsets, const Tensor& flatten_ids,
    const std::optional<Tensor>& masks, const Tensor& render_alphas, const Tensor& last_ids,
    const Tensor& v_render_colors, const std::optional<Tensor>& v_render_alphas, bool absgrad,
    const char* op, const char* device, const OnDevice& on_device, const Launch& launch) {
  const RasterShape s = check_forward_inputs(means2d, conics, colors, opacities, backgrounds,
                                             image_width, image_height, tile_size,
                                             isect_offsets, flatten_ids, masks, op);
  check_backward_inputs(s, means2d, render_alphas, last_ids, v_render_colors, v_render_alphas,
                        op);
  STD_TORCH_CHECK(on_device(means2d), op, ": this kernel runs on ", device, " tensors");
  const LaunchGeometry g = launch_geometry(s, op);
  BackwardOutputs out = allocate_backward(s, means2d, conics, colors, opacities, backgrounds,
                                          isect_offsets, flatten_ids, masks, render_alphas,
                                          last_ids, v_render_colors, v_render_alphas, absgrad);
  if (s.n_images > 0 && s.n_isects > 0) {
    for_each_channel_chunk<kMaxBackwardChunk>(s.D, [&](auto chunk, int c0, int nc) {
      BackwardArgs args = out.args;
      args.s.c0 = c0;
      args.s.nc = nc;
      launch(chunk, g, args);
    });
  }
  return out.tuple();
}

}  // namespace gsplat
}  // namespace prebuild
