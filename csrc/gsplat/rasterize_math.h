// Per-pixel math of Gaussian rasterization (gsplat 1.5.3 rules), shared by the CUDA block
// bodies (rasterize_kernels.h, also run by the simt launcher) and the CPU backend.
//
// A pixel composites the depth-sorted Gaussians of its tile front to back. For a Gaussian
// with 2D mean m, conic (a, b, c) and opacity o, at the pixel centre p = (x + 0.5, y + 0.5),
// with d = m - p:
//   sigma = 0.5 (a dx^2 + c dy^2) + b dx dy,   alpha = min(0.999, o exp(-sigma)).
// It is skipped when sigma < 0 or alpha < 1/255. Otherwise, with T the transmittance in front
// of it, the pixel stops (without compositing it) once T (1 - alpha) <= 1e-4; else it adds
// alpha T color and T becomes T (1 - alpha). Finally
//   render_color = sum_i alpha_i T_i color_i + T_final background,  render_alpha = 1 - T_final.
//
// Backward (a pixel walks its composited Gaussians back to front, recovering T_i from the
// transmittance behind by division): with ra = 1 / (1 - alpha_i) and "behind" the colour
// composited after Gaussian i (sum_{j>i} alpha_j T_j color_j),
//   dL/dalpha_i = sum_k (color_ik T_i - behind_k ra) v_color_k
//                 + T_final ra (v_alpha - sum_k background_k v_color_k),
//   dL/dcolor_ik = alpha_i T_i v_color_k,
// and alpha's own VJP to the opacity, the conic and the mean (zero where alpha is clamped).
// The channel sums are taken as dot products with the pixel's v_color:
//   sum_k (color_ik T_i - behind_k ra) v_color_k = T_i (color_i . v) - ra (behind . v),
//   behind . v = sum_{j>i} alpha_j T_j (color_j . v),
// so a pixel carries one scalar behind the Gaussian instead of D channels, and the geometry
// gradients of a pixel come in one piece whatever D is (absgrad needs the whole piece).
#pragma once

#include <math.h>
#include <stdint.h>

#include <prebuild/hd.h>

namespace prebuild {
namespace gsplat {

constexpr float kAlphaThreshold = 1.f / 255.f;  // skip Gaussians fainter than this
constexpr float kMaxAlpha = 0.999f;             // alpha clamp
constexpr float kMinTransmittance = 1e-4f;      // stop once the next T would be <= this

// One Gaussian as the rasterizer sees it.
struct Splat {
  float x, y;        // 2D mean (pixels)
  float opacity;
  float a, b, c;     // conic: inverse 2D covariance [[a, b], [b, c]]
};

// A Gaussian evaluated at a pixel centre.
struct SplatHit {
  float dx, dy;  // mean - pixel centre
  float vis;     // exp(-sigma)
  float alpha;
};

struct SplatGrad {
  float x, y, opacity, a, b, c;
};

PREBUILD_HD float pixel_centre(int i) { return static_cast<float>(i) + 0.5f; }

// exp(-sigma) and 1 / (1 - alpha) of the compositing loops. On the GPU the special-function
// unit's approximations, as gsplat's --use_fast_math build: __expf's ex2.approx (relative
// error ~2^-21 over the exponents that reach 1/255) and __fdividef's rcp.approx (2 ulp),
// without the IEEE sequences' range handling and slow-path branch in the loops. Both are
// written as their .ftz forms, the same bits on normal numbers: without -ftz, __expf and
// __fdividef rescale denormals around the instruction (3 and 4 more instructions in every
// pair's test and composited step, SASS sm_90), and neither meets one here (an exp below
// 2^-126 makes alpha < 1/255, a skipped Gaussian either way; 1 - alpha lies in [0.001, 1]).
// The CPU and the simt harness keep expf and the division (the simt harness gives the CPU
// kernel's bytes); CUDA stays within the tests' written-down tolerances
// (tests/cuda/cuda_support.py).
PREBUILD_HD float splat_exp(float x) {
#if defined(__CUDA_ARCH__)
  float y;  // __expf(x) = ex2.approx(x log2 e)
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
#else
  return expf(x);
#endif
}

PREBUILD_HD float one_over(float x) {
#if defined(__CUDA_ARCH__)
  float y;  // __fdividef(1, x) = 1 * rcp.approx(x)
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.f / x;
#endif
}

// The Gaussian's exponent at offset (dx, dy) = mean - pixel centre.
PREBUILD_HD float splat_sigma(const Splat& s, float dx, float dy) {
  return 0.5f * (s.a * dx * dx + s.c * dy * dy) + s.b * dx * dy;
}

// Evaluates `s` at the pixel centre (px, py). Returns false when the Gaussian is skipped
// (sigma < 0 or alpha < 1/255). The tests are written so that NaN fails them: a Gaussian
// with a NaN mean, conic or opacity is skipped, never composited at fminf's 0.999 (fminf
// drops a NaN argument), so it cannot paint its tile opaque.
//
// `sigma_skip` (from skip_sigma, or +inf) lets a caller skip the exp of a Gaussian too far
// from the pixel to reach 1/255, with the same decision the full test would take.

PREBUILD_HD bool evaluate_splat(const Splat& s, float px, float py, SplatHit* h,
                                float sigma_skip = INFINITY) {
  const float dx = s.x - px, dy = s.y - py;
  const float sigma = splat_sigma(s, dx, dy);
  if (sigma > sigma_skip) return false;  // false for a NaN sigma: the full test rejects it
  const float vis = splat_exp(-sigma);
  const float raw_alpha = s.opacity * vis;
  h->dx = dx;
  h->dy = dy;
  h->vis = vis;
  h->alpha = fminf(kMaxAlpha, raw_alpha);
  // alpha >= 1/255 exactly when raw_alpha >= 1/255 (the clamp is far above the threshold).
  return sigma >= 0.f && raw_alpha >= kAlphaThreshold;
}

// A sigma above which Gaussian `opacity` is certainly skipped: ln(255 opacity) plus a margin
// of 0.01, far above the rounding of expf, of the product and of this bound (~1e-5), so
// opacity * expf(-sigma) < 1/255 there for sure. +inf (no shortcut) when opacity is not
// positive or is NaN. Most of a tile's Gaussians are far from most of its pixels: on the
// CPU, where a pixel's loop is scalar, their exps (and glibc's slow underflow path) were
// most of the time.
PREBUILD_HD float skip_sigma(float opacity) {
  return opacity > 0.f ? logf(255.f * opacity) + 0.01f : INFINITY;
}

// Front-to-back step. Returns false when the pixel is done (the Gaussian is not
// composited, T is unchanged); otherwise writes the Gaussian's weight alpha T and
// advances T.
PREBUILD_HD bool composite_step(float alpha, float* T, float* weight) {
  const float next_T = *T * (1.f - alpha);
  if (next_T <= kMinTransmittance) return false;
  *weight = alpha * *T;
  *T = next_T;
  return true;
}

// Back-to-front step: *T holds the transmittance behind the Gaussian; on return, the one
// in front of it. Returns ra = 1 / (1 - alpha).
PREBUILD_HD float uncomposite_step(float alpha, float* T) {
  const float ra = one_over(1.f - alpha);
  *T *= ra;
  return ra;
}

// sum_k a[k] b[k] over n channels.
PREBUILD_HD float channel_dot(const float* a, const float* b, int64_t n) {
  float sum = 0.f;
  for (int64_t k = 0; k < n; ++k) sum += a[k] * b[k];
  return sum;
}

// The colour terms of dL/dalpha (see top): color_dot = color_i . v_color, behind_dot =
// behind . v_color, T the transmittance in front.
PREBUILD_HD float alpha_vjp_colors(float color_dot, float behind_dot, float T, float ra) {
  return color_dot * T - behind_dot * ra;
}

// The pixel's terms of dL/dalpha through T_final: the rendered alpha and the background
// (bg_dot = sum_k background_k v_color_k, 0 without background).
PREBUILD_HD float alpha_vjp_pixel(float T_final, float ra, float v_alpha_out, float bg_dot) {
  return T_final * ra * (v_alpha_out - bg_dot);
}

// VJP of alpha = min(0.999, o exp(-sigma)) to the Gaussian's parameters. Where the clamp is
// active (o exp(-sigma) > 0.999) alpha does not depend on them: zero gradient.
PREBUILD_HD SplatGrad splat_vjp(const Splat& s, const SplatHit& h, float v_alpha) {
  SplatGrad g{0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (s.opacity * h.vis > kMaxAlpha) return g;
  const float v_sigma = -s.opacity * h.vis * v_alpha;
  g.a = 0.5f * v_sigma * h.dx * h.dx;
  g.b = v_sigma * h.dx * h.dy;
  g.c = 0.5f * v_sigma * h.dy * h.dy;
  g.x = v_sigma * (s.a * h.dx + s.b * h.dy);
  g.y = v_sigma * (s.b * h.dx + s.c * h.dy);
  g.opacity = h.vis * v_alpha;
  return g;
}

// Gaussian `g` (flat index image * N + id, or the packed index) of the per-Gaussian arrays.
PREBUILD_HD Splat load_splat(const float* means2d, const float* conics, const float* opacities,
                             int64_t g) {
  return {means2d[2 * g], means2d[2 * g + 1], opacities[g],
          conics[3 * g], conics[3 * g + 1], conics[3 * g + 2]};
}

// The run [*start, *end) of flatten_ids for tile `flat_tile` (image-major, like
// isect_offsets) out of `n_tiles` tiles and `n_isects` entries, clamped into [0, n_isects]
// so malformed offsets can never index out of bounds. A tile whose mask (masks: one bool per
// tile, or nullptr) is false gets an empty run: its pixels show the background, alpha 0.
PREBUILD_HD void tile_range(const int32_t* offsets, const bool* masks, int64_t flat_tile,
                            int64_t n_tiles, int64_t n_isects, int64_t* start, int64_t* end) {
  int64_t s = offsets[flat_tile];
  int64_t e = flat_tile + 1 < n_tiles ? offsets[flat_tile + 1] : n_isects;
  s = s < 0 ? 0 : (s > n_isects ? n_isects : s);
  e = e < s ? s : (e > n_isects ? n_isects : e);
  if (masks && !masks[flat_tile]) e = s;
  *start = s;
  *end = e;
}

}  // namespace gsplat
}  // namespace prebuild
