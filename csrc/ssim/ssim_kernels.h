// The fused SSIM kernels' block bodies, written through the SIMT layer (prebuild/simt.h):
// compiled by nvcc into the CUDA library and by the C++ compiler into the simt test
// library, so the code that runs on GPUs is also executed (and sanitised) on the CPU.
//
// Why this shape (measured on an H200, 2026-11-27: the 16x16-tile kernels before this were
// bound by shared memory at 98 % of its throughput, 165 shared-memory words per pixel):
// - A block of 32 x 8 threads owns a tile 32 pixels wide and 8 R tall: a warp spans a
//   row, so every shared-memory row access and every global store is 32 consecutive words.
// - The forward stages only the two images (x, y as a pair) for the tile and its 5-pixel
//   halo; the horizontal pass forms the five products in registers (22 loads per sum).
// - The horizontal sums go to shared memory once per row of the tile; each thread then owns
//   R consecutive output rows of one column and adds each horizontal sum it reads into all
//   R of its outputs at once (a sliding window in registers): 5 (R + 10) / R loads per pixel
//   for the vertical pass instead of 55. About 56 words a pixel in all.
// - The backward stages the M distinct maps g * dS (3 for img1's gradient alone, 4 for both:
//   dS/d(G*x^2) and dS/d(G*y^2) are one map, ssim_math.h), the same two passes.
// Planes (B*C) run along grid.z, striding when there are more planes than gridDim.z.
#pragma once

#include <algorithm>
#include <cstdint>

#include <prebuild/simt.h>
#include "ssim_math.h"

namespace prebuild {
namespace ssim {

constexpr int kTileW = 32;     // tile width = block width: a warp per row
constexpr int kBlockRows = 8;  // thread rows per block
constexpr int kThreads = kTileW * kBlockRows;
constexpr int kInCols = kTileW + 2 * kRadius;  // staged columns: tile plus halo
constexpr int kMaxGridY = 65535;
constexpr int kMaxGridZ = 65535;

// Output rows per thread: the forward's, and the backward's for M maps (4 maps take fewer
// rows, so that the block's shared memory stays within the 48 KiB of a static array).
constexpr int kForwardRowsPerThread = 4;
constexpr int backward_rows_per_thread(int maps) { return maps == kMapsImg1 ? 4 : 3; }

// A tile of R rows per thread: its output rows and the staged rows (with the halo).
template <int R>
struct Tile {
  static constexpr int kRows = kBlockRows * R;
  static constexpr int kInRows = kRows + 2 * kRadius;
};
using ForwardTile = Tile<kForwardRowsPerThread>;

// The forward block's shared memory: the two images' tile + halo as (x, y) pairs, then the
// horizontal sums of the five moments, one plane per moment.
struct ForwardShared {
  alignas(8) float xy[ForwardTile::kInRows][kInCols][2];
  float hsum[kNumMoments][ForwardTile::kInRows][kTileW];
};

// The backward block's: the M maps g * dS for the tile + halo, then their horizontal sums.
template <int M>
struct BackwardShared {
  using T = Tile<backward_rows_per_thread(M)>;
  float staged[M][T::kInRows][kInCols];
  float hsum[M][T::kInRows][kTileW];
};

using simt::LaunchGeometry;

// Grid and block for (planes, H, W) with tiles of `rows` output rows; one place for the CUDA
// and the simt launches.
inline LaunchGeometry launch_geometry(int64_t planes, int64_t H, int64_t W, int rows) {
  return {{static_cast<int>((W + kTileW - 1) / kTileW), static_cast<int>((H + rows - 1) / rows),
           static_cast<int>(std::min<int64_t>(planes, kMaxGridZ))},
          {kTileW, kBlockRows, 1}};
}

// The shortest tile of any kernel: what limits the image height (grid.y).
constexpr int kMinTileRows = Tile<backward_rows_per_thread(kMapsBoth)>::kRows;

struct ForwardArgs {
  const float* x;
  const float* y;
  int64_t planes;
  int H, W;
  float* ssim_map;
  float* dS;    // nullptr unless train
  int ds_maps;  // the distinct maps dS holds (DistinctMap order): 3, 4, or 0 without dS
};

struct BackwardArgs {
  const float* grad_map;  // nullptr with grad_map_step 0: 1 at every pixel
  // 1: a value per pixel, multiplied into each dS before the sums (G*(g dS)); 0: one value g
  // for every pixel (the broadcast dL/dmap of a mean, read in place instead of written out
  // as a full image first), multiplied into the gradients after the sums (g G*(dS)): the
  // bits of fused_ssim_forward_backward's gradients scaled by g.
  int64_t grad_map_step;
  const float* x;
  const float* y;
  const float* dS;  // nullptr: recompute (CPU backend only; the tiled kernels refuse it)
  int64_t planes;
  int H, W;
  float* grad1;
  float* grad2;  // nullptr: img2's gradient is not wanted
};

// The vertical sums of the calling thread's R output rows (tile rows r0 .. r0 + R - 1) in
// column x, from the M planes of horizontal sums: each horizontal sum is read once and added
// into every output whose window holds it (output i takes tap k = j - i of staged row
// r0 + j), j = 0 .. R + 9 in order, so each output sums its taps k = 0..10 in order, as the
// CPU kernels do.
template <int R, int M, int kInRows>
PREBUILD_SIMT_BODY void vertical_sums(const float (&hsum)[M][kInRows][kTileW], int x, int r0,
                                      float (&acc)[R][M]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[i][m] = 0.f;
  }
#pragma unroll
  for (int j = 0; j < R + 2 * kRadius; ++j) {
    float h[M];
#pragma unroll
    for (int m = 0; m < M; ++m) h[m] = hsum[m][r0 + j][x];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int k = j - i;
      if (k >= 0 && k < kWindow) {
        const float w = gauss_weight(k);
#pragma unroll
        for (int m = 0; m < M; ++m) acc[i][m] += w * h[m];
      }
    }
  }
}

template <typename Ctx>
PREBUILD_SIMT_BODY void forward_block(const Ctx& ctx, ForwardShared& sh, const ForwardArgs& a) {
  using T = ForwardTile;
  constexpr int R = kForwardRowsPerThread;
  const simt::Index3 t = ctx.thread(), b = ctx.block();
  const int tid = t.y * kTileW + t.x;
  const int ox = b.x * kTileW, oy = b.y * T::kRows;
  const int64_t hw = static_cast<int64_t>(a.H) * a.W;
  const int64_t n = a.planes * hw;
  const int px = ox + t.x;
  for (int64_t plane = b.z; plane < a.planes; plane += ctx.grid_dim().z) {
    const float* x = a.x + plane * hw;
    const float* y = a.y + plane * hw;
    // 1. The tile + halo of both images (zero outside the image).
    for (int i = tid; i < T::kInRows * kInCols; i += kThreads) {
      const int r = i / kInCols, c = i - r * kInCols;
      const int gy = oy + r - kRadius, gx = ox + c - kRadius;
      float vx = 0.f, vy = 0.f;
      if (gy >= 0 && gy < a.H && gx >= 0 && gx < a.W) {
        const int64_t p = static_cast<int64_t>(gy) * a.W + gx;  // a plane may pass 2^31
        vx = x[p];
        vy = y[p];
      }
      sh.xy[r][c][0] = vx;
      sh.xy[r][c][1] = vy;
    }
    ctx.sync();
    // 2. Horizontal sums of the five products, each staged row once.
    for (int r = t.y; r < T::kInRows; r += kBlockRows) {
      float acc[kNumMoments] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int k = 0; k < kWindow; ++k) {
        const float w = gauss_weight(k);
        float p[kNumMoments];
        pixel_products(sh.xy[r][t.x + k][0], sh.xy[r][t.x + k][1], p);
#pragma unroll
        for (int m = 0; m < kNumMoments; ++m) acc[m] += w * p[m];
      }
#pragma unroll
      for (int m = 0; m < kNumMoments; ++m) sh.hsum[m][r][t.x] = acc[m];
    }
    ctx.sync();
    // 3. Vertical sums of the thread's R output rows, then SSIM and dS per pixel.
    const int r0 = t.y * R;
    float sums[R][kNumMoments];
    vertical_sums(sh.hsum, t.x, r0, sums);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int py = oy + r0 + i;
      if (px < a.W && py < a.H) {
        const int64_t p = plane * hw + static_cast<int64_t>(py) * a.W + px;
        float d[kNumMoments];
        a.ssim_map[p] = ssim_from_sums(sums[i], a.dS ? d : nullptr);
        if (a.dS) {
#pragma unroll
          for (int m = 0; m < kMapsBoth; ++m) {
            if (m < a.ds_maps) a.dS[m * n + p] = d[moment_of(m)];
          }
        }
      }
    }
    ctx.sync();  // the next plane overwrites the shared tile
  }
}

// M: the maps read, 3 (img1's gradient) or 4 (both images').
template <int M, typename Ctx>
PREBUILD_SIMT_BODY void backward_block(const Ctx& ctx, BackwardShared<M>& sh,
                                       const BackwardArgs& a) {
  using T = typename BackwardShared<M>::T;
  constexpr int R = backward_rows_per_thread(M);
  const simt::Index3 t = ctx.thread(), b = ctx.block();
  const int tid = t.y * kTileW + t.x;
  const int ox = b.x * kTileW, oy = b.y * T::kRows;
  const int64_t hw = static_cast<int64_t>(a.H) * a.W;
  const int64_t n = a.planes * hw;
  const int px = ox + t.x;
  const float scale = a.grad_map_step || a.grad_map == nullptr ? 1.f : a.grad_map[0];
  for (int64_t plane = b.z; plane < a.planes; plane += ctx.grid_dim().z) {
    // 1. g * dS for the tile + halo (zero outside the image).
    for (int i = tid; i < T::kInRows * kInCols; i += kThreads) {
      const int r = i / kInCols, c = i - r * kInCols;
      const int gy = oy + r - kRadius, gx = ox + c - kRadius;
      if (gy >= 0 && gy < a.H && gx >= 0 && gx < a.W) {
        const int64_t p = plane * hw + static_cast<int64_t>(gy) * a.W + gx;
        const float g = a.grad_map_step ? a.grad_map[p] : 1.f;
#pragma unroll
        for (int m = 0; m < M; ++m) sh.staged[m][r][c] = g * a.dS[m * n + p];
      } else {
#pragma unroll
        for (int m = 0; m < M; ++m) sh.staged[m][r][c] = 0.f;
      }
    }
    ctx.sync();
    // 2. Horizontal sums of each map.
    for (int r = t.y; r < T::kInRows; r += kBlockRows) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < kWindow; ++k) acc += gauss_weight(k) * sh.staged[m][r][t.x + k];
        sh.hsum[m][r][t.x] = acc;
      }
    }
    ctx.sync();
    // 3. Vertical sums of the thread's R output rows, then the image gradients per pixel.
    const int r0 = t.y * R;
    float conv[R][M];
    vertical_sums(sh.hsum, t.x, r0, conv);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int py = oy + r0 + i;
      if (px < a.W && py < a.H) {
        const int64_t p = plane * hw + static_cast<int64_t>(py) * a.W + px;
        float sums[kNumMoments];
        distinct_to_moments<M>(conv[i], sums);
        a.grad1[p] = scale * image1_grad(a.x[p], a.y[p], sums);
        if (M == kMapsBoth) a.grad2[p] = scale * image2_grad(a.x[p], a.y[p], sums);
      }
    }
    ctx.sync();
  }
}

}  // namespace ssim
}  // namespace prebuild
