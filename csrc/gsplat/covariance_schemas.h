// Schemas of the quaternion-and-scale to covariance/precision ops (see covariance.h for what
// they compute). An output that is not computed is an empty tensor of shape (0,) (the public
// function returns None for it); an absent incoming gradient is None.
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_covariance_ops(Library& m) {
  m.def(
      "quat_scale_to_covar_preci_forward(Tensor quats, Tensor scales, bool compute_covar, "
      "bool compute_preci, bool triu) -> (Tensor covars, Tensor precis)");
  m.def(
      "quat_scale_to_covar_preci_backward(Tensor quats, Tensor scales, bool triu, "
      "Tensor? v_covars, Tensor? v_precis) -> (Tensor v_quats, Tensor v_scales)");
}

}  // namespace gsplat
}  // namespace prebuild
