// The compute_relocation kernel's block body, written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and by the C++ compiler into the
// simt test library. One thread per Gaussian, 256 threads per block, a grid-stride loop when
// there are more Gaussians than the grid has threads. Each Gaussian writes only its own
// outputs: no atomics, the same result on every backend.
//
// relocation_element is also what the plain CPU backend runs, so all three backends share
// the math of relocation_math.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include <prebuild/simt_grid.h>
#include "relocation_math.h"

namespace prebuild {
namespace gsplat {
namespace relocation {

constexpr int kBlock = simt::kElementBlock;

using simt::LaunchGeometry;
using simt::NoShared;
using simt::element_geometry;

struct Args {
  const float* opacities;  // [n]
  const float* scales;     // [n, 3]
  const int32_t* ratios;   // [n]; clamped to [1, n_max] when read
  const float* binoms;     // [n_max, n_max]
  int64_t n;
  int n_max;               // >= 1
  float* new_opacities;    // [n]
  float* new_scales;       // [n, 3]
};

PREBUILD_HD void relocation_element(const Args& a, int64_t i) {
  const float opacity = a.opacities[i];
  const int ratio = clamp_ratio(a.ratios[i], a.n_max);
  const float new_opacity = relocated_opacity(opacity, ratio);
  const float coeff = opacity / relocation_denominator(new_opacity, ratio, a.binoms, a.n_max);
  a.new_opacities[i] = new_opacity;
  for (int c = 0; c < 3; ++c) a.new_scales[i * 3 + c] = coeff * a.scales[i * 3 + c];
}

template <typename Ctx>
PREBUILD_SIMT_BODY void relocation_block(const Ctx& ctx, NoShared&, const Args& a) {
  simt::for_each_element(ctx, a.n, [&](int64_t i) { relocation_element(a, i); });
}

}  // namespace relocation
}  // namespace gsplat
}  // namespace prebuild
