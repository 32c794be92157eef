// Op schemas of the simt test library: the CUDA block bodies run on the CPU, reachable as
// torch.ops.${namespace}_simt.* (built with PREBUILD_SIMT=1; release wheels do not carry it).
#include <torch/csrc/stable/library.h>

#include "../schemas.h"

STABLE_TORCH_LIBRARY(${namespace}_simt, m) { ${namespace}::define_ops(m); }
