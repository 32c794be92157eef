// Schemas of every prebuild op, defined once, in the CPU library (which is always loaded
// first). Backends register implementations for them: CPU in this library, CUDA in the
// separately loaded CUDA library. Autograd and fake (meta) kernels are registered from
// Python (src/prebuild/ops/).
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(prebuild, m) {
  m.def("fused_ssim_forward(Tensor img1, Tensor img2, bool train) -> (Tensor, Tensor)");
  m.def(
      "fused_ssim_backward(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS) -> "
      "(Tensor, Tensor)");
}
