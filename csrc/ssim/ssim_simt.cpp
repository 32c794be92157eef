// Fused SSIM's CUDA block bodies (ssim_kernels.h) run on the CPU by the SIMT launcher, for
// tests: registered as the CPU kernels of torch.ops.prebuild_simt.fused_ssim_*.
#include <torch/csrc/stable/library.h>

#include <stdexcept>

#include "../simt/launcher.h"
#include "ssim.h"
#include "ssim_kernels.h"

namespace prebuild {
namespace ssim {
namespace {

bool on_cpu(const Tensor& t) { return t.is_cpu(); }

// Runs `body` for the grid; launcher errors (e.g. barrier divergence) become torch errors.
template <typename Args, typename Body>
void run_simt(const char* op, const LaunchGeometry& g, const Args& args, Body body) {
  try {
    simt::launch<SharedTile>(g.grid, g.block, [&](const simt::HostContext& ctx, SharedTile& sh) {
      body(ctx, sh, args);
    });
  } catch (const std::exception& e) {
    STD_TORCH_CHECK(false, op, " (simt): ", e.what());
  }
}

std::tuple<Tensor, Tensor> forward_simt(Tensor img1, Tensor img2, bool train) {
  constexpr const char* op = "prebuild_simt::fused_ssim_forward";
  return forward_tiled(img1, img2, train, op, "CPU", on_cpu,
                       [&](const LaunchGeometry& g, const ForwardArgs& args) {
                         run_simt(op, g, args, forward_block<simt::HostContext>);
                       });
}

std::tuple<Tensor, Tensor> backward_simt(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS) {
  constexpr const char* op = "prebuild_simt::fused_ssim_backward";
  return backward_tiled(grad_map, img1, img2, dS, op, "CPU", on_cpu,
                        [&](const LaunchGeometry& g, const BackwardArgs& args) {
                          run_simt(op, g, args, backward_block<simt::HostContext>);
                        });
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_simt));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_simt));
}

}  // namespace ssim
}  // namespace prebuild
