// The spherical-harmonics CUDA block bodies (sh_kernels.h) run on the CPU by the SIMT
// launcher, for tests: the CPU kernels of torch.ops.prebuild_simt.spherical_harmonics_*.
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "sh.h"
#include "sh_kernels.h"

namespace prebuild {
namespace gsplat {
namespace sh {
namespace {

// Runs `body` over the N directions.
template <typename Args, typename Body>
void run_simt(const char* op, const Args& args, const Body& body) {
  simt::launch_op<NoShared>(op, element_geometry(args.in.N), args, body);
}

struct SimtBackend : OnCpu {
  static constexpr const char* forward_name = "prebuild_simt::spherical_harmonics_forward";
  static constexpr const char* backward_name = "prebuild_simt::spherical_harmonics_backward";

  static void run_forward(const ForwardArgs& args, const Tensor&) {
    run_simt(forward_name, args, forward_block<simt::HostContext>);
  }

  static void run_backward(const BackwardArgs& args, const Tensor&) {
    run_simt(backward_name, args, backward_block<simt::HostContext>);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) { register_ops<SimtBackend>(m); }

}  // namespace sh
}  // namespace gsplat
}  // namespace prebuild
