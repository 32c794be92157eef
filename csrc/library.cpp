// Op schemas of the production library. It is always loaded first; backends register
// implementations for them: CPU in this library, CUDA in the separately loaded CUDA library.
// Autograd and fake (meta) kernels are registered from Python (src/prebuild/ops/).
#include <torch/csrc/stable/library.h>

#include <string>

#include <prebuild/cpu_isa.h>

#include "schemas.h"

namespace {

// Which copy of the CPU kernels runs (prebuild/cpu_isa.h): "avx512", "avx2" or "baseline".
std::string cpu_isa_name() { return prebuild::isa_name(prebuild::cpu_isa()); }

}  // namespace

STABLE_TORCH_LIBRARY(prebuild, m) {
  prebuild::define_ops(m);
  m.def("cpu_isa() -> str");
}

// No tensor arguments, so no backend key to dispatch on.
STABLE_TORCH_LIBRARY_IMPL(prebuild, CompositeExplicitAutograd, m) {
  m.impl("cpu_isa", TORCH_BOX(&cpu_isa_name));
}
