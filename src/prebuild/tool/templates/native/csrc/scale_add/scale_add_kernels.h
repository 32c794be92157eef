// scale_add's CUDA kernel as a block body on prebuild's SIMT layer: nvcc compiles it into the
// CUDA library, and the simt test library runs the same source on the CPU.
#pragma once

#include <cstdint>

#include <prebuild/simt_grid.h>

#include "scale_add_math.h"

namespace ${namespace} {

constexpr int kThreads = prebuild::simt::kElementBlock;

struct ScaleAddArgs {
  const float* x;
  const float* y;
  float alpha;
  float* out;
  int64_t n;
};

template <typename Ctx>
PREBUILD_SIMT_BODY void scale_add_block(const Ctx& ctx, prebuild::simt::NoShared&, const ScaleAddArgs& a) {
  // A grid-stride loop: every element, whatever the grid (element_geometry caps it).
  prebuild::simt::for_each_element(
      ctx, a.n, [&](int64_t i) { a.out[i] = scale_add_one(a.x[i], a.y[i], a.alpha); });
}

inline prebuild::simt::LaunchGeometry scale_add_geometry(int64_t n) {
  return prebuild::simt::element_geometry(n);
}

}  // namespace ${namespace}
