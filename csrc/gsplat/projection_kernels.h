// The fully fused projection kernels' block bodies, written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and by the C++ compiler into the
// simt test library. One thread per (camera, Gaussian) pair, idx = (b * C + c) * N + n,
// 256 threads per block, a grid-stride loop when C * N exceeds the grid.
//
// The per-element functions (forward_element, backward_element) are also what the plain
// CPU backend runs, so all three backends share the math of projection_math.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include <prebuild/simt_grid.h>
#include "projection_math.h"

namespace prebuild {
namespace gsplat {
namespace projection {

constexpr int kBlock = simt::kElementBlock;

using simt::LaunchGeometry;
using simt::NoShared;
using simt::element_geometry;

// Inputs shared by the forward and backward: Gaussians (covars, or quats and scales, null
// when not given) and cameras, B batches of each. Pair idx = (b * C + c) * N + n: its camera
// row is idx / N (= b * C + c) and its Gaussian row b * N + n.
struct Scene {
  const float* means;     // [B, N, 3]
  const float* covars;    // [B, N, 6] or null
  const float* quats;     // [B, N, 4] or null
  const float* scales;    // [B, N, 3] or null
  const float* viewmats;  // [B, C, 4, 4]
  const float* Ks;        // [B, C, 3, 3]
  int64_t B, C, N;
  int width, height;
  int camera_model;       // CameraModel
};

PREBUILD_HD int64_t pair_count(const Scene& s) { return s.B * s.C * s.N; }
PREBUILD_HD int64_t camera_row(const Scene& s, int64_t idx) { return idx / s.N; }
PREBUILD_HD int64_t gaussian_row(const Scene& s, int64_t idx) {
  return idx / (s.C * s.N) * s.N + idx % s.N;
}

struct ForwardArgs {
  Scene scene;
  ProjectParams params;
  const float* opacities; // [B, N] or null: the opacity-aware extent (project_gaussian)
  int32_t* radii;         // [B, C, N, 2]
  float* means2d;         // [B, C, N, 2]
  float* depths;          // [B, C, N]
  float* conics;          // [B, C, N, 3]
  float* compensations;   // [B, C, N] or null
};

struct BackwardArgs {
  Scene scene;
  float eps2d;
  const int32_t* radii;           // [B, C, N, 2]
  const float* conics;            // [B, C, N, 3]
  const float* compensations;     // [B, C, N] or null
  const float* v_means2d;         // [B, C, N, 2]
  const float* v_depths;          // [B, C, N], or nullptr: zeros
  const float* v_conics;          // [B, C, N, 3]
  const float* v_compensations;   // [B, C, N] or null (then compensations are ignored)
  float* v_means;                 // [B, N, 3], zero-initialised, accumulated over cameras
  float* v_covars;                // [B, N, 6] or null
  float* v_quats;                 // [B, N, 4] or null
  float* v_scales;                // [B, N, 3] or null
  float* v_viewmats;              // [B, C, 4, 4] zero-initialised, or null: not wanted
};

PREBUILD_HD Camera scene_camera(const Scene& s, int64_t row) {
  return load_camera(s.viewmats + row * 16, s.Ks + row * 9, s.width, s.height);
}

PREBUILD_HD const float* row_or_null(const float* p, int64_t row, int64_t width) {
  return p != nullptr ? p + row * width : nullptr;
}

// Forward of the pair idx: writes every output of the pair (zeros when culled).
PREBUILD_HD void forward_element(const ForwardArgs& a, int64_t idx) {
  const Scene& s = a.scene;
  const int64_t g = gaussian_row(s, idx);
  const Projected p = project_gaussian(scene_camera(s, camera_row(s, idx)), s.camera_model,
                                       a.params, s.means + g * 3, row_or_null(s.covars, g, 6),
                                       row_or_null(s.quats, g, 4), row_or_null(s.scales, g, 3),
                                       row_or_null(a.opacities, g, 1));
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

// Gradient contribution of the pair idx (not culled) to its Gaussian and camera.
PREBUILD_HD GaussianGrad backward_element(const BackwardArgs& a, int64_t idx) {
  const Scene& s = a.scene;
  const int64_t n = gaussian_row(s, idx);
  ProjectedGrad g;
  g.mean2d_x = a.v_means2d[idx * 2];
  g.mean2d_y = a.v_means2d[idx * 2 + 1];
  g.depth = a.v_depths ? a.v_depths[idx] : 0.f;
  g.conic_a = a.v_conics[idx * 3];
  g.conic_b = a.v_conics[idx * 3 + 1];
  g.conic_c = a.v_conics[idx * 3 + 2];
  g.has_compensation = a.v_compensations != nullptr;
  g.compensation = g.has_compensation ? a.v_compensations[idx] : 0.f;
  const float compensation = g.has_compensation ? a.compensations[idx] : 0.f;
  const Sym2 conic = {a.conics[idx * 3], a.conics[idx * 3 + 1], a.conics[idx * 3 + 2]};
  return project_gaussian_vjp(scene_camera(s, camera_row(s, idx)), s.camera_model, a.eps2d,
                              s.means + n * 3, row_or_null(s.covars, n, 6),
                              row_or_null(s.quats, n, 4), row_or_null(s.scales, n, 3), conic,
                              compensation, g);
}

// Adds `g` into Gaussian row n's gradients with `add(address, value)`.
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

// A pair's gradient of its viewmat's top three rows (the bottom row gets none).
constexpr int kViewmatGrad = 12;

PREBUILD_HD void viewmat_grad(const GaussianGrad& g, float* out) {
  const float t[3] = {g.translation.x, g.translation.y, g.translation.z};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) out[i * 4 + j] = g.rotation.m[i][j];
    out[i * 4 + 3] = t[i];
  }
}

template <typename Ctx>
PREBUILD_SIMT_BODY void forward_block(const Ctx& ctx, NoShared&, const ForwardArgs& a) {
  simt::for_each_element(ctx, pair_count(a.scene), [&](int64_t idx) { forward_element(a, idx); });
}

// The backward's shared memory: each thread's viewmat gradient, summed over the block before
// one thread adds the sum (N pairs per camera would otherwise all add to the same 12 floats).
struct BackwardShared {
  float viewmat[kBlock][kViewmatGrad];
};

// Each pair adds its contribution to its Gaussian's gradients atomically (cameras of the
// same Gaussian run in different threads). The loop runs block-uniformly (every thread of a
// block takes the same number of steps) because the viewmat sum synchronises the block.
template <typename Ctx>
PREBUILD_SIMT_BODY void backward_block(const Ctx& ctx, BackwardShared& sh, const BackwardArgs& a) {
  const Scene& s = a.scene;
  const int64_t total = pair_count(s);
  const int t = static_cast<int>(ctx.thread().x);
  const int block = static_cast<int>(ctx.block_dim().x);
  for (int64_t base = simt::first_element(ctx) - t; base < total; base += simt::element_stride(ctx)) {
    const int64_t idx = base + t;
    float v_view[kViewmatGrad] = {};
    if (idx < total && !is_culled(a, idx)) {
      const GaussianGrad g = backward_element(a, idx);
      accumulate(a, gaussian_row(s, idx), g, [&](float* address, float value) {
        ctx.atomic_add(address, value);
      });
      if (a.v_viewmats != nullptr) viewmat_grad(g, v_view);
    }
    if (a.v_viewmats == nullptr) continue;
    const int64_t last = base + block - 1 < total ? base + block - 1 : total - 1;
    if (camera_row(s, base) != camera_row(s, last)) {
      // The block spans cameras (N < block size or a boundary): each pair adds its own.
      float* dst = a.v_viewmats + camera_row(s, idx < total ? idx : base) * 16;
      if (idx < total)
        for (int k = 0; k < kViewmatGrad; ++k)
          if (v_view[k] != 0.f) ctx.atomic_add(dst + k, v_view[k]);
      continue;
    }
    for (int k = 0; k < kViewmatGrad; ++k) sh.viewmat[t][k] = v_view[k];
    ctx.sync();
    for (int half = block / 2; half > 0; half /= 2) {  // block is a power of two
      if (t < half)
        for (int k = 0; k < kViewmatGrad; ++k) sh.viewmat[t][k] += sh.viewmat[t + half][k];
      ctx.sync();
    }
    if (t == 0) {
      float* dst = a.v_viewmats + camera_row(s, base) * 16;
      for (int k = 0; k < kViewmatGrad; ++k) ctx.atomic_add(dst + k, sh.viewmat[0][k]);
    }
    ctx.sync();  // thread 0 has read the sum before the next step overwrites it
  }
}

// ------------------------------------------------------------------------------- proj
// gsplat's `proj`: camera-space means and full 3x3 covariances to image means and 2x2
// covariances, I cameras of N Gaussians each, no culling, no blur. One thread per element.

struct ProjArgs {
  const float* means;    // [I, N, 3] camera space
  const float* covars;   // [I, N, 3, 3]
  const float* Ks;       // [I, 3, 3]
  int64_t I, N;
  int width, height;
  int camera_model;
  // forward outputs (null in the backward)
  float* means2d;        // [I, N, 2]
  float* covars2d;       // [I, N, 2, 2]
  // backward: incoming gradients and outputs (null in the forward)
  const float* v_means2d;   // [I, N, 2]
  const float* v_covars2d;  // [I, N, 2, 2]
  float* v_means;           // [I, N, 3]
  float* v_covars;          // [I, N, 3, 3]
};

PREBUILD_HD Camera proj_camera(const ProjArgs& a, int64_t idx) {
  const float identity[16] = {1.f, 0.f, 0.f, 0.f, 0.f, 1.f, 0.f, 0.f,
                              0.f, 0.f, 1.f, 0.f, 0.f, 0.f, 0.f, 1.f};
  return load_camera(identity, a.Ks + idx / a.N * 9, a.width, a.height);
}

PREBUILD_HD Mat3 load_mat3(const float* p) {
  Mat3 m;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) m.m[i][j] = p[i * 3 + j];
  return m;
}

PREBUILD_HD void proj_forward_element(const ProjArgs& a, int64_t idx) {
  const float* m = a.means + idx * 3;
  const Projected2D img = project_to_image(a.camera_model, proj_camera(a, idx),
                                           Vec3{m[0], m[1], m[2]}, load_mat3(a.covars + idx * 9));
  a.means2d[idx * 2] = img.mean2d[0];
  a.means2d[idx * 2 + 1] = img.mean2d[1];
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) a.covars2d[idx * 4 + r * 2 + c] = img.cov2d.m[r][c];
}

PREBUILD_HD void proj_backward_element(const ProjArgs& a, int64_t idx) {
  const float* m = a.means + idx * 3;
  const float* vc = a.v_covars2d + idx * 4;
  const Mat2 G = {{{vc[0], vc[1]}, {vc[2], vc[3]}}};
  const CameraSpaceGrad g =
      project_to_image_vjp(a.camera_model, proj_camera(a, idx), Vec3{m[0], m[1], m[2]},
                           load_mat3(a.covars + idx * 9), a.v_means2d + idx * 2, G);
  a.v_means[idx * 3] = g.mean.x;
  a.v_means[idx * 3 + 1] = g.mean.y;
  a.v_means[idx * 3 + 2] = g.mean.z;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) a.v_covars[idx * 9 + i * 3 + j] = g.covar.m[i][j];
}

template <typename Ctx>
PREBUILD_SIMT_BODY void proj_forward_block(const Ctx& ctx, NoShared&, const ProjArgs& a) {
  simt::for_each_element(ctx, a.I * a.N, [&](int64_t idx) { proj_forward_element(a, idx); });
}

template <typename Ctx>
PREBUILD_SIMT_BODY void proj_backward_block(const Ctx& ctx, NoShared&, const ProjArgs& a) {
  simt::for_each_element(ctx, a.I * a.N, [&](int64_t idx) { proj_backward_element(a, idx); });
}

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
