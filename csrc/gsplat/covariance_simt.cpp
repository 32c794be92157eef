// quat_scale_to_covar_preci's CUDA block bodies (covariance_kernels.h) run on the CPU by the
// SIMT launcher, for tests: the CPU kernels of torch.ops.prebuild_simt.quat_scale_to_covar_*.
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "covariance.h"
#include "covariance_kernels.h"

namespace prebuild {
namespace gsplat {
namespace covariance {
namespace {

// Runs `body` over the args.n Gaussians.
template <typename Args, typename Body>
void run_simt(const char* op, const Args& args, const Body& body) {
  simt::launch_op<NoShared>(op, element_geometry(args.n), args, body);
}

struct SimtBackend : OnCpu {
  static constexpr const char* forward_name = "prebuild_simt::quat_scale_to_covar_preci_forward";
  static constexpr const char* backward_name =
      "prebuild_simt::quat_scale_to_covar_preci_backward";

  static void run_forward(const ForwardArgs& args, const Tensor&) {
    run_simt(forward_name, args, forward_block<simt::HostContext>);
  }

  static void run_backward(const BackwardArgs& args, const Tensor&) {
    run_simt(backward_name, args, backward_block<simt::HostContext>);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) { register_ops<SimtBackend>(m); }

}  // namespace covariance
}  // namespace gsplat
}  // namespace prebuild
