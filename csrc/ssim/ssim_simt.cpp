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

template <typename Body>
void run(const char* op, const LaunchGeometry& g, const Body& body) {
  try {
    simt::launch<SharedTile>(g.grid, g.block, body);
  } catch (const std::exception& e) {
    STD_TORCH_CHECK(false, op, " (simt): ", e.what());
  }
}

std::tuple<Tensor, Tensor> forward_simt(Tensor img1, Tensor img2, bool train) {
  constexpr const char* op = "prebuild_simt::fused_ssim_forward";
  check_images(img1, img2, op);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the simt backend runs on CPU tensors");
  check_tileable(img1, op);
  ForwardOutputs out = allocate_forward(img1, img2, train);
  const ForwardArgs args = out.args;
  if (args.planes * args.H * args.W > 0) {
    run(op, launch_geometry(args.planes, args.H, args.W),
        [&](const simt::HostContext& ctx, SharedTile& sh) { forward_block(ctx, sh, args); });
  }
  return {out.ssim_map, out.dS};
}

std::tuple<Tensor, Tensor> backward_simt(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS) {
  constexpr const char* op = "prebuild_simt::fused_ssim_backward";
  check_backward_inputs(grad_map, img1, img2, dS, op);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the simt backend runs on CPU tensors");
  check_tileable(img1, op);
  BackwardOutputs out = allocate_backward(grad_map, img1, img2, dS);
  const BackwardArgs args = out.args;
  if (args.planes * args.H * args.W > 0) {
    run(op, launch_geometry(args.planes, args.H, args.W),
        [&](const simt::HostContext& ctx, SharedTile& sh) { backward_block(ctx, sh, args); });
  }
  return {out.grad1, out.grad2};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_simt));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_simt));
}

}  // namespace ssim
}  // namespace prebuild
