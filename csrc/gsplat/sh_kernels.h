// The spherical-harmonics kernels' block bodies, written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and by the C++ compiler into the
// simt test library. One thread per direction (all three colour channels: the basis is
// evaluated once and no two threads write the same output, so the backward needs no
// atomics and is deterministic), 256 threads per block, a grid-stride loop when N exceeds
// the grid.
//
// The per-element functions (forward_element, backward_element) are also what the plain
// CPU backend runs, so all three backends share the math of sh_math.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include <prebuild/simt_grid.h>
#include "sh_math.h"

namespace prebuild {
namespace gsplat {
namespace sh {

constexpr int kBlock = simt::kElementBlock;

using simt::LaunchGeometry;
using simt::NoShared;
using simt::element_geometry;

// Inputs shared by the forward and backward. The batch dimensions are flattened: N
// directions, each with K coefficients per channel.
struct Inputs {
  int degree;              // 0..4, (degree + 1)^2 <= K
  int64_t N, K;
  const float* dirs;       // [N, 3]
  const float* coeffs;     // [N, K, 3]
  const uint8_t* masks;    // [N] (torch.bool) or null: false skips the direction
};

struct ForwardArgs {
  Inputs in;
  float* colors;           // [N, 3]; zeros where masked
};

struct BackwardArgs {
  Inputs in;
  const float* v_colors;   // [N, 3]
  float* v_coeffs;         // [N, K, 3]; every entry written (zeros past (degree + 1)^2)
  float* v_dirs;           // [N, 3] or null (not wanted)
};

PREBUILD_HD bool is_masked(const Inputs& in, int64_t i) {
  return in.masks != nullptr && in.masks[i] == 0;
}

// The unit direction of element i (degree >= 1 only: degree 0 never reads the direction).
PREBUILD_HD UnitDir unit_dir(const Inputs& in, int64_t i) {
  const float* d = in.dirs + i * 3;
  return normalize_dir(d[0], d[1], d[2]);
}

PREBUILD_HD void forward_element(const ForwardArgs& a, int64_t i) {
  const Inputs& in = a.in;
  float* out = a.colors + i * 3;
  if (is_masked(in, i)) {
    out[0] = out[1] = out[2] = 0.f;
    return;
  }
  const UnitDir n = in.degree > 0 ? unit_dir(in, i) : UnitDir{0.f, 0.f, 0.f, 0.f, false};
  float basis[kMaxBases];
  sh_basis(in.degree, n.x, n.y, n.z, basis);
  const int nb = num_bases(in.degree);
  const float* coeffs = in.coeffs + i * in.K * 3;
  float sum[3] = {0.f, 0.f, 0.f};
#pragma unroll
  for (int k = 0; k < kMaxBases; ++k) {
    if (k < nb) {
      for (int c = 0; c < 3; ++c) sum[c] += basis[k] * coeffs[k * 3 + c];
    }
  }
  for (int c = 0; c < 3; ++c) out[c] = sum[c];
}

PREBUILD_HD void backward_element(const BackwardArgs& a, int64_t i) {
  const Inputs& in = a.in;
  float* v_coeffs = a.v_coeffs + i * in.K * 3;
  float* v_dir = a.v_dirs != nullptr ? a.v_dirs + i * 3 : nullptr;
  const int nb = is_masked(in, i) ? 0 : num_bases(in.degree);
  for (int64_t j = nb * 3; j < in.K * 3; ++j) v_coeffs[j] = 0.f;
  if (v_dir != nullptr && (nb <= 1)) v_dir[0] = v_dir[1] = v_dir[2] = 0.f;
  if (nb == 0) return;  // masked

  const UnitDir n = in.degree > 0 ? unit_dir(in, i) : UnitDir{0.f, 0.f, 0.f, 0.f, false};
  float basis[kMaxBases];
  sh_basis(in.degree, n.x, n.y, n.z, basis);
  const float* v_color = a.v_colors + i * 3;
  const float vc[3] = {v_color[0], v_color[1], v_color[2]};
#pragma unroll
  for (int k = 0; k < kMaxBases; ++k) {
    if (k < nb) {
      for (int c = 0; c < 3; ++c) v_coeffs[k * 3 + c] = basis[k] * vc[c];
    }
  }
  if (v_dir == nullptr || in.degree == 0) return;

  // d colors[c] / d basis[k] = coeffs[k][c]: g[k] = sum_c v_colors[c] coeffs[k][c].
  const float* coeffs = in.coeffs + i * in.K * 3;
  float g[kMaxBases];
#pragma unroll
  for (int k = 0; k < kMaxBases; ++k) {
    g[k] = k < nb ? vc[0] * coeffs[k * 3] + vc[1] * coeffs[k * 3 + 1] + vc[2] * coeffs[k * 3 + 2]
                  : 0.f;
  }
  float v_unit[3];
  sh_basis_vjp(in.degree, n.x, n.y, n.z, g, v_unit);
  normalize_dir_vjp(n, v_unit[0], v_unit[1], v_unit[2], v_dir);
}

template <typename Ctx>
PREBUILD_SIMT_BODY void forward_block(const Ctx& ctx, NoShared&, const ForwardArgs& a) {
  simt::for_each_element(ctx, a.in.N, [&](int64_t i) { forward_element(a, i); });
}

template <typename Ctx>
PREBUILD_SIMT_BODY void backward_block(const Ctx& ctx, NoShared&, const BackwardArgs& a) {
  simt::for_each_element(ctx, a.in.N, [&](int64_t i) { backward_element(a, i); });
}

}  // namespace sh
}  // namespace gsplat
}  // namespace prebuild
