// rasterize_to_pixels' CUDA block bodies (rasterize_kernels.h) run on the CPU by the SIMT
// launcher, for tests: registered as the CPU kernels of torch.ops.prebuild_simt.*.
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "rasterize.h"
#include "rasterize_kernels.h"

namespace prebuild {
namespace gsplat {
namespace {

bool on_cpu(const Tensor& t) { return t.is_cpu(); }

std::tuple<Tensor, Tensor, Tensor> forward_simt(Tensor means2d, Tensor conics, Tensor colors,
                                                Tensor opacities,
                                                std::optional<Tensor> backgrounds,
                                                int64_t image_width, int64_t image_height,
                                                int64_t tile_size, Tensor isect_offsets,
                                                Tensor flatten_ids, std::optional<Tensor> masks,
                                                bool /*absgrad: the backward's*/) {
  constexpr const char* op = "prebuild_simt::rasterize_to_pixels_forward";
  return forward_tiled(
      means2d, conics, colors, opacities, backgrounds, image_width, image_height, tile_size,
      isect_offsets, flatten_ids, masks, op, "CPU", on_cpu,
      [&](auto chunk, const LaunchGeometry& g, const ForwardArgs& args) {
        constexpr int K = decltype(chunk)::value;
        simt::launch_op<SplatBatch>(op, g, args, forward_block<K, simt::HostContext>);
      });
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> backward_simt(
    Tensor means2d, Tensor conics, Tensor colors, Tensor opacities,
    std::optional<Tensor> backgrounds, int64_t image_width, int64_t image_height,
    int64_t tile_size, Tensor isect_offsets, Tensor flatten_ids, std::optional<Tensor> masks,
    Tensor render_alphas, Tensor last_ids, Tensor v_render_colors,
    std::optional<Tensor> v_render_alphas, bool absgrad) {
  constexpr const char* op = "prebuild_simt::rasterize_to_pixels_backward";
  return backward_tiled(
      means2d, conics, colors, opacities, backgrounds, image_width, image_height, tile_size,
      isect_offsets, flatten_ids, masks, render_alphas, last_ids, v_render_colors,
      v_render_alphas, absgrad, op, "CPU", on_cpu,
      [&](auto chunk, const LaunchGeometry& g, const BackwardArgs& args) {
        constexpr int K = decltype(chunk)::value;
        simt::launch_op<BackwardShared<K>>(op, g, args, backward_block<K, simt::HostContext>);
      });
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) {
  m.impl("rasterize_to_pixels_forward", TORCH_BOX(&forward_simt));
  m.impl("rasterize_to_pixels_backward", TORCH_BOX(&backward_simt));
}

}  // namespace gsplat
}  // namespace prebuild
