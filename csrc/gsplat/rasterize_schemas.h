// Schemas of the Gaussian-splatting rasterize ops.
#pragma once

namespace prebuild {
namespace gsplat {

template <typename Library>
void define_rasterize_ops(Library& m) {
  (void)m;  // TODO(rasterize): m.def(...) for each op of this family
}

}  // namespace gsplat
}  // namespace prebuild
