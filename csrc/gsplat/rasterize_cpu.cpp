// rasterize_to_pixels on the CPU: the per-pixel math of the CUDA kernels (rasterize_math.h),
// parallel over tiles with PyTorch's thread pool. Each pixel walks its tile's run of
// flatten_ids directly (no shared-memory batches).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "rasterize.h"
#include "rasterize_math.h"

namespace prebuild {
namespace gsplat {
namespace {

// The CPU backend can afford to check the index tensors' values: isect_offsets must be
// non-decreasing runs inside flatten_ids (so tiles own disjoint runs, which the backward's
// race-free accumulation relies on) and flatten_ids must index the Gaussians (I * N, or nnz).
void check_index_values(const RasterShape& s, const Tensor& isect_offsets,
                        const Tensor& flatten_ids, const char* op) {
  const int32_t* off = isect_offsets.const_data_ptr<int32_t>();
  const int64_t n_tiles = s.n_images * s.tiles_y * s.tiles_x;
  int64_t prev = 0;
  for (int64_t t = 0; t < n_tiles; ++t) {
    STD_TORCH_CHECK(off[t] >= prev && off[t] <= s.n_isects, op,
                    ": isect_offsets must be non-decreasing offsets into flatten_ids (in [0, ",
                    s.n_isects, "]), got ", off[t], " at flat tile ", t);
    prev = off[t];
  }
  const int32_t* ids = flatten_ids.const_data_ptr<int32_t>();
  for (int64_t i = 0; i < s.n_isects; ++i) {
    STD_TORCH_CHECK(ids[i] >= 0 && ids[i] < s.n_gaussians, op,
                    ": flatten_ids must index the Gaussians, in [0, I * N or nnz) = [0, ",
                    s.n_gaussians, "), got ", ids[i], " at ", i);
  }
}

// A tile's Gaussians gathered once into contiguous memory (what the CUDA kernels stage in
// shared memory), each with its skip_sigma: every pixel of the tile then walks them without
// the gather, and skips the exp of the Gaussians too far from it to count.
struct TileSplats {
  std::vector<Splat> splat;
  std::vector<float> skip;

  void gather(const float* means2d, const float* conics, const float* opacities,
              const int32_t* flatten_ids, int64_t start, int64_t stop) {
    splat.resize(stop - start);
    skip.resize(stop - start);
    for (int64_t i = 0; i < stop - start; ++i) {
      splat[i] = load_splat(means2d, conics, opacities, flatten_ids[start + i]);
      skip[i] = skip_sigma(splat[i].opacity);
    }
  }
};

// Calls fn(image, x0, y0, x1, y1, start, stop, splats) for every tile, in parallel: the
// tile's pixels [x0, x1) x [y0, y1), its run [start, stop) of flatten_ids (empty when
// masked) and that run's Gaussians gathered (splats.splat[i] is entry start + i).
template <typename Fn>
void for_each_tile(const RasterShape& s, const int32_t* offsets, const bool* masks,
                   const float* means2d, const float* conics, const float* opacities,
                   const int32_t* flatten_ids, const Fn& fn) {
  const int64_t per_image = int64_t{s.tiles_y} * s.tiles_x;
  const int64_t n_tiles = s.n_images * per_image;
  torch::stable::parallel_for(0, n_tiles, 1, [&](int64_t begin, int64_t end) {
    TileSplats splats;
    for (int64_t t = begin; t < end; ++t) {
      const int image = static_cast<int>(t / per_image);
      const int ty = static_cast<int>((t % per_image) / s.tiles_x);
      const int tx = static_cast<int>(t % s.tiles_x);
      const int x0 = tx * s.tile_size, y0 = ty * s.tile_size;
      const int x1 = std::min(x0 + s.tile_size, s.width);
      const int y1 = std::min(y0 + s.tile_size, s.height);
      int64_t start, stop;
      tile_range(offsets, masks, t, n_tiles, s.n_isects, &start, &stop);
      splats.gather(means2d, conics, opacities, flatten_ids, start, stop);
      fn(image, x0, y0, x1, y1, start, stop, splats);
    }
  });
}

std::tuple<Tensor, Tensor, Tensor> forward_cpu(Tensor means2d, Tensor conics, Tensor colors,
                                               Tensor opacities,
                                               std::optional<Tensor> backgrounds,
                                               int64_t image_width, int64_t image_height,
                                               int64_t tile_size, Tensor isect_offsets,
                                               Tensor flatten_ids, std::optional<Tensor> masks,
                                               bool /*absgrad: the backward's*/) {
  constexpr const char* op = "prebuild::rasterize_to_pixels_forward";
  const RasterShape s = check_forward_inputs(means2d, conics, colors, opacities, backgrounds,
                                             image_width, image_height, tile_size,
                                             isect_offsets, flatten_ids, masks, op);
  STD_TORCH_CHECK(means2d.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  check_index_values(s, isect_offsets, flatten_ids, op);
  ForwardOutputs out = allocate_forward(s, means2d, conics, colors, opacities, backgrounds,
                                        isect_offsets, flatten_ids, masks);
  const ForwardArgs a = out.args;
  for_each_tile(s, a.isect_offsets, a.masks, a.means2d, a.conics, a.opacities, a.flatten_ids,
                [&](int image, int x0, int y0, int x1, int y1, int64_t start, int64_t stop,
                    const TileSplats& splats) {
    const float* bg = a.backgrounds ? a.backgrounds + image * s.D : nullptr;
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) {
        const int64_t pixel = (int64_t{image} * s.height + y) * s.width + x;
        float* color_out = a.render_colors + pixel * s.D;
        std::fill(color_out, color_out + s.D, 0.f);
        float T = 1.f;
        int64_t last = -1;
        for (int64_t idx = start; idx < stop; ++idx) {
          const int64_t g = a.flatten_ids[idx];
          SplatHit h;
          if (!evaluate_splat(splats.splat[idx - start], pixel_centre(x), pixel_centre(y), &h,
                              splats.skip[idx - start])) {
            continue;
          }
          float weight;
          if (!composite_step(h.alpha, &T, &weight)) break;
          const float* color = a.colors + g * s.D;
          for (int64_t k = 0; k < s.D; ++k) color_out[k] += color[k] * weight;
          last = idx;
        }
        if (bg) {
          for (int64_t k = 0; k < s.D; ++k) color_out[k] += T * bg[k];
        }
        a.render_alphas[pixel] = 1.f - T;
        a.last_ids[pixel] = static_cast<int32_t>(last);
      }
    }
  });
  return {out.render_colors, out.render_alphas, out.last_ids};
}

// Per-Gaussian gradients without races, deterministically: every entry of flatten_ids
// belongs to exactly one tile (check_index_values), so the tile tasks first accumulate each
// entry's gradient into its own row of per-entry buffers (a task only writes the rows of its
// tiles, pixels in a fixed order); then one sequential pass in flatten_ids order adds the
// rows into the per-Gaussian gradients. The result does not depend on the thread count.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> backward_cpu(
    Tensor means2d, Tensor conics, Tensor colors, Tensor opacities,
    std::optional<Tensor> backgrounds, int64_t image_width, int64_t image_height,
    int64_t tile_size, Tensor isect_offsets, Tensor flatten_ids, std::optional<Tensor> masks,
    Tensor render_alphas, Tensor last_ids, Tensor v_render_colors, Tensor v_render_alphas,
    bool absgrad) {
  constexpr const char* op = "prebuild::rasterize_to_pixels_backward";
  const RasterShape s = check_forward_inputs(means2d, conics, colors, opacities, backgrounds,
                                             image_width, image_height, tile_size,
                                             isect_offsets, flatten_ids, masks, op);
  check_backward_inputs(s, means2d, render_alphas, last_ids, v_render_colors, v_render_alphas,
                        op);
  STD_TORCH_CHECK(means2d.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  check_index_values(s, isect_offsets, flatten_ids, op);
  BackwardOutputs out = allocate_backward(s, means2d, conics, colors, opacities, backgrounds,
                                          isect_offsets, flatten_ids, masks, render_alphas,
                                          last_ids, v_render_colors, v_render_alphas, absgrad);
  if (s.n_isects == 0) return out.tuple();
  const BackwardArgs a = out.args;
  // x, y, opacity, a, b, c, then with absgrad |x|, |y| summed over pixels.
  const int64_t n_geo = absgrad ? 8 : 6;
  Tensor geo_rows = torch::stable::new_zeros(means2d, {s.n_isects, n_geo});
  Tensor color_rows = torch::stable::new_zeros(means2d, {s.n_isects, s.D});
  float* geo = geo_rows.mutable_data_ptr<float>();
  float* col = color_rows.mutable_data_ptr<float>();

  for_each_tile(s, a.isect_offsets, a.masks, a.means2d, a.conics, a.opacities, a.flatten_ids,
                [&](int image, int x0, int y0, int x1, int y1, int64_t start, int64_t stop,
                    const TileSplats& splats) {
    const float* bg = a.backgrounds ? a.backgrounds + image * s.D : nullptr;
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) {
        const int64_t pixel = (int64_t{image} * s.height + y) * s.width + x;
        const float T_final = 1.f - a.render_alphas[pixel];
        const float* v_color = a.v_render_colors + pixel * s.D;
        const float v_alpha_out = a.v_render_alphas[pixel];
        const float bg_dot = bg ? channel_dot(bg, v_color, s.D) : 0.f;
        float behind_dot = 0.f;  // behind . v_color (rasterize_math.h)
        float T = T_final;
        // Clamped: a malformed last_ids cannot leave the tile's run.
        for (int64_t idx = std::min<int64_t>(a.last_ids[pixel], stop - 1); idx >= start; --idx) {
          const int64_t g = a.flatten_ids[idx];
          const Splat& sp = splats.splat[idx - start];
          SplatHit h;
          if (!evaluate_splat(sp, pixel_centre(x), pixel_centre(y), &h, splats.skip[idx - start]))
            continue;
          const float ra = uncomposite_step(h.alpha, &T);
          const float weight = h.alpha * T;
          const float* color = a.colors + g * s.D;
          const float color_dot = channel_dot(color, v_color, s.D);
          const float v_alpha = alpha_vjp_colors(color_dot, behind_dot, T, ra) +
                                alpha_vjp_pixel(T_final, ra, v_alpha_out, bg_dot);
          behind_dot += color_dot * weight;
          const SplatGrad gr = splat_vjp(sp, h, v_alpha);
          float* row = geo + idx * n_geo;
          row[0] += gr.x;
          row[1] += gr.y;
          row[2] += gr.opacity;
          row[3] += gr.a;
          row[4] += gr.b;
          row[5] += gr.c;
          if (absgrad) {
            row[6] += std::fabs(gr.x);
            row[7] += std::fabs(gr.y);
          }
          float* crow = col + idx * s.D;
          for (int64_t k = 0; k < s.D; ++k) crow[k] += weight * v_color[k];
        }
      }
    }
  });

  for (int64_t idx = 0; idx < s.n_isects; ++idx) {
    const int64_t g = a.flatten_ids[idx];
    const float* row = geo + idx * n_geo;
    a.v_means2d[2 * g] += row[0];
    a.v_means2d[2 * g + 1] += row[1];
    a.v_opacities[g] += row[2];
    a.v_conics[3 * g] += row[3];
    a.v_conics[3 * g + 1] += row[4];
    a.v_conics[3 * g + 2] += row[5];
    if (absgrad) {
      a.v_means2d_abs[2 * g] += row[6];
      a.v_means2d_abs[2 * g + 1] += row[7];
    }
    const float* crow = col + idx * s.D;
    float* v_col = a.v_colors + g * s.D;
    for (int64_t k = 0; k < s.D; ++k) v_col[k] += crow[k];
  }
  return out.tuple();
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) {
  m.impl("rasterize_to_pixels_forward", TORCH_BOX(&forward_cpu));
  m.impl("rasterize_to_pixels_backward", TORCH_BOX(&backward_cpu));
}

}  // namespace gsplat
}  // namespace prebuild
