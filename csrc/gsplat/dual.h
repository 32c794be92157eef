// Forward-mode dual numbers: a value and its derivative along one input direction.
//
// The camera projections (projection_math.h) are written once as templates over the scalar
// type. With float they compute the forward; with Dual, seeded along x, y or z, the same code
// gives the exact derivatives of the 2D mean and of the projection Jacobian that the backward
// needs, for every camera model, with no hand-derived second derivatives to get wrong.
#pragma once

#include <cmath>

#include <prebuild/hd.h>

namespace prebuild {
namespace gsplat {

struct Dual {
  float v;  // value
  float d;  // derivative along the seeded direction
};

PREBUILD_HD Dual dual_const(float v) { return {v, 0.f}; }

// A constant of scalar type T (float or Dual).
template <typename T>
PREBUILD_HD T constant(float v);
template <>
PREBUILD_HD float constant<float>(float v) { return v; }
template <>
PREBUILD_HD Dual constant<Dual>(float v) { return dual_const(v); }

PREBUILD_HD Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
PREBUILD_HD Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
PREBUILD_HD Dual operator-(Dual a) { return {-a.v, -a.d}; }
PREBUILD_HD Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
PREBUILD_HD Dual operator/(Dual a, Dual b) {
  const float inv = 1.f / b.v;
  return {a.v * inv, (a.d - a.v * inv * b.d) * inv};
}
PREBUILD_HD Dual operator+(Dual a, float b) { return {a.v + b, a.d}; }
PREBUILD_HD Dual operator+(float a, Dual b) { return {a + b.v, b.d}; }
PREBUILD_HD Dual operator-(Dual a, float b) { return {a.v - b, a.d}; }
PREBUILD_HD Dual operator-(float a, Dual b) { return {a - b.v, -b.d}; }
PREBUILD_HD Dual operator*(Dual a, float b) { return {a.v * b, a.d * b}; }
PREBUILD_HD Dual operator*(float a, Dual b) { return {a * b.v, a * b.d}; }
PREBUILD_HD Dual operator/(Dual a, float b) { return {a.v / b, a.d / b}; }
PREBUILD_HD Dual operator/(float a, Dual b) {
  const float inv = 1.f / b.v;
  return {a * inv, -a * inv * inv * b.d};
}

// The scalar functions the projections use, for float and Dual alike.
PREBUILD_HD float value_of(float a) { return a; }
PREBUILD_HD float value_of(Dual a) { return a.v; }

PREBUILD_HD float sqrt_of(float a) { return sqrtf(a); }
PREBUILD_HD Dual sqrt_of(Dual a) {
  const float s = sqrtf(a.v);
  return {s, a.d * 0.5f / s};
}

PREBUILD_HD float atan2_of(float y, float x) { return atan2f(y, x); }
PREBUILD_HD Dual atan2_of(Dual y, Dual x) {
  const float r2 = x.v * x.v + y.v * y.v;
  return {atan2f(y.v, x.v), (x.v * y.d - y.v * x.d) / r2};
}

// clamp(a, lo, hi); outside the bounds the result is a constant (no derivative), inside (bounds
// included) it is `a` itself: torch.clamp's gradient convention.
PREBUILD_HD float clamp_of(float a, float lo, float hi) { return fminf(hi, fmaxf(lo, a)); }
PREBUILD_HD Dual clamp_of(Dual a, float lo, float hi) {
  if (a.v > hi) return dual_const(hi);
  if (a.v < lo) return dual_const(lo);
  return a;
}

}  // namespace gsplat
}  // namespace prebuild
