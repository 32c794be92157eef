// The per-element math of scale_add, compiled for the CPU and (under nvcc) for the GPU: both
// backends run exactly this.
#pragma once

#include <prebuild/hd.h>

namespace ${namespace} {

PREBUILD_HD float scale_add_one(float x, float y, float alpha) { return x + alpha * y; }

}  // namespace ${namespace}
