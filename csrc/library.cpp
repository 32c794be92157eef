// Op schemas of the production library. It is always loaded first; backends register
// implementations for them: CPU in this library, CUDA in the separately loaded CUDA library.
// Autograd and fake (meta) kernels are registered from Python (src/prebuild/ops/).
#include <torch/csrc/stable/library.h>

#include "schemas.h"

STABLE_TORCH_LIBRARY(prebuild, m) { prebuild::define_ops(m); }
