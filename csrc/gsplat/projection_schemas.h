// Schemas of the Gaussian-splatting projection ops.
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_projection_ops(Library& m) {
  (void)m;  // TODO(projection): m.def(...) for each op of this family
}

}  // namespace gsplat
}  // namespace prebuild
