// The math of 3D Gaussians' shape, shared by the covariance ops and the projection
// (projection_math.h includes this header), host and device.
//
// A Gaussian with quaternion q = (w, x, y, z) (normalised first) and scales s has
//   R = quat_to_rotmat(q),  M = R diag(s) (scaled_rotation),
//   covariance  S = M M^T = R diag(s)^2 R^T,
//   precision   S^-1 = P P^T with P = R diag(1/s) = R diag(s)^-2 R^T.
// The vector-Jacobian products follow gsplat 1.5.3's: dL/dM = (G + G^T) M for a gradient G
// of M M^T (G need not be symmetric), then through R and diag(s); the precision's runs the
// covariance's on 1/s and chains d(1/s)/ds = -1/s^2.
//
// Packed symmetric matrices (triu) hold the upper triangle (xx, xy, xz, yy, yz, zz). gsplat's
// plain-PyTorch packing averages each off-diagonal pair, so the gradient of a packed
// off-diagonal entry splits in halves between the two entries it stands for.
#pragma once

#include <cmath>

#include <prebuild/hd.h>

namespace prebuild {
namespace gsplat {

// Row-major 3x3 matrix.
struct Mat3 {
  float m[3][3];
};

PREBUILD_HD Mat3 mat3_zero() {
  Mat3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = 0.f;
  return r;
}

PREBUILD_HD Mat3 matmul(const Mat3& A, const Mat3& B) {
  Mat3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      r.m[i][j] = A.m[i][0] * B.m[0][j] + A.m[i][1] * B.m[1][j] + A.m[i][2] * B.m[2][j];
  return r;
}

// A B^T
PREBUILD_HD Mat3 matmul_bt(const Mat3& A, const Mat3& B) {
  Mat3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      r.m[i][j] = A.m[i][0] * B.m[j][0] + A.m[i][1] * B.m[j][1] + A.m[i][2] * B.m[j][2];
  return r;
}

// A^T B
PREBUILD_HD Mat3 matmul_at(const Mat3& A, const Mat3& B) {
  Mat3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      r.m[i][j] = A.m[0][i] * B.m[0][j] + A.m[1][i] * B.m[1][j] + A.m[2][i] * B.m[2][j];
  return r;
}

// ------------------------------------------------------------- quaternion and covariance

// Rotation of the quaternion (w, x, y, z), normalised first.
PREBUILD_HD Mat3 quat_to_rotmat(const float* q) {
  const float inv = 1.f / sqrtf(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  const float w = q[0] * inv, x = q[1] * inv, y = q[2] * inv, z = q[3] * inv;
  Mat3 R;
  R.m[0][0] = 1.f - 2.f * (y * y + z * z);
  R.m[0][1] = 2.f * (x * y - w * z);
  R.m[0][2] = 2.f * (x * z + w * y);
  R.m[1][0] = 2.f * (x * y + w * z);
  R.m[1][1] = 1.f - 2.f * (x * x + z * z);
  R.m[1][2] = 2.f * (y * z - w * x);
  R.m[2][0] = 2.f * (x * z - w * y);
  R.m[2][1] = 2.f * (y * z + w * x);
  R.m[2][2] = 1.f - 2.f * (x * x + y * y);
  return R;
}

// M = R diag(s): the covariance is M M^T.
PREBUILD_HD Mat3 scaled_rotation(const Mat3& R, const float* s) {
  Mat3 M;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) M.m[i][j] = R.m[i][j] * s[j];
  return M;
}

// d/d(quat) of a loss whose gradient with respect to R = quat_to_rotmat(quat) is G.
PREBUILD_HD void quat_to_rotmat_vjp(const float* q, const Mat3& G, float* v_quat) {
  const float inv = 1.f / sqrtf(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  const float w = q[0] * inv, x = q[1] * inv, y = q[2] * inv, z = q[3] * inv;
  const float(*g)[3] = G.m;
  // Gradient with respect to the normalised quaternion...
  const float vn[4] = {
      2.f * (x * (g[2][1] - g[1][2]) + y * (g[0][2] - g[2][0]) + z * (g[1][0] - g[0][1])),
      2.f * (-2.f * x * (g[1][1] + g[2][2]) + y * (g[0][1] + g[1][0]) + z * (g[0][2] + g[2][0]) +
             w * (g[2][1] - g[1][2])),
      2.f * (x * (g[0][1] + g[1][0]) - 2.f * y * (g[0][0] + g[2][2]) + z * (g[1][2] + g[2][1]) +
             w * (g[0][2] - g[2][0])),
      2.f * (x * (g[0][2] + g[2][0]) + y * (g[1][2] + g[2][1]) - 2.f * z * (g[0][0] + g[1][1]) +
             w * (g[1][0] - g[0][1]))};
  // ...then through the normalisation (drop the radial component, divide by the norm).
  const float qn[4] = {w, x, y, z};
  const float radial = vn[0] * w + vn[1] * x + vn[2] * y + vn[3] * z;
  for (int i = 0; i < 4; ++i) v_quat[i] = (vn[i] - radial * qn[i]) * inv;
}

// d/d(quat, scale) of a loss whose gradient with respect to the covariance R S^2 R^T is G.
PREBUILD_HD void covariance_vjp(const float* quat, const float* scale, const Mat3& G,
                                float* v_quat, float* v_scale) {
  const Mat3 R = quat_to_rotmat(quat);
  const Mat3 M = scaled_rotation(R, scale);
  Mat3 Gs;  // G + G^T
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) Gs.m[i][j] = G.m[i][j] + G.m[j][i];
  const Mat3 v_M = matmul(Gs, M);
  Mat3 v_R;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) v_R.m[i][j] = v_M.m[i][j] * scale[j];
  quat_to_rotmat_vjp(quat, v_R, v_quat);
  for (int j = 0; j < 3; ++j)
    v_scale[j] = R.m[0][j] * v_M.m[0][j] + R.m[1][j] * v_M.m[1][j] + R.m[2][j] * v_M.m[2][j];
}

// ------------------------------------------------------------------- covariance ops

namespace covariance {

// Row-major 3x3 (9 floats) or packed upper triangle (6 floats).
PREBUILD_HD int symmetric_size(bool triu) { return triu ? 6 : 9; }

// Writes the symmetric S as `symmetric_size(triu)` floats.
PREBUILD_HD void store_symmetric(const Mat3& S, bool triu, float* out) {
  if (triu) {
    out[0] = S.m[0][0];
    out[1] = S.m[0][1];
    out[2] = S.m[0][2];
    out[3] = S.m[1][1];
    out[4] = S.m[1][2];
    out[5] = S.m[2][2];
  } else {
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) out[i * 3 + j] = S.m[i][j];
  }
}

// The gradient with respect to the full matrix of a gradient `v` of what store_symmetric
// wrote: as is (row-major) or, packed, each off-diagonal entry split in halves.
PREBUILD_HD Mat3 load_symmetric_grad(const float* v, bool triu) {
  Mat3 G;
  if (triu) {
    G.m[0][0] = v[0];
    G.m[0][1] = G.m[1][0] = 0.5f * v[1];
    G.m[0][2] = G.m[2][0] = 0.5f * v[2];
    G.m[1][1] = v[3];
    G.m[1][2] = G.m[2][1] = 0.5f * v[4];
    G.m[2][2] = v[5];
  } else {
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) G.m[i][j] = v[i * 3 + j];
  }
  return G;
}

PREBUILD_HD void inverse_scale(const float* scale, float* inv) {
  for (int j = 0; j < 3; ++j) inv[j] = 1.f / scale[j];
}

// R diag(s)^2 R^T.
PREBUILD_HD Mat3 covariance(const Mat3& R, const float* scale) {
  const Mat3 M = scaled_rotation(R, scale);
  return matmul_bt(M, M);
}

// R diag(s)^-2 R^T: the covariance of the inverse scales.
PREBUILD_HD Mat3 precision(const Mat3& R, const float* scale) {
  float inv[3];
  inverse_scale(scale, inv);
  return covariance(R, inv);
}

// d/d(quat, scale) of a loss whose gradient with respect to the precision is G.
PREBUILD_HD void precision_vjp(const float* quat, const float* scale, const Mat3& G,
                               float* v_quat, float* v_scale) {
  float inv[3], v_inv[3];
  inverse_scale(scale, inv);
  covariance_vjp(quat, inv, G, v_quat, v_inv);
  for (int j = 0; j < 3; ++j) v_scale[j] = -inv[j] * inv[j] * v_inv[j];
}

}  // namespace covariance

}  // namespace gsplat
}  // namespace prebuild
