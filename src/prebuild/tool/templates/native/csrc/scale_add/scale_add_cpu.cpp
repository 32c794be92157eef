// scale_add on the CPU: the same per-element math as the CUDA kernel (scale_add_math.h).
#include <torch/csrc/stable/library.h>

#include "scale_add.h"

namespace ${namespace} {
namespace {

Tensor scale_add_cpu(Tensor x, Tensor y, double alpha) {
  check_inputs(x, y, "${namespace}::scale_add");
  Tensor out = torch::stable::empty_like(x);
  const ScaleAddArgs a = make_args(x, y, alpha, out);
  for (int64_t i = 0; i < a.n; ++i) a.out[i] = scale_add_one(a.x[i], a.y[i], a.alpha);
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(${namespace}, CPU, m) { m.impl("scale_add", TORCH_BOX(&scale_add_cpu)); }

}  // namespace ${namespace}
