// The pack op family's CUDA block bodies (pack_kernels.h) run on the CPU by the SIMT
// launcher, for tests: the CPU kernels of torch.ops.prebuild_simt.pack_visible*. The scan is
// the host one (scan.h).
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "pack.h"
#include "pack_kernels.h"

namespace prebuild {
namespace gsplat {
namespace pack {
namespace {

struct SimtBackend : HostScan {
  static constexpr const char* name = "prebuild_simt::pack_visible";

  static void flag(const FlagArgs& a, const Tensor&) {
    simt::launch_op<NoShared>(name, element_geometry(a.n), a, flag_block<simt::HostContext>);
  }
  static void pack(const PackArgs& a, const Tensor&) {
    simt::launch_op<NoShared>(name, element_geometry(a.n), a, pack_block<simt::HostContext>);
  }
  static void unpack(const UnpackArgs& a, const Tensor&) {
    simt::launch_op<NoShared>(name, element_geometry(a.nnz), a, unpack_block<simt::HostContext>);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) { register_ops<SimtBackend>(m); }

}  // namespace pack
}  // namespace gsplat
}  // namespace prebuild
