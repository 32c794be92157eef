// The quat_scale_to_covar_preci kernels' block bodies, written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and by the C++ compiler into the
// simt test library. One thread per Gaussian (the batch dimensions flattened), 256 threads
// per block, a grid-stride loop when there are more Gaussians than the grid has threads.
// Every Gaussian's outputs and gradients are its own: no atomics.
//
// The per-element functions (forward_element, backward_element) are also what the plain
// CPU backend runs, so all three backends share the math of covariance_math.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include <prebuild/simt_grid.h>
#include "covariance_math.h"

namespace prebuild {
namespace gsplat {
namespace covariance {

constexpr int kBlock = simt::kElementBlock;

using simt::LaunchGeometry;
using simt::NoShared;
using simt::element_geometry;

struct ForwardArgs {
  const float* quats;   // [n, 4]
  const float* scales;  // [n, 3]
  int64_t n;
  bool triu;            // outputs packed [n, 6] rather than [n, 3, 3]
  float* covars;        // or null: not computed
  float* precis;        // or null: not computed
};

struct BackwardArgs {
  const float* quats;     // [n, 4]
  const float* scales;    // [n, 3]
  int64_t n;
  bool triu;              // the incoming gradients are packed [n, 6] rather than [n, 3, 3]
  const float* v_covars;  // or null: no gradient through the covariances
  const float* v_precis;  // or null: no gradient through the precisions
  float* v_quats;         // [n, 4]
  float* v_scales;        // [n, 3]
};

PREBUILD_HD void forward_element(const ForwardArgs& a, int64_t i) {
  const float* scale = a.scales + i * 3;
  const Mat3 R = quat_to_rotmat(a.quats + i * 4);
  const int size = symmetric_size(a.triu);
  if (a.covars != nullptr) store_symmetric(covariance(R, scale), a.triu, a.covars + i * size);
  if (a.precis != nullptr) store_symmetric(precision(R, scale), a.triu, a.precis + i * size);
}

// Writes Gaussian i's gradients: the sum of what reaches it through each output given a
// gradient.
PREBUILD_HD void backward_element(const BackwardArgs& a, int64_t i) {
  const float* quat = a.quats + i * 4;
  const float* scale = a.scales + i * 3;
  const int size = symmetric_size(a.triu);
  float v_quat[4] = {0.f, 0.f, 0.f, 0.f}, v_scale[3] = {0.f, 0.f, 0.f};
  float part_quat[4], part_scale[3];
  if (a.v_covars != nullptr) {
    covariance_vjp(quat, scale, load_symmetric_grad(a.v_covars + i * size, a.triu), part_quat,
                   part_scale);
    for (int k = 0; k < 4; ++k) v_quat[k] += part_quat[k];
    for (int k = 0; k < 3; ++k) v_scale[k] += part_scale[k];
  }
  if (a.v_precis != nullptr) {
    precision_vjp(quat, scale, load_symmetric_grad(a.v_precis + i * size, a.triu), part_quat,
                  part_scale);
    for (int k = 0; k < 4; ++k) v_quat[k] += part_quat[k];
    for (int k = 0; k < 3; ++k) v_scale[k] += part_scale[k];
  }
  for (int k = 0; k < 4; ++k) a.v_quats[i * 4 + k] = v_quat[k];
  for (int k = 0; k < 3; ++k) a.v_scales[i * 3 + k] = v_scale[k];
}

template <typename Ctx>
PREBUILD_SIMT_BODY void forward_block(const Ctx& ctx, NoShared&, const ForwardArgs& a) {
  simt::for_each_element(ctx, a.n, [&](int64_t i) { forward_element(a, i); });
}

template <typename Ctx>
PREBUILD_SIMT_BODY void backward_block(const Ctx& ctx, NoShared&, const BackwardArgs& a) {
  simt::for_each_element(ctx, a.n, [&](int64_t i) { backward_element(a, i); });
}

}  // namespace covariance
}  // namespace gsplat
}  // namespace prebuild
