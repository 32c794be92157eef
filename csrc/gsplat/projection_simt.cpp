// The fully fused projection's CUDA block bodies (projection_kernels.h) run on the CPU by
// the SIMT launcher, for tests: the CPU kernels of torch.ops.prebuild_simt.fully_fused_*.
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "projection.h"
#include "projection_kernels.h"

namespace prebuild {
namespace gsplat {
namespace projection {
namespace {

// Runs `body` over the C * N pairs.
template <typename Args, typename Body>
void run_simt(const char* op, const Args& args, const Body& body) {
  simt::launch_op<NoShared>(op, launch_geometry(args.scene.C * args.scene.N), args, body);
}

struct SimtBackend : OnCpu {
  static constexpr const char* forward_name = "prebuild_simt::fully_fused_projection_forward";
  static constexpr const char* backward_name = "prebuild_simt::fully_fused_projection_backward";

  static void run_forward(const ForwardArgs& args, const Tensor&) {
    run_simt(forward_name, args, forward_block<simt::HostContext>);
  }

  static void run_backward(const BackwardArgs& args, const Tensor&) {
    run_simt(backward_name, args, backward_block<simt::HostContext>);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) { register_ops<SimtBackend>(m); }

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
