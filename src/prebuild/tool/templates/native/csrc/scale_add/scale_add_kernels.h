// scale_add's CUDA kernel as a block body on prebuild's SIMT layer: nvcc compiles it into the
// CUDA library, and the simt test library runs the same source on the CPU.
#pragma once

#include <cstdint>

#include <prebuild/simt.h>

#include "scale_add_math.h"

namespace ${namespace} {

constexpr int kThreads = 256;

struct ScaleAddArgs {
  const float* x;
  const float* y;
  float alpha;
  float* out;
  int64_t n;
};

template <typename Ctx>
PREBUILD_SIMT_BODY void scale_add_block(const Ctx& ctx, prebuild::simt::NoShared&, const ScaleAddArgs& a) {
  const int64_t i = int64_t{ctx.block().x} * ctx.block_dim().x + ctx.thread().x;
  if (i < a.n) a.out[i] = scale_add_one(a.x[i], a.y[i], a.alpha);
}

inline prebuild::simt::LaunchGeometry scale_add_geometry(int64_t n) {
  return {{static_cast<int>((n + kThreads - 1) / kThreads), 1, 1}, {kThreads, 1, 1}};
}

}  // namespace ${namespace}
