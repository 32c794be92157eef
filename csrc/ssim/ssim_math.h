// Per-pixel SSIM math shared by the CUDA kernels and the CPU implementation.
//
// SSIM of two images x, y at a pixel, from the Gaussian-weighted local moments
//   mu_x = G*x, mu_y = G*y, s_xx = G*(x^2) - mu_x^2, s_yy = G*(y^2) - mu_y^2,
//   s_xy = G*(xy) - mu_x mu_y
// (G: 11x11 separable Gaussian window, sigma 1.5, zero padding outside the image) is
//   S = (2 mu_x mu_y + C1)(2 s_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(s_xx + s_yy + C2)).
//
// For the backward pass the forward stores, per pixel, the derivatives of S with respect to
// the five raw window sums (G*x, G*x^2, G*y, G*y^2, G*xy) (four distinct maps, DistinctMap). Because G is symmetric, the
// gradient of a loss L with respect to the images is then, with g = dL/dS:
//   dL/dx = G*(g dS/d(G*x)) + 2x G*(g dS/d(G*x^2)) + y G*(g dS/d(G*xy))
//   dL/dy = G*(g dS/d(G*y)) + 2y G*(g dS/d(G*y^2)) + x G*(g dS/d(G*xy))
// i.e. separable convolutions of three maps for img1's gradient (four for both: dS/d(G*x^2)
// and dS/d(G*y^2) are one map), which is what the backward kernels compute.
#pragma once

#include <prebuild/hd.h>

namespace prebuild {
namespace ssim {

constexpr int kWindow = 11;
constexpr int kRadius = kWindow / 2;  // 5: the halo around a tile, and the "valid" crop
constexpr float kC1 = 0.01f * 0.01f;
constexpr float kC2 = 0.03f * 0.03f;

// Index of each of the five window sums / derivative maps.
enum Moment : int { kX = 0, kXX = 1, kY = 2, kYY = 3, kXY = 4, kNumMoments = 5 };

// The derivative maps the backward needs: of the five, dS/d(G*x^2) and dS/d(G*y^2) are the
// same map (ssim_from_sums), so four distinct ones, and img1's gradient alone reads only the
// first three. dS is stored as these maps, in this order.
enum DistinctMap : int { kDX = 0, kDSquares = 1, kDXY = 2, kDY = 3 };
// DistinctMap -> Moment (a function, not an array: device code can call it).
PREBUILD_HD constexpr int moment_of(int map) {
  return map == kDX ? kX : map == kDSquares ? kXX : map == kDXY ? kXY : kY;
}
constexpr int kMapsImg1 = 3, kMapsBoth = 4;

// The window sums of the M distinct maps (DistinctMap order) as the five Moment-indexed sums
// image1_grad and image2_grad read (img2's two are zero when M is 3: img1's do not read them).
template <int M>
PREBUILD_HD void distinct_to_moments(const float (&distinct)[M], float sums[kNumMoments]) {
  static_assert(M == kMapsImg1 || M == kMapsBoth, "img1's three maps or all four");
  sums[kX] = distinct[kDX];
  sums[kXX] = sums[kYY] = distinct[kDSquares];
  sums[kXY] = distinct[kDXY];
  sums[kY] = M == kMapsBoth ? distinct[M == kMapsBoth ? kDY : 0] : 0.f;
}

// Normalised 1-D Gaussian, sigma 1.5: exp(-(k-5)^2 / 4.5) / sum (tests check these values).
PREBUILD_HD float gauss_weight(int k) {
  constexpr float w[kWindow] = {
      1.028380084e-03f, 7.598758135e-03f, 3.600077213e-02f, 1.093606895e-01f,
      2.130055377e-01f, 2.660117249e-01f, 2.130055377e-01f, 1.093606895e-01f,
      3.600077213e-02f, 7.598758135e-03f, 1.028380084e-03f};
  return w[k];
}

// The five products whose window sums SSIM needs, for one pixel pair.
PREBUILD_HD void pixel_products(float x, float y, float out[kNumMoments]) {
  out[kX] = x;
  out[kXX] = x * x;
  out[kY] = y;
  out[kYY] = y * y;
  out[kXY] = x * y;
}

// SSIM at one pixel from its five window sums. When `dS` is not null, also writes
// dS/d(window sum) for each of the five sums (indexed by Moment).
PREBUILD_HD float ssim_from_sums(const float sums[kNumMoments], float* dS) {
  const float mu_x = sums[kX];
  const float mu_y = sums[kY];
  const float s_xx = sums[kXX] - mu_x * mu_x;
  const float s_yy = sums[kYY] - mu_y * mu_y;
  const float s_xy = sums[kXY] - mu_x * mu_y;

  const float a = 2.f * mu_x * mu_y + kC1;  // luminance numerator
  const float b = 2.f * s_xy + kC2;         // contrast-structure numerator
  const float c = mu_x * mu_x + mu_y * mu_y + kC1;
  const float d = s_xx + s_yy + kC2;
  const float cd = c * d;
  const float S = (a * b) / cd;  // a division: S is exactly 1 where both windows are equal

  if (dS != nullptr) {
    // Reciprocals of c and d for the derivatives: five divisions were a tenth of the CUDA
    // forward's instructions.
    const float inv_c = 1.f / c, inv_d = 1.f / d;
    const float inv_cd = inv_c * inv_d;
    // Partial derivatives with respect to the moments...
    const float dS_dmux_direct = (2.f * mu_y * b) * inv_cd - S * (2.f * mu_x) * inv_c;
    const float dS_dmuy_direct = (2.f * mu_x * b) * inv_cd - S * (2.f * mu_y) * inv_c;
    const float dS_dsxx = -S * inv_d;  // also dS/dsyy
    const float dS_dsxy = (2.f * a) * inv_cd;
    // ...then the chain rule through s_xx = G*x^2 - mu_x^2 etc. to the raw window sums.
    dS[kXX] = dS_dsxx;
    dS[kYY] = dS_dsxx;
    dS[kXY] = dS_dsxy;
    dS[kX] = dS_dmux_direct - 2.f * mu_x * dS_dsxx - mu_y * dS_dsxy;
    dS[kY] = dS_dmuy_direct - 2.f * mu_y * dS_dsxx - mu_x * dS_dsxy;
  }
  return S;
}

// The gradient of each image at one pixel from the window sums of g * dS/d(sum) (see top).
// Each reads only its own three sums: img1's gradient never needs conv[kY] or conv[kYY].
PREBUILD_HD float image1_grad(float x, float y, const float conv[kNumMoments]) {
  return conv[kX] + 2.f * x * conv[kXX] + y * conv[kXY];
}
PREBUILD_HD float image2_grad(float x, float y, const float conv[kNumMoments]) {
  return conv[kY] + 2.f * y * conv[kYY] + x * conv[kXY];
}

}  // namespace ssim
}  // namespace prebuild
