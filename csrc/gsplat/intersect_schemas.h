// Schemas of the Gaussian-splatting intersect ops.
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_intersect_ops(Library& m) {
  (void)m;  // TODO(intersect): m.def(...) for each op of this family
}

}  // namespace gsplat
}  // namespace prebuild
