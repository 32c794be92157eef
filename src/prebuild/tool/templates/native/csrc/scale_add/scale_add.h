// Host code of scale_add shared by its backends: input checks and the output.
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

#include <prebuild/checks.h>

#include "scale_add_kernels.h"

namespace ${namespace} {

using torch::stable::Tensor;

// The Python wrapper validates first with precise messages; these checks keep direct
// torch.ops.${namespace}.scale_add calls from reading out of bounds.
inline void check_inputs(const Tensor& x, const Tensor& y, const char* op) {
  prebuild::check_same_shape(x, y, op, "x", "y");
  prebuild::check_same_device(x, y, op, "x", "y");
  prebuild::check_float32(x, op, "x");
  prebuild::check_float32(y, op, "y");
  prebuild::check_contiguous(x, op, "x");
  prebuild::check_contiguous(y, op, "y");
  STD_TORCH_CHECK(x.numel() < (int64_t{1} << 40), op, ": too many elements");
}

inline ScaleAddArgs make_args(const Tensor& x, const Tensor& y, double alpha, Tensor& out) {
  return {x.const_data_ptr<float>(), y.const_data_ptr<float>(), static_cast<float>(alpha),
          out.mutable_data_ptr<float>(), x.numel()};
}

}  // namespace ${namespace}
