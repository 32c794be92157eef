// Block bodies of rasterize_to_pixels (forward and backward), written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and by the C++ compiler into the
// simt test library. Per-pixel math: rasterize_math.h.
//
// One block of tile_size x tile_size threads per (camera, tile): grid = (C, tiles_y,
// tiles_x), as gsplat. The block walks its tile's depth-sorted run of flatten_ids in
// batches: each thread loads one Gaussian of the batch into shared memory, a barrier, then
// every thread composites its own pixel with the whole batch. The forward stops at the
// barrier where every pixel of the tile is done (ctx.sync_count); the backward walks the run
// back to front, skipping batches behind every pixel's last composited Gaussian.
//
// Channels: a thread keeps kChunk accumulators in registers, so a launch handles the
// channels [c0, c0 + nc) with nc <= kChunk (a compile-time bucket: 1, 2, 3, 4, 8, 16, 32);
// more channels take more launches (rasterize.h), so any D >= 1 works. The compositing decisions do not depend on the channels, so every
// chunk makes the same ones; the first chunk writes render_alphas and last_ids, and in the
// backward adds the render_alphas term. The other terms of dL/dalpha are sums over
// channels, so each chunk adds its own part of the geometry gradients.
#pragma once

#include <stdint.h>

#include <prebuild/simt.h>
#include "rasterize_math.h"

namespace prebuild {
namespace gsplat {

constexpr int kMaxBatch = 256;  // Gaussians per shared-memory batch (at most one per thread)
// Channels per launch. The kernels are compiled for up to 1024 threads per block (64
// registers a thread); the backward keeps two arrays of kChunk floats per thread, and 32 of
// them spilled 268 bytes a thread, 16 spill 32 (ptxas -v, sm_80), 8 and fewer none.
constexpr int kMaxForwardChunk = 32;
constexpr int kMaxBackwardChunk = 16;
constexpr int kMaxGridYZ = 65535;
constexpr int kMaxBlockThreads = 1024;

// Sizes shared by the forward and backward arguments.
struct RasterShape {
  int64_t C, N, D;            // cameras, Gaussians per camera, channels
  int width, height, tile_size, tiles_x, tiles_y;
  int64_t n_isects;           // length of flatten_ids
  int c0, nc;                 // this launch's channel chunk
};

struct ForwardArgs {
  const float* means2d;      // [C, N, 2]
  const float* conics;       // [C, N, 3]
  const float* colors;       // [C, N, D]
  const float* opacities;    // [C, N]
  const float* backgrounds;  // [C, D] or nullptr
  const int32_t* isect_offsets;  // [C, tiles_y, tiles_x]
  const int32_t* flatten_ids;    // [n_isects]
  RasterShape s;
  float* render_colors;  // [C, H, W, D]
  float* render_alphas;  // [C, H, W, 1]
  int32_t* last_ids;     // [C, H, W]: index into flatten_ids of the last composited, or -1
};

struct BackwardArgs {
  const float* means2d;
  const float* conics;
  const float* colors;
  const float* opacities;
  const float* backgrounds;
  const int32_t* isect_offsets;
  const int32_t* flatten_ids;
  const float* render_alphas;    // [C, H, W, 1] from the forward
  const int32_t* last_ids;       // [C, H, W] from the forward
  const float* v_render_colors;  // [C, H, W, D]
  const float* v_render_alphas;  // [C, H, W, 1]
  RasterShape s;
  float* v_means2d;    // [C, N, 2], zero-initialised, accumulated with atomics
  float* v_conics;     // [C, N, 3]
  float* v_colors;     // [C, N, D]
  float* v_opacities;  // [C, N]
};

// A batch of Gaussians staged in shared memory.
struct SplatBatch {
  int32_t ids[kMaxBatch];  // flat index camera * N + id; -1 for an invalid flatten id
  Splat splats[kMaxBatch];
};

template <int kChunk>
struct BackwardShared {
  SplatBatch batch;
  float colors[kMaxBatch][kChunk];
};

// Where the calling thread works: its camera, tile, pixel and rank in the block.
struct TileThread {
  int camera, px, py, rank, threads, batch;
  bool inside;
  int64_t pixel;  // camera * H * W + py * W + px (only meaningful when inside)
  int64_t range_start, range_end;
};

template <typename Ctx>
PREBUILD_SIMT_BODY TileThread tile_thread(const Ctx& ctx, const RasterShape& s,
                                          const int32_t* isect_offsets) {
  const simt::Index3 b = ctx.block(), t = ctx.thread(), bd = ctx.block_dim();
  TileThread w;
  w.camera = b.x;
  w.py = b.y * s.tile_size + t.y;
  w.px = b.z * s.tile_size + t.x;
  w.rank = t.y * bd.x + t.x;
  w.threads = bd.x * bd.y;
  w.batch = w.threads < kMaxBatch ? w.threads : kMaxBatch;
  w.inside = w.py < s.height && w.px < s.width;
  w.pixel = (static_cast<int64_t>(w.camera) * s.height + w.py) * s.width + w.px;
  const int64_t n_tiles = s.C * s.tiles_y * s.tiles_x;
  const int64_t flat_tile = (static_cast<int64_t>(w.camera) * s.tiles_y + b.y) * s.tiles_x + b.z;
  tile_range(isect_offsets, flat_tile, n_tiles, s.n_isects, &w.range_start, &w.range_end);
  return w;
}

// Stages entry `idx` of flatten_ids in slot `slot` of the batch. An out-of-range flatten id
// becomes an invisible Gaussian (opacity 0, always skipped) instead of a wild read.
PREBUILD_SIMT_BODY void stage_splat(SplatBatch& sb, int slot, const int32_t* flatten_ids,
                                    int64_t idx, int64_t n_splats, const float* means2d,
                                    const float* conics, const float* opacities) {
  const int32_t g = flatten_ids[idx];
  if (g >= 0 && g < n_splats) {
    sb.ids[slot] = g;
    sb.splats[slot] = load_splat(means2d, conics, opacities, g);
  } else {
    sb.ids[slot] = -1;
    sb.splats[slot] = Splat{0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  }
}

template <int kChunk, typename Ctx>
PREBUILD_SIMT_BODY void forward_block(const Ctx& ctx, SplatBatch& sh, const ForwardArgs& a) {
  const RasterShape& s = a.s;
  const TileThread w = tile_thread(ctx, s, a.isect_offsets);
  const float px = pixel_centre(w.px), py = pixel_centre(w.py);

  float T = 1.f;
  int64_t last = -1;
  float acc[kChunk];
#pragma unroll
  for (int k = 0; k < kChunk; ++k) acc[k] = 0.f;
  bool done = !w.inside;

  for (int64_t start = w.range_start; start < w.range_end; start += w.batch) {
    // Also the barrier that keeps this batch's writes after the last batch's reads.
    if (ctx.sync_count(done) == w.threads) break;
    const int64_t idx = start + w.rank;
    if (w.rank < w.batch && idx < w.range_end) {
      stage_splat(sh, w.rank, a.flatten_ids, idx, s.C * s.N, a.means2d, a.conics, a.opacities);
    }
    ctx.sync();
    const int64_t left = w.range_end - start;
    const int n = left < w.batch ? static_cast<int>(left) : w.batch;
    for (int t = 0; t < n && !done; ++t) {
      SplatHit h;
      if (!evaluate_splat(sh.splats[t], px, py, &h)) continue;
      float weight;
      if (!composite_step(h.alpha, &T, &weight)) {
        done = true;
        break;
      }
      const float* color = a.colors + static_cast<int64_t>(sh.ids[t]) * s.D + s.c0;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (k < s.nc) acc[k] += color[k] * weight;
      }
      last = start + t;
    }
  }

  if (w.inside) {
    float* out = a.render_colors + w.pixel * s.D + s.c0;
    const float* bg = a.backgrounds ? a.backgrounds + w.camera * s.D + s.c0 : nullptr;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (k < s.nc) out[k] = bg ? acc[k] + T * bg[k] : acc[k];
    }
    if (s.c0 == 0) {
      a.render_alphas[w.pixel] = 1.f - T;
      a.last_ids[w.pixel] = static_cast<int32_t>(last);
    }
  }
}

template <int kChunk, typename Ctx>
PREBUILD_SIMT_BODY void backward_block(const Ctx& ctx, BackwardShared<kChunk>& sh,
                                       const BackwardArgs& a) {
  const RasterShape& s = a.s;
  const TileThread w = tile_thread(ctx, s, a.isect_offsets);
  const float px = pixel_centre(w.px), py = pixel_centre(w.py);

  const float T_final = w.inside ? 1.f - a.render_alphas[w.pixel] : 1.f;
  float T = T_final;
  const int64_t last = w.inside ? a.last_ids[w.pixel] : -1;
  float v_color[kChunk], behind[kChunk];
  float bg_dot = 0.f;
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    v_color[k] = (w.inside && k < s.nc) ? a.v_render_colors[w.pixel * s.D + s.c0 + k] : 0.f;
    behind[k] = 0.f;
    if (a.backgrounds && k < s.nc) bg_dot += a.backgrounds[w.camera * s.D + s.c0 + k] * v_color[k];
  }
  const float v_alpha_out = (w.inside && s.c0 == 0) ? a.v_render_alphas[w.pixel] : 0.f;

  for (int64_t end = w.range_end; end > w.range_start; end -= w.batch) {
    const int64_t lo = end - w.batch > w.range_start ? end - w.batch : w.range_start;
    // Skip batches behind every pixel's last Gaussian (uniform: every thread sees the same
    // count). Also the barrier between the last batch's reads and this batch's writes.
    if (ctx.sync_count(last >= lo) == 0) continue;
    const int64_t idx = end - 1 - w.rank;  // slot 0: the back-most Gaussian of the batch
    if (w.rank < w.batch && idx >= lo) {
      stage_splat(sh.batch, w.rank, a.flatten_ids, idx, s.C * s.N, a.means2d, a.conics,
                  a.opacities);
      const int32_t g = sh.batch.ids[w.rank];
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        sh.colors[w.rank][k] = (g >= 0 && k < s.nc) ? a.colors[g * s.D + s.c0 + k] : 0.f;
      }
    }
    ctx.sync();
    const int n = static_cast<int>(end - lo);
    // Slots of Gaussians behind this pixel's last one are skipped.
    const int64_t first = end - 1 - last;
    for (int t = first > 0 ? static_cast<int>(first) : 0; t < n; ++t) {
      const Splat sp = sh.batch.splats[t];
      SplatHit h;
      if (!evaluate_splat(sp, px, py, &h)) continue;
      const float ra = uncomposite_step(h.alpha, &T);
      const float weight = h.alpha * T;
      float v_alpha = alpha_vjp_pixel(T_final, ra, v_alpha_out, bg_dot);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (k < s.nc) v_alpha += alpha_vjp_channel(sh.colors[t][k], behind[k], v_color[k], T, ra);
      }
      const SplatGrad gr = splat_vjp(sp, h, v_alpha);
      const int64_t g = sh.batch.ids[t];
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (k < s.nc) {
          ctx.atomic_add(a.v_colors + g * s.D + s.c0 + k, weight * v_color[k]);
          behind[k] += sh.colors[t][k] * weight;
        }
      }
      ctx.atomic_add(a.v_means2d + 2 * g, gr.x);
      ctx.atomic_add(a.v_means2d + 2 * g + 1, gr.y);
      ctx.atomic_add(a.v_conics + 3 * g, gr.a);
      ctx.atomic_add(a.v_conics + 3 * g + 1, gr.b);
      ctx.atomic_add(a.v_conics + 3 * g + 2, gr.c);
      ctx.atomic_add(a.v_opacities + g, gr.opacity);
    }
  }
}

}  // namespace gsplat
}  // namespace prebuild
