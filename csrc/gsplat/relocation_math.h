// The math of MCMC relocation (Equation 9 of "3D Gaussian Splatting as Markov Chain Monte
// Carlo", as gsplat 1.5.3's compute_relocation evaluates it), host and device.
//
// A Gaussian of opacity o and scale s is split into n copies (n = its ratio) that together
// render like the original:
//   new opacity  a = 1 - (1 - o)^(1/n), so that 1 - (1 - a)^n = o,
//   new scale    o / D * s,  D = sum_{i=1..n} sum_{k=0..i-1} C[i-1][k] (-1)^k / sqrt(k+1) a^(k+1),
// C being the caller's binomial table. As in gsplat, everything is float32 and D is summed in
// that (i, k) order; its alternating terms cancel, so for large n and o near 1 D's error grows
// with the sum of the terms' magnitudes.
#pragma once

#include <cmath>
#include <cstdint>

#include <prebuild/hd.h>

namespace prebuild {
namespace gsplat {
namespace relocation {

// The ratio the formula uses: clamped to [1, n_max] as gsplat's wrapper clamps it, which also
// keeps every read of the binomial table in bounds whatever the caller passes.
PREBUILD_HD int clamp_ratio(int32_t ratio, int n_max) {
  return ratio < 1 ? 1 : (ratio > n_max ? n_max : ratio);
}

// 1 - (1 - o)^(1/n), through log1p/expm1: 1 - powf(1 - o, 1/n) loses the low bits of small
// opacities when it rounds 1 - o. For n = 1 the exact answer is o itself.
PREBUILD_HD float relocated_opacity(float opacity, int n) {
  if (n == 1) return opacity;
  return -expm1f(log1pf(-opacity) / static_cast<float>(n));
}

// D of Equation 9 for the new opacity a and ratio n (1 <= n <= n_max); binoms is the row-major
// [n_max, n_max] table.
PREBUILD_HD float relocation_denominator(float a, int n, const float* binoms, int n_max) {
  float denom = 0.f;
  for (int i = 1; i <= n; ++i) {
    const float* row = binoms + static_cast<int64_t>(i - 1) * n_max;
    float power = a;  // a^(k+1)
    for (int k = 0; k < i; ++k) {
      const float sign = (k % 2 == 0) ? 1.f : -1.f;
      denom += row[k] * (sign / sqrtf(static_cast<float>(k + 1)) * power);
      power *= a;
    }
  }
  return denom;
}

}  // namespace relocation
}  // namespace gsplat
}  // namespace prebuild
