// Host-side pieces of the compute_relocation op family shared by its backends (CPU, CUDA,
// simt): input checks, output allocation, kernel arguments.
//
//   compute_relocation(opacities [N], scales [N, 3], ratios [N] int32, binoms [n_max, n_max])
//     -> (new_opacities [N], new_scales [N, 3])
// n_max >= 1; ratios are clamped to [1, n_max] (see relocation_math.h for the math). Floats
// float32, everything contiguous, on one device. Forward only: the outputs are not
// differentiable (the Python side marks them so).
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <limits>
#include <tuple>

#include <prebuild/checks.h>
#include "relocation_kernels.h"

namespace prebuild {
namespace gsplat {
namespace relocation {

using torch::stable::Tensor;

constexpr const char* kOp = "compute_relocation";

inline void check_input(const Tensor& t, const Tensor& opacities, const char* op,
                        const char* name) {
  check_same_device(t, opacities, op, name, "opacities");
  check_contiguous(t, op, name);
}

// Checks every input and that they are on the backend's device; returns the kernel arguments
// without the outputs.
template <typename Backend>
Args check_inputs(const Tensor& opacities, const Tensor& scales, const Tensor& ratios,
                  const Tensor& binoms, const char* op) {
  STD_TORCH_CHECK(opacities.dim() == 1, op, ": opacities must have shape [N], got ",
                  opacities.dim(), " dimensions");
  const int64_t n = opacities.size(0);
  check_input(opacities, opacities, op, "opacities");
  check_float32(opacities, op, "opacities");
  STD_TORCH_CHECK(scales.dim() == 2 && scales.size(0) == n && scales.size(1) == 3, op,
                  ": scales must have shape [N, 3] with N = ", n, " (the opacities')");
  check_input(scales, opacities, op, "scales");
  check_float32(scales, op, "scales");
  STD_TORCH_CHECK(ratios.dim() == 1 && ratios.size(0) == n, op,
                  ": ratios must have shape [N] with N = ", n, " (the opacities')");
  check_input(ratios, opacities, op, "ratios");
  STD_TORCH_CHECK(ratios.scalar_type() == torch::headeronly::ScalarType::Int, op,
                  ": ratios must be int32");
  STD_TORCH_CHECK(binoms.dim() == 2 && binoms.size(0) == binoms.size(1) && binoms.size(0) >= 1,
                  op, ": binoms must have shape [n_max, n_max] with n_max >= 1");
  STD_TORCH_CHECK(binoms.size(0) <= std::numeric_limits<int32_t>::max(), op,
                  ": n_max must fit in int32");
  check_input(binoms, opacities, op, "binoms");
  check_float32(binoms, op, "binoms");
  check_backend<Backend>(opacities, op);
  return {opacities.const_data_ptr<float>(),
          scales.const_data_ptr<float>(),
          ratios.const_data_ptr<int32_t>(),
          binoms.const_data_ptr<float>(),
          n,
          static_cast<int>(binoms.size(0)),
          nullptr,
          nullptr};
}

// The host function of every backend, registered as TORCH_BOX(&forward_op<Backend>): checks,
// outputs, then the backend's kernel unless there is nothing to compute. A Backend has static
// members
//   name: the op name for messages; device: its device's name;
//   on_device(t): whether t is on that device;
//   run(args, on): runs the kernel (`on`: a tensor of the call).
template <typename Backend>
std::tuple<Tensor, Tensor> forward_op(Tensor opacities, Tensor scales, Tensor ratios,
                                      Tensor binoms) {
  Args args = check_inputs<Backend>(opacities, scales, ratios, binoms, Backend::name);
  Tensor new_opacities = torch::stable::empty_like(opacities);
  Tensor new_scales = torch::stable::empty_like(scales);
  args.new_opacities = new_opacities.mutable_data_ptr<float>();
  args.new_scales = new_scales.mutable_data_ptr<float>();
  if (args.n > 0) Backend::run(args, opacities);
  return {new_opacities, new_scales};
}

// Registers the backend's implementation: STABLE_TORCH_LIBRARY_IMPL(ns, KEY, m) {
// register_ops<Backend>(m); }.
template <typename Backend, typename Library>
void register_ops(Library& m) {
  m.impl(kOp, TORCH_BOX(&forward_op<Backend>));
}

}  // namespace relocation
}  // namespace gsplat
}  // namespace prebuild
