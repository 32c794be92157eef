// rasterize_to_pixels on CUDA: thin __global__ wrappers over the block bodies of
// rasterize_kernels.h (one instance per channel bucket), and the host functions registered
// for the CUDA dispatch key.
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>
#include "rasterize.h"
#include "rasterize_kernels.h"

namespace prebuild {
namespace gsplat {
namespace {

template <int kChunk>
__global__ void __launch_bounds__(kMaxBlockThreads) rasterize_forward_kernel(ForwardArgs args) {
  __shared__ SplatBatch shared;
  forward_block<kChunk>(simt::DeviceContext{}, shared, args);
}

template <int kChunk>
__global__ void __launch_bounds__(kMaxBlockThreads) rasterize_backward_kernel(BackwardArgs args) {
  __shared__ BackwardShared<kChunk> shared;
  backward_block<kChunk>(simt::DeviceContext{}, shared, args);
}

bool on_gpu(const Tensor& t) { return t.is_cuda(); }

std::tuple<Tensor, Tensor, Tensor> forward_cuda(Tensor means2d, Tensor conics, Tensor colors,
                                                Tensor opacities,
                                                std::optional<Tensor> backgrounds,
                                                int64_t image_width, int64_t image_height,
                                                int64_t tile_size, Tensor isect_offsets,
                                                Tensor flatten_ids, std::optional<Tensor> masks,
                                                bool /*absgrad: the backward's*/) {
  return forward_tiled(
      means2d, conics, colors, opacities, backgrounds, image_width, image_height, tile_size,
      isect_offsets, flatten_ids, masks, "prebuild::rasterize_to_pixels_forward", "CUDA", on_gpu,
      [&](auto chunk, const LaunchGeometry& g, const ForwardArgs& args) {
        launch("rasterize_to_pixels_forward", rasterize_forward_kernel<decltype(chunk)::value>,
               g, 0, means2d, args);
      });
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> backward_cuda(
    Tensor means2d, Tensor conics, Tensor colors, Tensor opacities,
    std::optional<Tensor> backgrounds, int64_t image_width, int64_t image_height,
    int64_t tile_size, Tensor isect_offsets, Tensor flatten_ids, std::optional<Tensor> masks,
    Tensor render_alphas, Tensor last_ids, Tensor v_render_colors,
    std::optional<Tensor> v_render_alphas, bool absgrad) {
  return backward_tiled(
      means2d, conics, colors, opacities, backgrounds, image_width, image_height, tile_size,
      isect_offsets, flatten_ids, masks, render_alphas, last_ids, v_render_colors,
      v_render_alphas, absgrad, "prebuild::rasterize_to_pixels_backward", "CUDA", on_gpu,
      [&](auto chunk, const LaunchGeometry& g, const BackwardArgs& args) {
        launch("rasterize_to_pixels_backward",
               rasterize_backward_kernel<decltype(chunk)::value>, g, 0, means2d, args);
      });
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) {
  m.impl("rasterize_to_pixels_forward", TORCH_BOX(&forward_cuda));
  m.impl("rasterize_to_pixels_backward", TORCH_BOX(&backward_cuda));
}

}  // namespace gsplat
}  // namespace prebuild
