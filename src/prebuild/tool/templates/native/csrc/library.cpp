// Op schemas of ${package}'s CPU library, which is always loaded first; the CUDA library
// (loaded when torch has CUDA) and the simt test library register implementations for them.
#include <torch/csrc/stable/library.h>

#include "schemas.h"

STABLE_TORCH_LIBRARY(${namespace}, m) { ${namespace}::define_ops(m); }
