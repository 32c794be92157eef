// Schema of the MCMC relocation op (see relocation.h for what it computes). Forward only:
// gsplat 1.5.3 has no gradient for it either.
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_relocation_ops(Library& m) {
  m.def(
      "compute_relocation(Tensor opacities, Tensor scales, Tensor ratios, Tensor binoms) "
      "-> (Tensor new_opacities, Tensor new_scales)");
}

}  // namespace gsplat
}  // namespace prebuild
