// Op schemas of the simt test library (see prebuild/simt_launcher.h): the CUDA kernel bodies
// run on the CPU, reachable as torch.ops.prebuild_simt.* through prebuild.testing.
#include <torch/csrc/stable/library.h>

#include "../schemas.h"

STABLE_TORCH_LIBRARY(prebuild_simt, m) { prebuild::define_ops(m); }
