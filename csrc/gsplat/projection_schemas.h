// Schemas of the Gaussian-splatting projection ops (see projection.h for what they compute).
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_projection_ops(Library& m) {
  m.def(
      "fully_fused_projection_forward(Tensor means, Tensor? covars, Tensor? quats, "
      "Tensor? scales, Tensor viewmats, Tensor Ks, int width, int height, float eps2d, "
      "float near_plane, float far_plane, float radius_clip, bool calc_compensations) -> "
      "(Tensor radii, Tensor means2d, Tensor depths, Tensor conics, Tensor compensations)");
  m.def(
      "fully_fused_projection_backward(Tensor means, Tensor? covars, Tensor? quats, "
      "Tensor? scales, Tensor viewmats, Tensor Ks, int width, int height, float eps2d, "
      "Tensor radii, Tensor conics, Tensor compensations, Tensor v_means2d, Tensor v_depths, "
      "Tensor v_conics, Tensor v_compensations) -> "
      "(Tensor v_means, Tensor v_covars, Tensor v_quats, Tensor v_scales)");
}

}  // namespace gsplat
}  // namespace prebuild
