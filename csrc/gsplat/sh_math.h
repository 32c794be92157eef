// Per-direction math of the spherical-harmonics ops, shared by the CUDA kernels, the simt
// backend and the plain CPU backend (PREBUILD_HD: the same code on host and device).
//
// Conventions are gsplat 1.5.3's (SphericalHarmonicsCUDA.cu, _torch_impl._spherical_harmonics):
//   - the real SH basis of degree <= 4 in Sloan's form ("Efficient Spherical Harmonic
//     Evaluation", JCGT 2013), with gsplat's constants and basis order;
//   - colors[c] = sum_{k < (degree + 1)^2} basis_k(dir / |dir|) * coeffs[k][c], no +0.5 offset
//     (gsplat's rasterization adds it); coefficients past (degree + 1)^2 are not read and get
//     zero gradient;
//   - degree 0 does not read the direction: its colour is a constant times coeffs[0] and the
//     direction gets a zero gradient.
// The normalisation is gsplat's PyTorch one, F.normalize: dir / max(|dir|, 1e-12). gsplat's
// CUDA kernel multiplies by rsqrt(|dir|^2) instead, the same value except at a zero direction,
// where it gives NaN and F.normalize (and this code) the zero vector. A finite direction whose
// squared norm overflows float32 is rescaled first, so it still gets its true unit vector.
#pragma once

#include <cfloat>
#include <cmath>

#include <prebuild/hd.h>

namespace prebuild {
namespace gsplat {
namespace sh {

constexpr int kMaxDegree = 4;
constexpr int kMaxBases = (kMaxDegree + 1) * (kMaxDegree + 1);  // 25
constexpr float kNormEps = 1e-12f;                              // F.normalize's eps

PREBUILD_HD int num_bases(int degree) { return (degree + 1) * (degree + 1); }

PREBUILD_HD bool is_finite(float v) { return fabsf(v) <= FLT_MAX; }  // false for inf, NaN

// A direction divided by max(|d|, eps): the unit vector (x, y, z), 1 / max(|d|, eps), and
// whether |d| < eps (then the divisor is the constant eps, which the gradient sees).
struct UnitDir {
  float x, y, z;
  float inv_norm;
  bool clamped;
};

PREBUILD_HD UnitDir normalize_dir(float dx, float dy, float dz) {
  const float s = dx * dx + dy * dy + dz * dz;
  if (s < kNormEps * kNormEps) {
    const float inv = 1.f / kNormEps;
    return {dx * inv, dy * inv, dz * inv, inv, true};
  }
  // An infinite or NaN component makes |d| infinite or NaN: divided by it, as F.normalize and
  // gsplat's kernel do (NaN for that component, 0 for the finite ones with an infinite norm).
  if (s <= FLT_MAX || !is_finite(dx) || !is_finite(dy) || !is_finite(dz)) {
    const float inv = 1.f / sqrtf(s);
    return {dx * inv, dy * inv, dz * inv, inv, false};
  }
  // |d|^2 overflowed for a finite d: scale by the largest component (> 1e19 here) first.
  const float m = fmaxf(fabsf(dx), fmaxf(fabsf(dy), fabsf(dz)));
  const float sx = dx / m, sy = dy / m, sz = dz / m;
  const float inv = 1.f / sqrtf(sx * sx + sy * sy + sz * sz);
  return {sx * inv, sy * inv, sz * inv, inv / m, false};
}

// The gradient of the direction from the gradient (vx, vy, vz) of its unit vector:
// (v - (v . n) n) / |d|, or v / eps where |d| < eps (F.normalize's clamp).
PREBUILD_HD void normalize_dir_vjp(const UnitDir& n, float vx, float vy, float vz, float* v_dir) {
  if (n.clamped) {
    v_dir[0] = vx * n.inv_norm;
    v_dir[1] = vy * n.inv_norm;
    v_dir[2] = vz * n.inv_norm;
    return;
  }
  const float dot = vx * n.x + vy * n.y + vz * n.z;
  v_dir[0] = (vx - dot * n.x) * n.inv_norm;
  v_dir[1] = (vy - dot * n.y) * n.inv_norm;
  v_dir[2] = (vz - dot * n.z) * n.inv_norm;
}

// basis[k] for k < num_bases(degree), at the unit direction (x, y, z); 0 <= degree <= 4.
PREBUILD_HD void sh_basis(int degree, float x, float y, float z, float* basis) {
  basis[0] = 0.2820947917738781f;
  if (degree < 1) return;
  basis[1] = -0.48860251190292f * y;
  basis[2] = 0.48860251190292f * z;
  basis[3] = -0.48860251190292f * x;
  if (degree < 2) return;

  const float z2 = z * z;
  const float fTmp0B = -1.092548430592079f * z;
  const float fC1 = x * x - y * y;
  const float fS1 = 2.f * x * y;
  basis[4] = 0.5462742152960395f * fS1;
  basis[5] = fTmp0B * y;
  basis[6] = 0.9461746957575601f * z2 - 0.3153915652525201f;
  basis[7] = fTmp0B * x;
  basis[8] = 0.5462742152960395f * fC1;
  if (degree < 3) return;

  const float fTmp0C = -2.285228997322329f * z2 + 0.4570457994644658f;
  const float fTmp1B = 1.445305721320277f * z;
  const float fC2 = x * fC1 - y * fS1;
  const float fS2 = x * fS1 + y * fC1;
  basis[9] = -0.5900435899266435f * fS2;
  basis[10] = fTmp1B * fS1;
  basis[11] = fTmp0C * y;
  basis[12] = z * (1.865881662950577f * z2 - 1.119528997770346f);
  basis[13] = fTmp0C * x;
  basis[14] = fTmp1B * fC1;
  basis[15] = -0.5900435899266435f * fC2;
  if (degree < 4) return;

  const float fTmp0D = z * (-4.683325804901025f * z2 + 2.007139630671868f);
  const float fTmp1C = 3.31161143515146f * z2 - 0.47308734787878f;
  const float fTmp2B = -1.770130769779931f * z;
  const float fC3 = x * fC2 - y * fS2;
  const float fS3 = x * fS2 + y * fC2;
  basis[16] = 0.6258357354491763f * fS3;
  basis[17] = fTmp2B * fS2;
  basis[18] = fTmp1C * fS1;
  basis[19] = fTmp0D * y;
  basis[20] = 1.984313483298443f * z * basis[12] - 1.006230589874905f * basis[6];
  basis[21] = fTmp0D * x;
  basis[22] = fTmp1C * fC1;
  basis[23] = fTmp2B * fC2;
  basis[24] = 0.6258357354491763f * fC3;
}

// sum_k g[k] * d basis[k] / d(x, y, z) for k < num_bases(degree) (the basis's vector-Jacobian
// product at the unit direction; the unit-norm constraint is applied by normalize_dir_vjp).
PREBUILD_HD void sh_basis_vjp(int degree, float x, float y, float z, const float* g, float* v) {
  float vx = 0.f, vy = 0.f, vz = 0.f;
  if (degree >= 1) {
    vx += -0.48860251190292f * g[3];
    vy += -0.48860251190292f * g[1];
    vz += 0.48860251190292f * g[2];
  }
  if (degree >= 2) {
    const float z2 = z * z;
    const float fTmp0B = -1.092548430592079f * z, fTmp0B_z = -1.092548430592079f;
    const float fC1 = x * x - y * y, fC1_x = 2.f * x, fC1_y = -2.f * y;
    const float fS1 = 2.f * x * y, fS1_x = 2.f * y, fS1_y = 2.f * x;
    // basis 4 = a fS1, 5 = fTmp0B y, 6 = b z2 - c, 7 = fTmp0B x, 8 = a fC1
    vx += 0.5462742152960395f * (fS1_x * g[4] + fC1_x * g[8]) + fTmp0B * g[7];
    vy += 0.5462742152960395f * (fS1_y * g[4] + fC1_y * g[8]) + fTmp0B * g[5];
    vz += fTmp0B_z * (y * g[5] + x * g[7]) + 2.f * 0.9461746957575601f * z * g[6];

    if (degree >= 3) {
      const float fTmp0C = -2.285228997322329f * z2 + 0.4570457994644658f;
      const float fTmp0C_z = -2.f * 2.285228997322329f * z;
      const float fTmp1B = 1.445305721320277f * z, fTmp1B_z = 1.445305721320277f;
      const float fC2 = x * fC1 - y * fS1;
      const float fC2_x = fC1 + x * fC1_x - y * fS1_x, fC2_y = x * fC1_y - fS1 - y * fS1_y;
      const float fS2 = x * fS1 + y * fC1;
      const float fS2_x = fS1 + x * fS1_x + y * fC1_x, fS2_y = x * fS1_y + fC1 + y * fC1_y;
      const float pSH12 = z * (1.865881662950577f * z2 - 1.119528997770346f);
      const float pSH12_z = 3.f * 1.865881662950577f * z2 - 1.119528997770346f;
      // 9 = -a fS2, 10 = fTmp1B fS1, 11 = fTmp0C y, 12 = pSH12, 13 = fTmp0C x,
      // 14 = fTmp1B fC1, 15 = -a fC2
      vx += -0.5900435899266435f * (fS2_x * g[9] + fC2_x * g[15]) +
            fTmp1B * (fS1_x * g[10] + fC1_x * g[14]) + fTmp0C * g[13];
      vy += -0.5900435899266435f * (fS2_y * g[9] + fC2_y * g[15]) +
            fTmp1B * (fS1_y * g[10] + fC1_y * g[14]) + fTmp0C * g[11];
      vz += fTmp1B_z * (fS1 * g[10] + fC1 * g[14]) + fTmp0C_z * (y * g[11] + x * g[13]) +
            pSH12_z * g[12];

      if (degree >= 4) {
        const float fTmp0D = z * (-4.683325804901025f * z2 + 2.007139630671868f);
        const float fTmp0D_z = 3.f * -4.683325804901025f * z2 + 2.007139630671868f;
        const float fTmp1C = 3.31161143515146f * z2 - 0.47308734787878f;
        const float fTmp1C_z = 2.f * 3.31161143515146f * z;
        const float fTmp2B = -1.770130769779931f * z, fTmp2B_z = -1.770130769779931f;
        const float fC3_x = fC2 + x * fC2_x - y * fS2_x, fC3_y = x * fC2_y - fS2 - y * fS2_y;
        const float fS3_x = fS2 + x * fS2_x + y * fC2_x, fS3_y = x * fS2_y + fC2 + y * fC2_y;
        const float pSH6_z = 2.f * 0.9461746957575601f * z;
        const float pSH20_z =
            1.984313483298443f * (pSH12 + z * pSH12_z) - 1.006230589874905f * pSH6_z;
        // 16 = a fS3, 17 = fTmp2B fS2, 18 = fTmp1C fS1, 19 = fTmp0D y,
        // 20 = b z pSH12 - c pSH6, 21 = fTmp0D x, 22 = fTmp1C fC1, 23 = fTmp2B fC2, 24 = a fC3
        vx += 0.6258357354491763f * (fS3_x * g[16] + fC3_x * g[24]) +
              fTmp2B * (fS2_x * g[17] + fC2_x * g[23]) +
              fTmp1C * (fS1_x * g[18] + fC1_x * g[22]) + fTmp0D * g[21];
        vy += 0.6258357354491763f * (fS3_y * g[16] + fC3_y * g[24]) +
              fTmp2B * (fS2_y * g[17] + fC2_y * g[23]) +
              fTmp1C * (fS1_y * g[18] + fC1_y * g[22]) + fTmp0D * g[19];
        vz += fTmp2B_z * (fS2 * g[17] + fC2 * g[23]) + fTmp1C_z * (fS1 * g[18] + fC1 * g[22]) +
              fTmp0D_z * (y * g[19] + x * g[21]) + pSH20_z * g[20];
      }
    }
  }
  v[0] = vx;
  v[1] = vy;
  v[2] = vz;
}

}  // namespace sh
}  // namespace gsplat
}  // namespace prebuild
