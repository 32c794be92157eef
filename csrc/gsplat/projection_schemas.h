// Schemas of the Gaussian-splatting projection ops (see projection.h for what they compute).
// The forward returns radii last (the public function returns gsplat's order, radii first):
// opcheck's autograd test sums the outputs in order and fails when an integer one is first.
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_projection_ops(Library& m) {
  m.def(
      "fully_fused_projection_forward(Tensor means, Tensor? covars, Tensor? quats, "
      "Tensor? scales, Tensor? opacities, Tensor viewmats, Tensor Ks, int width, int height, "
      "float eps2d, float near_plane, float far_plane, float radius_clip, "
      "bool calc_compensations, int camera_model) -> "
      "(Tensor means2d, Tensor depths, Tensor conics, Tensor compensations, Tensor radii)");
  m.def(
      "fully_fused_projection_backward(Tensor means, Tensor? covars, Tensor? quats, "
      "Tensor? scales, Tensor viewmats, Tensor Ks, int width, int height, float eps2d, "
      "int camera_model, Tensor radii, Tensor conics, Tensor compensations, Tensor v_means2d, "
      "Tensor v_depths, Tensor v_conics, Tensor v_compensations, bool viewmats_requires_grad) "
      "-> (Tensor v_means, Tensor v_covars, Tensor v_quats, Tensor v_scales, "
      "Tensor v_viewmats)");
  m.def(
      "proj_forward(Tensor means, Tensor covars, Tensor Ks, int width, int height, "
      "int camera_model) -> (Tensor means2d, Tensor covars2d)");
  m.def(
      "proj_backward(Tensor means, Tensor covars, Tensor Ks, int width, int height, "
      "int camera_model, Tensor v_means2d, Tensor v_covars2d) -> "
      "(Tensor v_means, Tensor v_covars)");
}

}  // namespace gsplat
}  // namespace prebuild
