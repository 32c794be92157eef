// The projection ops' CUDA block bodies (projection_kernels.h) run on the CPU by the SIMT
// launcher, for tests: the CPU kernels of torch.ops.prebuild_simt.{fully_fused_projection,
// proj}_*.
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "projection.h"
#include "projection_kernels.h"

namespace prebuild {
namespace gsplat {
namespace projection {
namespace {

struct SimtBackend : OnCpu {
  static constexpr const char* forward_name = "prebuild_simt::fully_fused_projection_forward";
  static constexpr const char* backward_name = "prebuild_simt::fully_fused_projection_backward";
  static constexpr const char* proj_forward_name = "prebuild_simt::proj_forward";
  static constexpr const char* proj_backward_name = "prebuild_simt::proj_backward";

  static void run_forward(const ForwardArgs& args, const Tensor&) {
    simt::launch_op<NoShared>(forward_name, element_geometry(pair_count(args.scene)), args,
                              forward_block<simt::HostContext>);
  }

  static void run_backward(const BackwardArgs& args, const Tensor&) {
    simt::launch_op<BackwardShared>(backward_name, element_geometry(pair_count(args.scene)), args,
                                    backward_block<simt::HostContext>);
  }

  static void run_proj_forward(const ProjArgs& args, const Tensor&) {
    simt::launch_op<NoShared>(proj_forward_name, element_geometry(args.I * args.N), args,
                              proj_forward_block<simt::HostContext>);
  }

  static void run_proj_backward(const ProjArgs& args, const Tensor&) {
    simt::launch_op<NoShared>(proj_backward_name, element_geometry(args.I * args.N), args,
                              proj_backward_block<simt::HostContext>);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) { register_ops<SimtBackend>(m); }

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
