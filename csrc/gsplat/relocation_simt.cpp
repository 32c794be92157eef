// compute_relocation's CUDA block body (relocation_kernels.h) run on the CPU by the SIMT
// launcher, for tests: the CPU kernel of torch.ops.prebuild_simt.compute_relocation.
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "relocation.h"
#include "relocation_kernels.h"

namespace prebuild {
namespace gsplat {
namespace relocation {
namespace {

struct SimtBackend : OnCpu {
  static constexpr const char* name = "prebuild_simt::compute_relocation";

  static void run(const Args& args, const Tensor&) {
    simt::launch_op<NoShared>(name, element_geometry(args.n), args,
                              relocation_block<simt::HostContext>);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) { register_ops<SimtBackend>(m); }

}  // namespace relocation
}  // namespace gsplat
}  // namespace prebuild
