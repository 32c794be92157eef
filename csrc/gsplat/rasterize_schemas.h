// Schemas of the Gaussian-splatting rasterize ops (see rasterize.h for what they compute).
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_rasterize_ops(Library& m) {
  m.def(
      "rasterize_to_pixels_forward(Tensor means2d, Tensor conics, Tensor colors, "
      "Tensor opacities, Tensor? backgrounds, int image_width, int image_height, "
      "int tile_size, Tensor isect_offsets, Tensor flatten_ids, Tensor? masks=None, "
      "bool absgrad=False) -> (Tensor, Tensor, Tensor)");
  m.def(
      "rasterize_to_pixels_backward(Tensor means2d, Tensor conics, Tensor colors, "
      "Tensor opacities, Tensor? backgrounds, int image_width, int image_height, "
      "int tile_size, Tensor isect_offsets, Tensor flatten_ids, Tensor? masks, "
      "Tensor render_alphas, Tensor last_ids, Tensor v_render_colors, Tensor? v_render_alphas, "
      "bool absgrad=False) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

}  // namespace gsplat
}  // namespace prebuild
