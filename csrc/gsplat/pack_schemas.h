// Schemas of the pack op family (see pack.h for what they compute).
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_pack_ops(Library& m) {
  m.def(
      "pack_visible(Tensor radii, Tensor means2d, Tensor depths, Tensor conics, "
      "Tensor? compensations, Tensor? opacities=None, Tensor? colors=None) -> "
      "(Tensor batch_ids, Tensor camera_ids, Tensor gaussian_ids, Tensor image_ids, "
      "Tensor radii_packed, Tensor means2d_packed, Tensor depths_packed, Tensor conics_packed, "
      "Tensor compensations_packed, Tensor opacities_packed, Tensor colors_packed)");
  m.def(
      "pack_visible_backward(Tensor image_ids, Tensor gaussian_ids, Tensor? v_means2d, "
      "Tensor? v_depths, Tensor? v_conics, Tensor? v_compensations, Tensor? v_opacities, "
      "Tensor? v_colors, int B, int C, int N) -> (Tensor v_means2d_dense, "
      "Tensor v_depths_dense, Tensor v_conics_dense, Tensor v_compensations_dense, "
      "Tensor v_opacities_dense, Tensor v_colors_dense)");
}

}  // namespace gsplat
}  // namespace prebuild
