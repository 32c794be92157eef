// Schemas of the Gaussian-splatting intersect ops (see intersect.h for what they compute).
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_intersect_ops(Library& m) {
  m.def(
      "isect_tiles(Tensor means2d, Tensor radii, Tensor depths, int tile_size, int tile_width, "
      "int tile_height, bool sort=True, Tensor? image_ids=None, int? n_images=None) -> "
      "(Tensor, Tensor, Tensor)");
  m.def(
      "isect_offset_encode(Tensor isect_ids, int n_images, int tile_width, int tile_height) -> "
      "Tensor");
}

}  // namespace gsplat
}  // namespace prebuild
