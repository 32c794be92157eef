// The prefix sum that sizes a variable-length output (intersections, packed pairs) on the
// host: the CPU and simt backends' (the CUDA ones use CUB: scan_cuda.cuh).
#pragma once

#include <cstdint>

namespace prebuild {
namespace gsplat {

// Inclusive prefix sum of data[0, n) in place.
inline void inclusive_scan_host(int64_t* data, int64_t n) {
  for (int64_t i = 1; i < n; ++i) data[i] += data[i - 1];
}

}  // namespace gsplat
}  // namespace prebuild
