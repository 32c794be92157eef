// scale_add's CUDA block body run on the CPU by prebuild's SIMT launcher, for tests:
// registered as the CPU kernel of torch.ops.${namespace}_simt.scale_add.
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>

#include "scale_add.h"

namespace ${namespace} {
namespace {

Tensor scale_add_simt(Tensor x, Tensor y, double alpha) {
  constexpr const char* op = "${namespace}_simt::scale_add";
  check_inputs(x, y, op);
  Tensor out = torch::stable::empty_like(x);
  if (x.numel() == 0) return out;
  prebuild::simt::launch_op<prebuild::simt::NoShared>(op, scale_add_geometry(x.numel()), make_args(x, y, alpha, out),
                                                      scale_add_block<prebuild::simt::HostContext>);
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(${namespace}_simt, CPU, m) { m.impl("scale_add", TORCH_BOX(&scale_add_simt)); }

}  // namespace ${namespace}
