// Block bodies of rasterize_to_pixels (forward and backward), written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and by the C++ compiler into the
// simt test library. Per-pixel math: rasterize_math.h.
//
// One block of tile_size x tile_size threads per (image, tile): grid = (I, tiles_y,
// tiles_x), as gsplat. The block walks its tile's depth-sorted run of flatten_ids in
// batches: each thread loads one Gaussian of the batch into shared memory, a barrier, then
// every thread composites its own pixel with the whole batch. The forward stops at the
// barrier where every pixel of the tile is done (ctx.sync_count); the backward walks the run
// back to front, skipping batches behind every pixel's last composited Gaussian. In the
// backward the lanes of a warp take the same steps (a lane whose pixel does not composite
// the Gaussian adds zeros) and sum each gradient across the warp, so one lane adds it to
// global memory: one atomic per warp instead of 32 on one address (as gsplat); the sums are
// spread over the lanes (simt::warp_scatter_sums), so one atomic instruction adds them all.
// flatten_ids index the per-Gaussian arrays as one flat list (image * N + id, or the packed
// index), so dense and packed inputs run the same code.
//
// Channels: a thread keeps kChunk accumulators in registers, so a launch handles the
// channels [c0, c0 + nc) with nc <= kChunk (a compile-time bucket: 1, 2, 3, 4, 8, 16, 32);
// more channels take more launches (rasterize.h), so any D >= 1 works. The compositing
// decisions do not depend on the channels, so every chunk makes the same ones; the first
// chunk writes render_alphas and last_ids. In the backward every launch adds its channels'
// colour gradients, and the first one also the geometry gradients (means2d, conics,
// opacities, absgrad): their dL/dalpha needs colour . v_color over all D channels, which it
// completes from global memory past its chunk, so each pixel's contribution is whole.
#pragma once

#include <stdint.h>

#include <prebuild/simt.h>
#include "rasterize_math.h"

namespace prebuild {
namespace gsplat {

constexpr int kMaxBatch = 256;  // Gaussians per shared-memory batch (at most one per thread)
// Channels per launch. The kernels are compiled for up to 1024 threads per block (64
// registers a thread); the backward holds up to 4 channels of v_color per thread in
// registers and reads wider chunks from memory at each step (ptxas -v, sm_75 to sm_120: no
// spills).
constexpr int kMaxForwardChunk = 32;
constexpr int kMaxBackwardChunk = 16;
constexpr int kMaxGridYZ = 65535;
constexpr int kMaxBlockThreads = 1024;

// Sizes shared by the forward and backward arguments.
struct RasterShape {
  int64_t n_images, n_gaussians, D;  // I; rows of the per-Gaussian arrays (I * N or nnz); channels
  int width, height, tile_size, tiles_x, tiles_y;
  int64_t n_isects;           // length of flatten_ids
  int c0, nc;                 // this launch's channel chunk
};

struct ForwardArgs {
  const float* means2d;      // [n_gaussians, 2] ([I, N, 2] or [nnz, 2])
  const float* conics;       // [n_gaussians, 3]
  const float* colors;       // [n_gaussians, D]
  const float* opacities;    // [n_gaussians]
  const float* backgrounds;  // [I, D] or nullptr
  const bool* masks;         // [I, tiles_y, tiles_x] or nullptr
  const int32_t* isect_offsets;  // [I, tiles_y, tiles_x]
  const int32_t* flatten_ids;    // [n_isects]
  RasterShape s;
  float* render_colors;  // [I, H, W, D]
  float* render_alphas;  // [I, H, W, 1]
  int32_t* last_ids;     // [I, H, W]: index into flatten_ids of the last composited, or -1
};

struct BackwardArgs {
  const float* means2d;
  const float* conics;
  const float* colors;
  const float* opacities;
  const float* backgrounds;
  const bool* masks;
  const int32_t* isect_offsets;
  const int32_t* flatten_ids;
  const float* render_alphas;    // [I, H, W, 1] from the forward
  const int32_t* last_ids;       // [I, H, W] from the forward
  const float* v_render_colors;  // [I, H, W, D]
  const float* v_render_alphas;  // [I, H, W, 1], or nullptr: zeros
  RasterShape s;
  float* v_means2d;      // [n_gaussians, 2], zero-initialised, accumulated with atomics
  float* v_conics;       // [n_gaussians, 3]
  float* v_colors;       // [n_gaussians, D]
  float* v_opacities;    // [n_gaussians]
  float* v_means2d_abs;  // [n_gaussians, 2]: sum over pixels of |d pixel / d means2d|, or nullptr
};

// A batch of Gaussians staged in shared memory.
struct SplatBatch {
  int32_t ids[kMaxBatch];  // flat Gaussian index; -1 for an invalid flatten id
  Splat splats[kMaxBatch];
};

template <int kChunk>
struct BackwardShared {
  SplatBatch batch;
  float colors[kMaxBatch][kChunk];
};

// Whether channel k < kChunk of this launch's chunk is one of its s.nc channels. The buckets up
// to 4 are always full (for_each_channel_chunk: nc == kChunk), so there it is known at compile
// time and the channel loops carry no guard (SASS, sm_90: 14 of the forward step's 66
// instructions were the guards' and their selects).
template <int kChunk>
PREBUILD_SIMT_BODY bool in_chunk(const RasterShape& s, int k) {
  return kChunk <= 4 || k < s.nc;
}

// Where the calling thread works: its image, tile, pixel and rank in the block.
struct TileThread {
  int image, px, py, rank, threads, batch;
  bool inside;
  int64_t pixel;  // image * H * W + py * W + px (only meaningful when inside)
  int32_t range_start, range_end;  // entries of flatten_ids: below 2^31 (rasterize.h)
};

template <typename Ctx>
PREBUILD_SIMT_BODY TileThread tile_thread(const Ctx& ctx, const RasterShape& s,
                                          const int32_t* isect_offsets, const bool* masks) {
  const simt::Index3 b = ctx.block(), t = ctx.thread(), bd = ctx.block_dim();
  TileThread w;
  w.image = b.x;
  w.py = b.y * s.tile_size + t.y;
  w.px = b.z * s.tile_size + t.x;
  w.rank = t.y * bd.x + t.x;
  w.threads = bd.x * bd.y;
  w.batch = w.threads < kMaxBatch ? w.threads : kMaxBatch;
  w.inside = w.py < s.height && w.px < s.width;
  w.pixel = (static_cast<int64_t>(w.image) * s.height + w.py) * s.width + w.px;
  const int64_t n_tiles = s.n_images * s.tiles_y * s.tiles_x;
  const int64_t flat_tile = (static_cast<int64_t>(w.image) * s.tiles_y + b.y) * s.tiles_x + b.z;
  int64_t start, end;
  tile_range(isect_offsets, masks, flat_tile, n_tiles, s.n_isects, &start, &end);
  w.range_start = static_cast<int32_t>(start);
  w.range_end = static_cast<int32_t>(end);
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
  const TileThread w = tile_thread(ctx, s, a.isect_offsets, a.masks);
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
      stage_splat(sh, w.rank, a.flatten_ids, idx, s.n_gaussians, a.means2d, a.conics,
                  a.opacities);
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
        if (in_chunk<kChunk>(s, k)) acc[k] += color[k] * weight;
      }
      last = start + t;
    }
  }

  if (w.inside) {
    float* out = a.render_colors + w.pixel * s.D + s.c0;
    const float* bg = a.backgrounds ? a.backgrounds + w.image * s.D + s.c0 : nullptr;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (in_chunk<kChunk>(s, k)) out[k] = bg ? acc[k] + T * bg[k] : acc[k];
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
  const TileThread w = tile_thread(ctx, s, a.isect_offsets, a.masks);
  const float px = pixel_centre(w.px), py = pixel_centre(w.py);
  const bool geometry = s.c0 == 0;  // this launch adds the geometry gradients (see top)
  const bool lead = ctx.lane() == 0;  // adds its warp's sums to global memory

  const float T_final = w.inside ? 1.f - a.render_alphas[w.pixel] : 1.f;
  float T = T_final;
  // Entries of flatten_ids (< 2^31, rasterize.h): 32-bit.
  const int32_t last = w.inside ? a.last_ids[w.pixel] : -1;
  // The lanes of a warp walk each batch together from the warp's back-most last Gaussian.
  const int32_t warp_last = ctx.warp_max(last);
  const float* v_pixel = a.v_render_colors + w.pixel * s.D;  // read only when inside
  // This chunk's v_color, in registers up to 4 channels; 8 spill on sm_86/89 and 16 on every
  // arch (ptxas), so wider chunks read them at each step (L1 hits).
  constexpr bool kHeld = kChunk <= 4;
  float held[kHeld ? kChunk : 1];
#pragma unroll
  for (int k = 0; k < (kHeld ? kChunk : 0); ++k) {
    held[k] = (w.inside && in_chunk<kChunk>(s, k)) ? v_pixel[s.c0 + k] : 0.f;
  }
  auto v_color = [&](int k) { return kHeld ? held[k] : v_pixel[s.c0 + k]; };
  float v_alpha_out = 0.f, bg_dot = 0.f;
  if (geometry && w.inside) {
    v_alpha_out = a.v_render_alphas ? a.v_render_alphas[w.pixel] : 0.f;
    if (a.backgrounds) bg_dot = channel_dot(a.backgrounds + w.image * s.D, v_pixel, s.D);
  }
  float behind_dot = 0.f;  // behind . v_color (rasterize_math.h)

  for (int end = w.range_end; end > w.range_start; end -= w.batch) {
    const int lo = end - w.batch > w.range_start ? end - w.batch : w.range_start;
    // Skip batches behind every pixel's last Gaussian (uniform: every thread sees the same
    // count). Also the barrier between the last batch's reads and this batch's writes.
    if (ctx.sync_count(last >= lo) == 0) continue;
    const int idx = end - 1 - w.rank;  // slot 0: the back-most Gaussian of the batch
    if (w.rank < w.batch && idx >= lo) {
      stage_splat(sh.batch, w.rank, a.flatten_ids, idx, s.n_gaussians, a.means2d, a.conics,
                  a.opacities);
      const int32_t g = sh.batch.ids[w.rank];
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        sh.colors[w.rank][k] = (g >= 0 && in_chunk<kChunk>(s, k)) ? a.colors[g * s.D + s.c0 + k] : 0.f;
      }
    }
    ctx.sync();
    const int n = end - lo;
    // Slot t holds entry end - 1 - t: behind this pixel's last Gaussian when t < first.
    const int first = end - 1 - last;
    const int warp_first = end - 1 - warp_last;
    // Warp-uniform: every lane takes every step, a lane whose pixel does not composite the
    // Gaussian adds zeros, and the warp's sums are added once, by its lead lane.
    for (int t = warp_first > 0 ? warp_first : 0; t < n; ++t) {
      const Splat sp = sh.batch.splats[t];
      SplatHit h;
      const bool valid = t >= first && evaluate_splat(sp, px, py, &h);
      if (!ctx.warp_any(valid)) continue;
      float ra = 0.f, weight = 0.f;
      if (valid) {
        ra = uncomposite_step(h.alpha, &T);
        weight = h.alpha * T;
      }
      const int64_t g = sh.batch.ids[t];  // >= 0: an invalid id's Gaussian is never valid
      // The warp sums the lanes' gradients, then adds them to global memory. The geometry's
      // six sums and up to 4 colour channels' go through the warp together (spread over the
      // lanes: simt::warp_scatter_sums); wider chunks' channels four at a time after them
      // (more sums in flight spill registers: ptxas, kChunk = 16), added by the lead lane.
      constexpr int kFirst = kChunk <= 4 ? kChunk : 0;  // channels summed with the geometry
      float sums[kFirst + 6];
#pragma unroll
      for (int k = 0; k < kFirst; ++k) {
        sums[k] = (valid && in_chunk<kChunk>(s, k)) ? weight * v_color(k) : 0.f;
      }
      SplatGrad gr{0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (geometry && valid) {
        float color_dot = 0.f;
#pragma unroll
        for (int k = 0; k < kChunk; ++k) {
          if (in_chunk<kChunk>(s, k)) color_dot += sh.colors[t][k] * v_color(k);
        }
        // The channels past this chunk, from global memory: only a launch of the widest
        // bucket can have them (D > kMaxBackwardChunk); narrower ones skip the loop's setup.
        if (kChunk == kMaxBackwardChunk) {
          color_dot += channel_dot(a.colors + g * s.D + s.nc, v_pixel + s.nc, s.D - s.nc);
        }
        const float v_alpha = alpha_vjp_colors(color_dot, behind_dot, T, ra) +
                              alpha_vjp_pixel(T_final, ra, v_alpha_out, bg_dot);
        behind_dot += color_dot * weight;
        gr = splat_vjp(sp, h, v_alpha);
      }
      float* const v_color_out = a.v_colors + g * s.D + s.c0;
      if (geometry) {
        // Each pixel's |contribution|, summed: not the |sum|.
        float abs_xy[2] = {fabsf(gr.x), fabsf(gr.y)};
        sums[kFirst] = gr.x;
        sums[kFirst + 1] = gr.y;
        sums[kFirst + 2] = gr.a;
        sums[kFirst + 3] = gr.b;
        sums[kFirst + 4] = gr.c;
        sums[kFirst + 5] = gr.opacity;
        // Sum j of the warp into global memory: colour channel j (j < kFirst), then the
        // geometry's x, y, a, b, c, opacity. Selects, not branches: in a full warp the
        // lanes add different sums at once.
        constexpr int kSums = kFirst + 6;
        auto add_sum = [&](int j, float sum) {
          const int k = j - kFirst;
          const bool color = k < 0;
          float* const base = color   ? a.v_colors
                              : k < 2 ? a.v_means2d
                              : k < 5 ? a.v_conics
                                      : a.v_opacities;
          const int64_t stride = color ? s.D : k < 2 ? 2 : k < 5 ? 3 : 1;
          const int64_t offset = color ? s.c0 + j : k < 2 ? k : k < 5 ? k - 2 : 0;
          if (!color || in_chunk<kChunk>(s, j)) ctx.atomic_add(base + g * stride + offset, sum);
        };
        if (ctx.warp_is_full()) {
          // Spread over the lanes (simt::warp_scatter_sums): one atomic instruction adds all.
          const float mine = simt::warp_scatter_sums<kSums>(ctx, sums);
          const int j = simt::scatter_index<kSums>(ctx.lane());
          if (simt::scatter_owner<kSums>(ctx.lane()) && j < kSums) add_sum(j, mine);
        } else {  // a block's last, partial warp: its lanes may not reach every index
          ctx.template warp_sums<kSums>(sums);
          if (lead) {
#pragma unroll
            for (int jj = 0; jj < kSums; ++jj) add_sum(jj, sums[jj]);
          }
        }
        if (a.v_means2d_abs) {
          ctx.template warp_sums<2>(abs_xy);
          if (lead) {
            ctx.atomic_add(a.v_means2d_abs + 2 * g, abs_xy[0]);
            ctx.atomic_add(a.v_means2d_abs + 2 * g + 1, abs_xy[1]);
          }
        }
      } else {
        ctx.template warp_sums<kFirst>(sums);
        if (lead) {
#pragma unroll
          for (int k = 0; k < kFirst; ++k) {
            if (in_chunk<kChunk>(s, k)) ctx.atomic_add(v_color_out + k, sums[k]);
          }
        }
      }
#pragma unroll
      for (int k0 = kFirst; k0 < kChunk; k0 += 4) {
        if (k0 >= s.nc) break;  // uniform: every lane of the warp stops together
        float more[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          more[j] = (valid && k0 + j < s.nc) ? weight * v_color(k0 + j) : 0.f;
        }
        ctx.template warp_sums<4>(more);
        if (lead) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (k0 + j < s.nc) ctx.atomic_add(v_color_out + k0 + j, more[j]);
          }
        }
      }
    }
  }
}

}  // namespace gsplat
}  // namespace prebuild
