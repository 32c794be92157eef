// rasterize_to_pixels on the CPU: the per-pixel math of the CUDA kernels (rasterize_math.h),
// parallel over tiles with PyTorch's thread pool, kPixels pixels of a tile row at a time.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <prebuild/cpu_isa.h>

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

// One tile: its pixels [x0, x1) x [y0, y1) of image `image`, and its run [start, stop) of
// flatten_ids (empty when masked).
struct Tile {
  int image, x0, y0, x1, y1;
  int64_t start, stop;
};

// Calls fn(tile, splats) for every tile, in parallel, with the tile's Gaussians gathered
// (splats.splat[i] is flatten_ids entry tile.start + i).
// `a`: the forward's or the backward's arguments (the same inputs).
template <typename Args, typename Fn>
void for_each_tile(const Args& a, const Fn& fn) {
  const RasterShape& s = a.s;
  const int64_t per_image = int64_t{s.tiles_y} * s.tiles_x;
  const int64_t n_tiles = s.n_images * per_image;
  torch::stable::parallel_for(0, n_tiles, 1, [&](int64_t begin, int64_t end) {
    TileSplats splats;
    for (int64_t t = begin; t < end; ++t) {
      Tile tile;
      tile.image = static_cast<int>(t / per_image);
      const int ty = static_cast<int>((t % per_image) / s.tiles_x);
      const int tx = static_cast<int>(t % s.tiles_x);
      tile.x0 = tx * s.tile_size;
      tile.y0 = ty * s.tile_size;
      tile.x1 = std::min(tile.x0 + s.tile_size, s.width);
      tile.y1 = std::min(tile.y0 + s.tile_size, s.height);
      tile_range(a.isect_offsets, a.masks, t, n_tiles, s.n_isects, &tile.start, &tile.stop);
      splats.gather(a.means2d, a.conics, a.opacities, a.flatten_ids, tile.start, tile.stop);
      fn(tile, splats);
    }
  });
}

// A tile row is composited kPixels pixels at a time: for each Gaussian, the exponents at all
// of them are computed together (vector code), and only the pixels it can reach (sigma not
// above its skip_sigma) go on, one by one and in order, through the exact per-pixel math.
// Each pixel still sees its Gaussians in its own order with its own early stop, so the
// results are the scalar loop's, bit for bit.
constexpr int kPixels = 16;  // < 32: lane masks are uint32_t

struct Chunk {
  int64_t first_pixel;  // flat index of pixel (image, y, x0)
  int lanes;            // pixels in the chunk (the rest of the kPixels lanes idle)
  float px[kPixels], py;
};

// The lanes (bit t: lane t) that are active and that Gaussian `g` may reach.
PREBUILD_ALWAYS_INLINE uint32_t near_lanes(const Splat& g, float skip, const Chunk& c,
                                           uint32_t active) {
  const float dy = g.y - c.py;
  uint32_t near = 0;
  for (int t = 0; t < kPixels; ++t)
    near |= static_cast<uint32_t>(!(splat_sigma(g, g.x - c.px[t], dy) > skip)) << t;
  return near & active;
}

// Calls fn(t) for each set bit t of `lanes`, in increasing order.
template <typename Fn>
PREBUILD_ALWAYS_INLINE void for_each_lane(uint32_t lanes, const Fn& fn) {
  for (; lanes != 0; lanes &= lanes - 1) fn(__builtin_ctz(lanes));
}

// Calls fn(chunk) for each chunk of each row of the tile.
template <typename Fn>
PREBUILD_ALWAYS_INLINE void for_each_chunk(const RasterShape& s, const Tile& tile, const Fn& fn) {
  for (int y = tile.y0; y < tile.y1; ++y) {
    for (int x0 = tile.x0; x0 < tile.x1; x0 += kPixels) {
      Chunk c;
      c.first_pixel = (int64_t{tile.image} * s.height + y) * s.width + x0;
      c.lanes = std::min(kPixels, tile.x1 - x0);
      c.py = pixel_centre(y);
      for (int t = 0; t < kPixels; ++t) c.px[t] = pixel_centre(x0 + t);
      fn(c);
    }
  }
}

PREBUILD_ALWAYS_INLINE void forward_tile(const ForwardArgs& a, const Tile& tile,
                                         const TileSplats& splats) {
  const RasterShape& s = a.s;
  const float* bg = a.backgrounds ? a.backgrounds + tile.image * s.D : nullptr;
  const int64_t n = tile.stop - tile.start;
  for_each_chunk(s, tile, [&](const Chunk& c) {
    float T[kPixels];
    int64_t last[kPixels];
    uint32_t active = (1u << c.lanes) - 1;  // kPixels < 32
    for (int t = 0; t < kPixels; ++t) {
      T[t] = 1.f;
      last[t] = -1;
    }
    std::fill(a.render_colors + c.first_pixel * s.D,
              a.render_colors + (c.first_pixel + c.lanes) * s.D, 0.f);
    for (int64_t i = 0; i < n && active != 0; ++i) {
      const Splat& g = splats.splat[i];
      const uint32_t near = near_lanes(g, splats.skip[i], c, active);
      for_each_lane(near, [&](int t) {
        SplatHit h;
        if (!evaluate_splat(g, c.px[t], c.py, &h, splats.skip[i])) return;
        float weight;
        if (!composite_step(h.alpha, &T[t], &weight)) {  // this pixel is done
          active &= ~(1u << t);
          return;
        }
        const float* color = a.colors + int64_t{a.flatten_ids[tile.start + i]} * s.D;
        float* color_out = a.render_colors + (c.first_pixel + t) * s.D;
        for (int64_t k = 0; k < s.D; ++k) color_out[k] += color[k] * weight;
        last[t] = tile.start + i;
      });
    }
    for (int t = 0; t < c.lanes; ++t) {
      const int64_t pixel = c.first_pixel + t;
      if (bg) {
        float* color_out = a.render_colors + pixel * s.D;
        for (int64_t k = 0; k < s.D; ++k) color_out[k] += T[t] * bg[k];
      }
      a.render_alphas[pixel] = 1.f - T[t];
      a.last_ids[pixel] = static_cast<int32_t>(last[t]);
    }
  });
}

// The backward's per-entry gradient rows (see backward_cpu).
struct EntryRows {
  float* geo;     // [n_isects, n_geo]: x, y, opacity, a, b, c (then |x|, |y| with absgrad)
  float* color;   // [n_isects, D]
  int64_t n_geo;
  bool absgrad;
};

PREBUILD_ALWAYS_INLINE void backward_tile(const BackwardArgs& a, const EntryRows& rows,
                                          const Tile& tile, const TileSplats& splats) {
  const RasterShape& s = a.s;
  const float* bg = a.backgrounds ? a.backgrounds + tile.image * s.D : nullptr;
  for_each_chunk(s, tile, [&](const Chunk& c) {
    // Per pixel: T_final, its gradients in, behind . v_color so far, the transmittance, and
    // the last entry it composited (relative to tile.start; clamped into the tile's run, so
    // a malformed last_ids cannot leave it).
    float T_final[kPixels], v_alpha_out[kPixels], bg_dot[kPixels], behind_dot[kPixels],
        T[kPixels];
    int64_t i_last[kPixels];
    int64_t i_max = -1;
    for (int t = 0; t < c.lanes; ++t) {
      const int64_t pixel = c.first_pixel + t;
      T_final[t] = 1.f - a.render_alphas[pixel];
      v_alpha_out[t] = a.v_render_alphas ? a.v_render_alphas[pixel] : 0.f;
      bg_dot[t] = bg ? channel_dot(bg, a.v_render_colors + pixel * s.D, s.D) : 0.f;
      behind_dot[t] = 0.f;
      T[t] = T_final[t];
      i_last[t] = std::min<int64_t>(a.last_ids[pixel], tile.stop - 1) - tile.start;
      i_max = std::max(i_max, i_last[t]);
    }
    for (int64_t i = i_max; i >= 0; --i) {
      const Splat& g = splats.splat[i];
      uint32_t active = 0;  // the pixels whose composited run reaches entry i
      for (int t = 0; t < c.lanes; ++t) active |= static_cast<uint32_t>(i <= i_last[t]) << t;
      const uint32_t near = near_lanes(g, splats.skip[i], c, active);
      if (near == 0) continue;
      const int64_t entry = tile.start + i;
      const float* color = a.colors + int64_t{a.flatten_ids[entry]} * s.D;
      float* row = rows.geo + entry * rows.n_geo;
      float* crow = rows.color + entry * s.D;
      for_each_lane(near, [&](int t) {
        SplatHit h;
        if (!evaluate_splat(g, c.px[t], c.py, &h, splats.skip[i])) return;
        const float* v_color = a.v_render_colors + (c.first_pixel + t) * s.D;
        const float ra = uncomposite_step(h.alpha, &T[t]);
        const float weight = h.alpha * T[t];
        const float color_dot = channel_dot(color, v_color, s.D);
        const float v_alpha = alpha_vjp_colors(color_dot, behind_dot[t], T[t], ra) +
                              alpha_vjp_pixel(T_final[t], ra, v_alpha_out[t], bg_dot[t]);
        behind_dot[t] += color_dot * weight;
        const SplatGrad gr = splat_vjp(g, h, v_alpha);
        row[0] += gr.x;
        row[1] += gr.y;
        row[2] += gr.opacity;
        row[3] += gr.a;
        row[4] += gr.b;
        row[5] += gr.c;
        if (rows.absgrad) {
          row[6] += std::fabs(gr.x);
          row[7] += std::fabs(gr.y);
        }
        for (int64_t k = 0; k < s.D; ++k) crow[k] += weight * v_color[k];
      });
    }
  });
}

// The instruction-set copies of the per-tile loops (prebuild/cpu_isa.h).
#define PREBUILD_RASTER_COPIES(COPY, isa)                                                    \
  COPY void forward_tile_##isa(const ForwardArgs& a, const Tile& tile,                      \
                               const TileSplats& splats) {                                   \
    forward_tile(a, tile, splats);                                                           \
  }                                                                                          \
  COPY void backward_tile_##isa(const BackwardArgs& a, const EntryRows& rows, const Tile& tile, \
                                const TileSplats& splats) {                                  \
    backward_tile(a, rows, tile, splats);                                                    \
  }
PREBUILD_CPU_COPIES(PREBUILD_RASTER_COPIES)
#undef PREBUILD_RASTER_COPIES

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
  const auto tile_fn = PREBUILD_PICK_ISA(forward_tile);
  for_each_tile(a, [&](const Tile& tile, const TileSplats& splats) { tile_fn(a, tile, splats); });
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
    Tensor render_alphas, Tensor last_ids, Tensor v_render_colors,
    std::optional<Tensor> v_render_alphas, bool absgrad) {
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
  const int64_t n_geo = absgrad ? 8 : 6;
  Tensor geo_rows = torch::stable::new_zeros(means2d, {s.n_isects, n_geo});
  Tensor color_rows = torch::stable::new_zeros(means2d, {s.n_isects, s.D});
  const EntryRows rows{geo_rows.mutable_data_ptr<float>(), color_rows.mutable_data_ptr<float>(),
                       n_geo, absgrad};
  const auto tile_fn = PREBUILD_PICK_ISA(backward_tile);
  for_each_tile(a, [&](const Tile& tile, const TileSplats& splats) {
    tile_fn(a, rows, tile, splats);
  });

  for (int64_t idx = 0; idx < s.n_isects; ++idx) {
    const int64_t g = a.flatten_ids[idx];
    const float* row = rows.geo + idx * n_geo;
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
    const float* crow = rows.color + idx * s.D;
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
