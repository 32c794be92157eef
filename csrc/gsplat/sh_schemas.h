// Schemas of the spherical-harmonics ops (see sh.h for what they compute).
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_sh_ops(Library& m) {
  m.def(
      "spherical_harmonics_forward(int degrees_to_use, Tensor dirs, Tensor coeffs, "
      "Tensor? masks) -> Tensor colors");
  m.def(
      "spherical_harmonics_backward(int degrees_to_use, Tensor dirs, Tensor coeffs, "
      "Tensor? masks, Tensor v_colors, bool compute_v_dirs) -> "
      "(Tensor v_coeffs, Tensor v_dirs)");
}

}  // namespace gsplat
}  // namespace prebuild
