// Grid-stride launches for kernels that run one thread per element: the launch geometry for n
// elements and the element loop each thread runs. The grid is capped (kMaxElementGrid blocks)
// and threads stride over the rest, so any n fits in one launch.
#pragma once

#include <algorithm>
#include <cstdint>

#include "simt.h"

namespace prebuild {
namespace simt {

constexpr int kElementBlock = 256;
constexpr int64_t kMaxElementGrid = 65535;  // keeps the grid small; threads stride over the rest

// Grid and block for n > 0 elements.
inline LaunchGeometry element_geometry(int64_t n) {
  const int64_t blocks =
      std::min<int64_t>((n + kElementBlock - 1) / kElementBlock, kMaxElementGrid);
  return {{static_cast<int>(blocks), 1, 1}, {kElementBlock, 1, 1}};
}

// The first element of the calling thread, and the distance to its next one.
template <typename Ctx>
PREBUILD_SIMT_BODY int64_t first_element(const Ctx& ctx) {
  return static_cast<int64_t>(ctx.block().x) * ctx.block_dim().x + ctx.thread().x;
}

template <typename Ctx>
PREBUILD_SIMT_BODY int64_t element_stride(const Ctx& ctx) {
  return static_cast<int64_t>(ctx.grid_dim().x) * ctx.block_dim().x;
}

// Runs element(i) for every i < n the calling thread owns.
template <typename Ctx, typename Element>
PREBUILD_SIMT_BODY void for_each_element(const Ctx& ctx, int64_t n, const Element& element) {
  for (int64_t i = first_element(ctx); i < n; i += element_stride(ctx)) element(i);
}

}  // namespace simt
}  // namespace prebuild
