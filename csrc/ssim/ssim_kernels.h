// The fused SSIM kernels' block bodies, written through the SIMT layer (prebuild/simt.h):
// compiled by nvcc into the CUDA library and by the C++ compiler into the simt test
// library, so the code that runs on GPUs is also executed (and sanitised) on the CPU.
//
// One 16x16 thread block per output tile. The block stages its tile plus a 5-pixel halo in
// shared memory, runs the horizontal Gaussian pass into shared memory, then the vertical
// pass per pixel, and applies the per-pixel math of ssim_math.h. Planes (B*C) run along
// grid.z, striding when there are more planes than gridDim.z.
#pragma once

#include <algorithm>
#include <cstdint>

#include <prebuild/simt.h>
#include "ssim_math.h"

namespace prebuild {
namespace ssim {

constexpr int kTile = 16;
constexpr int kHalo = kTile + 2 * kRadius;  // 26: tile plus halo on both sides
constexpr int kMaxGridY = 65535;
constexpr int kMaxGridZ = 65535;

// The block's shared memory: staged products for the tile + halo, then horizontal sums.
struct SharedTile {
  float staged[kHalo][kHalo][kNumMoments];
  float hsum[kHalo][kTile][kNumMoments];
};

using simt::LaunchGeometry;

// Grid and block for (planes, H, W); one place for the CUDA and the simt launches.
inline LaunchGeometry launch_geometry(int64_t planes, int64_t H, int64_t W) {
  return {{static_cast<int>((W + kTile - 1) / kTile), static_cast<int>((H + kTile - 1) / kTile),
           static_cast<int>(std::min<int64_t>(planes, kMaxGridZ))},
          {kTile, kTile, 1}};
}

struct ForwardArgs {
  const float* x;
  const float* y;
  int64_t planes;
  int H, W;
  float* ssim_map;
  float* dS;  // nullptr unless train
};

struct BackwardArgs {
  const float* grad_map;
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

// Stages the tile + halo of `value(pixel index, float out[kNumMoments])` (zero outside the
// image), then the horizontal pass into sh.hsum. `value` is called for in-bounds pixels only.
template <typename Ctx, typename Value>
PREBUILD_SIMT_BODY void stage_and_horizontal(const Ctx& ctx, SharedTile& sh, int H, int W,
                                             int64_t plane_offset, const Value& value) {
  const simt::Index3 t = ctx.thread();
  const simt::Index3 b = ctx.block();
  const int oy = b.y * kTile, ox = b.x * kTile;
  const int tid = t.y * kTile + t.x;
  for (int i = tid; i < kHalo * kHalo; i += kTile * kTile) {
    const int r = i / kHalo, c = i % kHalo;
    const int gy = oy + r - kRadius, gx = ox + c - kRadius;
    if (gy >= 0 && gy < H && gx >= 0 && gx < W) {
      value(plane_offset + static_cast<int64_t>(gy) * W + gx, sh.staged[r][c]);
    } else {
      for (int m = 0; m < kNumMoments; ++m) sh.staged[r][c][m] = 0.f;
    }
  }
  ctx.sync();
  for (int i = tid; i < kHalo * kTile; i += kTile * kTile) {
    const int r = i / kTile, c = i % kTile;
    float acc[kNumMoments] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < kWindow; ++k) {
      const float w = gauss_weight(k);
#pragma unroll
      for (int m = 0; m < kNumMoments; ++m) acc[m] += w * sh.staged[r][c + k][m];
    }
#pragma unroll
    for (int m = 0; m < kNumMoments; ++m) sh.hsum[r][c][m] = acc[m];
  }
  ctx.sync();
}

// Vertical pass for the calling thread's pixel.
template <typename Ctx>
PREBUILD_SIMT_BODY void vertical(const Ctx& ctx, const SharedTile& sh, float sums[kNumMoments]) {
  const simt::Index3 t = ctx.thread();
#pragma unroll
  for (int m = 0; m < kNumMoments; ++m) sums[m] = 0.f;
#pragma unroll
  for (int k = 0; k < kWindow; ++k) {
    const float w = gauss_weight(k);
#pragma unroll
    for (int m = 0; m < kNumMoments; ++m) sums[m] += w * sh.hsum[t.y + k][t.x][m];
  }
}

template <typename Ctx>
PREBUILD_SIMT_BODY void forward_block(const Ctx& ctx, SharedTile& sh, const ForwardArgs& a) {
  const int64_t n = a.planes * a.H * a.W;
  const simt::Index3 t = ctx.thread(), b = ctx.block();
  const int py = b.y * kTile + t.y, px = b.x * kTile + t.x;
  for (int64_t plane = b.z; plane < a.planes; plane += ctx.grid_dim().z) {
    const int64_t offset = plane * a.H * a.W;
    stage_and_horizontal(ctx, sh, a.H, a.W, offset, [&](int64_t i, float* v) {
      pixel_products(a.x[i], a.y[i], v);
    });
    if (py < a.H && px < a.W) {
      float sums[kNumMoments];
      vertical(ctx, sh, sums);
      const int64_t i = offset + static_cast<int64_t>(py) * a.W + px;
      float d[kNumMoments];
      a.ssim_map[i] = ssim_from_sums(sums, a.dS ? d : nullptr);
      if (a.dS) {
#pragma unroll
        for (int m = 0; m < kNumMoments; ++m) a.dS[m * n + i] = d[m];
      }
    }
    ctx.sync();  // the next plane overwrites the shared tile
  }
}

template <typename Ctx>
PREBUILD_SIMT_BODY void backward_block(const Ctx& ctx, SharedTile& sh, const BackwardArgs& a) {
  const int64_t n = a.planes * a.H * a.W;
  const simt::Index3 t = ctx.thread(), b = ctx.block();
  const int py = b.y * kTile + t.y, px = b.x * kTile + t.x;
  for (int64_t plane = b.z; plane < a.planes; plane += ctx.grid_dim().z) {
    const int64_t offset = plane * a.H * a.W;
    stage_and_horizontal(ctx, sh, a.H, a.W, offset, [&](int64_t i, float* v) {
      const float g = a.grad_map_step ? a.grad_map[i] : 1.f;
#pragma unroll
      for (int m = 0; m < kNumMoments; ++m) v[m] = g * a.dS[m * n + i];
    });
    if (py < a.H && px < a.W) {
      float conv[kNumMoments];
      vertical(ctx, sh, conv);
      const int64_t i = offset + static_cast<int64_t>(py) * a.W + px;
      const float scale = a.grad_map_step ? 1.f : a.grad_map[0];
      a.grad1[i] = scale * image1_grad(a.x[i], a.y[i], conv);
      if (a.grad2) a.grad2[i] = scale * image2_grad(a.x[i], a.y[i], conv);
    }
    ctx.sync();
  }
}

}  // namespace ssim
}  // namespace prebuild
