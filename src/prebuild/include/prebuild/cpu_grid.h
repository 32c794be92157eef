// The CPU counterpart of simt_grid.h's element loop: fn(i) for every element i in [0, n), on
// PyTorch's thread pool, `grain` elements per task at least (small inputs stay on one thread).
#pragma once

#include <torch/csrc/stable/ops.h>

#include <cstdint>

namespace prebuild {
namespace cpu {

template <typename Fn>
void for_each_element(int64_t n, int64_t grain, const Fn& fn) {
  torch::stable::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
}

}  // namespace cpu
}  // namespace prebuild
