// The fully fused projection kernels' block bodies, written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and by the C++ compiler into the
// simt test library. One thread per (camera, Gaussian) pair, idx = camera * N + gaussian,
// 256 threads per block, a grid-stride loop when C * N exceeds the grid.
//
// The per-element functions (forward_element, backward_element) are also what the plain
// CPU backend runs, so all three backends share the math of projection_math.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include <prebuild/simt.h>
#include "projection_math.h"

namespace prebuild {
namespace gsplat {
namespace projection {

constexpr int kBlock = 256;
constexpr int64_t kMaxGridX = 65535;  // keeps the grid small; threads stride over the rest

using simt::LaunchGeometry;
using simt::NoShared;

// Grid and block for `total` (camera, Gaussian) pairs; total > 0.
inline LaunchGeometry launch_geometry(int64_t total) {
  const int64_t blocks = std::min<int64_t>((total + kBlock - 1) / kBlock, kMaxGridX);
  return {{static_cast<int>(blocks), 1, 1}, {kBlock, 1, 1}};
}

// Inputs shared by the forward and backward: Gaussians (covars, or quats and scales, null
// when not given) and cameras.
struct Scene {
  const float* means;     // [N, 3]
  const float* covars;    // [N, 6] or null
  const float* quats;     // [N, 4] or null
  const float* scales;    // [N, 3] or null
  const float* viewmats;  // [C, 4, 4]
  const float* Ks;        // [C, 3, 3]
  int64_t C, N;
  int width, height;
};

struct ForwardArgs {
  Scene scene;
  ProjectParams params;
  int32_t* radii;         // [C, N, 2]
  float* means2d;         // [C, N, 2]
  float* depths;          // [C, N]
  float* conics;          // [C, N, 3]
  float* compensations;   // [C, N] or null
};

struct BackwardArgs {
  Scene scene;
  float eps2d;
  const int32_t* radii;           // [C, N, 2]
  const float* conics;            // [C, N, 3]
  const float* compensations;     // [C, N] or null
  const float* v_means2d;         // [C, N, 2]
  const float* v_depths;          // [C, N]
  const float* v_conics;          // [C, N, 3]
  const float* v_compensations;   // [C, N] or null (then compensations are ignored)
  float* v_means;                 // [N, 3], zero-initialised, accumulated over cameras
  float* v_covars;                // [N, 6] or null
  float* v_quats;                 // [N, 4] or null
  float* v_scales;                // [N, 3] or null
};

PREBUILD_HD Camera scene_camera(const Scene& s, int64_t c) {
  return load_camera(s.viewmats + c * 16, s.Ks + c * 9, s.width, s.height);
}

PREBUILD_HD const float* row_or_null(const float* p, int64_t row, int64_t width) {
  return p != nullptr ? p + row * width : nullptr;
}

// Forward of the pair idx = c * N + n: writes every output of the pair (zeros when culled).
PREBUILD_HD void forward_element(const ForwardArgs& a, int64_t idx) {
  const Scene& s = a.scene;
  const int64_t c = idx / s.N, n = idx % s.N;
  const Projected p =
      project_gaussian(scene_camera(s, c), a.params, s.means + n * 3, row_or_null(s.covars, n, 6),
                       row_or_null(s.quats, n, 4), row_or_null(s.scales, n, 3));
  a.radii[idx * 2] = p.radius_x;
  a.radii[idx * 2 + 1] = p.radius_y;
  a.means2d[idx * 2] = p.mean2d_x;
  a.means2d[idx * 2 + 1] = p.mean2d_y;
  a.depths[idx] = p.depth;
  a.conics[idx * 3] = p.conic.a;
  a.conics[idx * 3 + 1] = p.conic.b;
  a.conics[idx * 3 + 2] = p.conic.c;
  if (a.compensations != nullptr) a.compensations[idx] = p.compensation;
}

// Whether the pair idx was culled by the forward (gsplat: either radius <= 0).
PREBUILD_HD bool is_culled(const BackwardArgs& a, int64_t idx) {
  return a.radii[idx * 2] <= 0 || a.radii[idx * 2 + 1] <= 0;
}

// Gradient contribution of the pair idx = c * N + n (not culled) to Gaussian n.
PREBUILD_HD GaussianGrad backward_element(const BackwardArgs& a, int64_t idx) {
  const Scene& s = a.scene;
  const int64_t c = idx / s.N, n = idx % s.N;
  ProjectedGrad g;
  g.mean2d_x = a.v_means2d[idx * 2];
  g.mean2d_y = a.v_means2d[idx * 2 + 1];
  g.depth = a.v_depths[idx];
  g.conic_a = a.v_conics[idx * 3];
  g.conic_b = a.v_conics[idx * 3 + 1];
  g.conic_c = a.v_conics[idx * 3 + 2];
  g.has_compensation = a.v_compensations != nullptr;
  g.compensation = g.has_compensation ? a.v_compensations[idx] : 0.f;
  const float compensation = g.has_compensation ? a.compensations[idx] : 0.f;
  const Sym2 conic = {a.conics[idx * 3], a.conics[idx * 3 + 1], a.conics[idx * 3 + 2]};
  return project_gaussian_vjp(scene_camera(s, c), a.eps2d, s.means + n * 3,
                              row_or_null(s.covars, n, 6), row_or_null(s.quats, n, 4),
                              row_or_null(s.scales, n, 3), conic, compensation, g);
}

// Adds `g` into Gaussian n's gradients with `add(address, value)`.
template <typename Add>
PREBUILD_HD void accumulate(const BackwardArgs& a, int64_t n, const GaussianGrad& g,
                            const Add& add) {
  for (int i = 0; i < 3; ++i) add(a.v_means + n * 3 + i, g.mean[i]);
  if (a.v_covars != nullptr) {
    for (int i = 0; i < 6; ++i) add(a.v_covars + n * 6 + i, g.covar[i]);
  } else {
    for (int i = 0; i < 4; ++i) add(a.v_quats + n * 4 + i, g.quat[i]);
    for (int i = 0; i < 3; ++i) add(a.v_scales + n * 3 + i, g.scale[i]);
  }
}

template <typename Ctx>
PREBUILD_SIMT_BODY int64_t first_index(const Ctx& ctx) {
  return static_cast<int64_t>(ctx.block().x) * ctx.block_dim().x + ctx.thread().x;
}

template <typename Ctx>
PREBUILD_SIMT_BODY int64_t grid_stride(const Ctx& ctx) {
  return static_cast<int64_t>(ctx.grid_dim().x) * ctx.block_dim().x;
}

template <typename Ctx>
PREBUILD_SIMT_BODY void forward_block(const Ctx& ctx, NoShared&, const ForwardArgs& a) {
  const int64_t total = a.scene.C * a.scene.N;
  for (int64_t idx = first_index(ctx); idx < total; idx += grid_stride(ctx)) {
    forward_element(a, idx);
  }
}

// Each pair adds its contribution to its Gaussian's gradients atomically (cameras of the
// same Gaussian run in different threads).
template <typename Ctx>
PREBUILD_SIMT_BODY void backward_block(const Ctx& ctx, NoShared&, const BackwardArgs& a) {
  const int64_t total = a.scene.C * a.scene.N;
  for (int64_t idx = first_index(ctx); idx < total; idx += grid_stride(ctx)) {
    if (is_culled(a, idx)) continue;
    const GaussianGrad g = backward_element(a, idx);
    accumulate(a, idx % a.scene.N, g, [&](float* address, float value) {
      ctx.atomic_add(address, value);
    });
  }
}

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
