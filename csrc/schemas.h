// Every op schema, once. The production library registers them under `prebuild`
// (library.cpp); the simt test library registers the same schemas under `prebuild_simt`
// (library_simt.cpp), so tests call both backends through one signature.
#pragma once

namespace prebuild {

template <typename Library>
void define_ops(Library& m) {
  m.def("fused_ssim_forward(Tensor img1, Tensor img2, bool train) -> (Tensor, Tensor)");
  m.def(
      "fused_ssim_backward(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS) -> "
      "(Tensor, Tensor)");
}

}  // namespace prebuild
