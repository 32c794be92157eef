// Per-Gaussian math of the EWA projection (gsplat 1.5.3's fully fused projection, pinhole
// cameras), shared by the CUDA kernels and the CPU implementation.
//
// For a Gaussian (mean m, covariance S, or quaternion q and scale s with S = R(q) diag(s)^2
// R(q)^T) and a camera (world-to-camera [W | t], intrinsics fx, fy, cx, cy, image w x h):
//   p  = W m + t                          camera-space mean; depth = p.z
//   Sc = W S W^T                          camera-space covariance
//   J  = [[fx/z, 0, -fx tx/z^2],          perspective Jacobian, where tx = z clamp(x/z,
//         [0, fy/z, -fy ty/z^2]]          -lim_x_neg, lim_x_pos) (same for y): the frustum
//                                         widened by 0.3 tan(fov/2) on each side
//   S2 = J Sc J^T + eps2d I               2D covariance (with the anti-aliasing blur)
//   conic = S2^-1 as (a, b, c); mean2d = (fx x/z + cx, fy y/z + cy)
//   compensation = sqrt(max(0, det(S2 - eps2d I) / det(S2)))
//   radius = ceil(3.33 sqrt(S2_00)), ceil(3.33 sqrt(S2_11))   (per axis)
// A Gaussian is culled (radii 0, 0) when z < near or z > far, det(S2) <= 0, both radii
// <= radius_clip, or its box [mean2d -/+ radius] misses the image.
//
// The backward functions are the vector-Jacobian products of the same chain, in the same
// order, with gsplat's conventions: d conic_b counts once (the off-diagonal entries of the
// inverse each get half of it), the clamp of tx, ty passes no gradient to x, y where it is
// active, and the compensation term divides by (compensation + 1e-6).
#pragma once

#include <cmath>

#include <prebuild/hd.h>
#include "covariance_math.h"  // Mat3, quat_to_rotmat, covariance_vjp (shared)

namespace prebuild {
namespace gsplat {
namespace projection {

constexpr float kExtend = 3.33f;          // radius = ceil(3.33 sigma), as gsplat without opacities
constexpr float kFovMargin = 0.3f;        // the Jacobian clamp widens the frustum by 30% of tan
constexpr float kCompensationEps = 1e-6f; // gsplat's add_blur_vjp denominator guard
// Largest float below 2^31: radii saturate there, as CUDA's float-to-int conversion does
// (a plain C++ cast of a larger or infinite radius would be undefined behaviour).
constexpr float kMaxRadius = 2147483520.f;

struct Vec3 {
  float x, y, z;
};

// Symmetric 2x2 matrix [[a, b], [b, c]].
struct Sym2 {
  float a, b, c;
};

// Pinhole camera: rotation and translation of world-to-camera, intrinsics, image size.
struct Camera {
  Mat3 R;
  Vec3 t;
  float fx, fy, cx, cy;
  float width, height;
};

// Camera `viewmat` (4x4 row-major world-to-camera) and `K` (3x3 row-major).
PREBUILD_HD Camera load_camera(const float* viewmat, const float* K, int width, int height) {
  Camera cam;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) cam.R.m[i][j] = viewmat[i * 4 + j];
  cam.t = {viewmat[3], viewmat[7], viewmat[11]};
  cam.fx = K[0];
  cam.fy = K[4];
  cam.cx = K[2];
  cam.cy = K[5];
  cam.width = static_cast<float>(width);
  cam.height = static_cast<float>(height);
  return cam;
}

PREBUILD_HD Vec3 apply(const Mat3& A, const Vec3& v) {
  return {A.m[0][0] * v.x + A.m[0][1] * v.y + A.m[0][2] * v.z,
          A.m[1][0] * v.x + A.m[1][1] * v.y + A.m[1][2] * v.z,
          A.m[2][0] * v.x + A.m[2][1] * v.y + A.m[2][2] * v.z};
}

PREBUILD_HD Vec3 apply_transposed(const Mat3& A, const Vec3& v) {
  return {A.m[0][0] * v.x + A.m[1][0] * v.y + A.m[2][0] * v.z,
          A.m[0][1] * v.x + A.m[1][1] * v.y + A.m[2][1] * v.z,
          A.m[0][2] * v.x + A.m[1][2] * v.y + A.m[2][2] * v.z};
}

// ----------------------------------------------------------------------- 3D covariance

// Covariance from the packed upper triangle (xx, xy, xz, yy, yz, zz).
PREBUILD_HD Mat3 unpack_covar(const float* c) {
  Mat3 S;
  S.m[0][0] = c[0];
  S.m[0][1] = S.m[1][0] = c[1];
  S.m[0][2] = S.m[2][0] = c[2];
  S.m[1][1] = c[3];
  S.m[1][2] = S.m[2][1] = c[4];
  S.m[2][2] = c[5];
  return S;
}

// World covariance: from `covar` (packed) when not null, else from `quat` and `scale`.
PREBUILD_HD Mat3 world_covariance(const float* covar, const float* quat, const float* scale) {
  if (covar != nullptr) return unpack_covar(covar);
  const Mat3 M = scaled_rotation(quat_to_rotmat(quat), scale);
  return matmul_bt(M, M);
}

// ------------------------------------------------------------------ perspective projection

// Perspective Jacobian rows: J = [[j00, 0, j02], [0, j11, j12]], and whether the clamp of
// x/z (clamped_x) and y/z (clamped_y) to the widened frustum is active.
struct Jacobian {
  float j00, j02, j11, j12;
  float tx, ty;  // z * clamp(x/z), z * clamp(y/z)
  bool clamped_x, clamped_y;
};

PREBUILD_HD Jacobian perspective_jacobian(const Camera& cam, const Vec3& p) {
  const float tan_fovx = 0.5f * cam.width / cam.fx;
  const float tan_fovy = 0.5f * cam.height / cam.fy;
  const float lim_x_pos = (cam.width - cam.cx) / cam.fx + kFovMargin * tan_fovx;
  const float lim_x_neg = cam.cx / cam.fx + kFovMargin * tan_fovx;
  const float lim_y_pos = (cam.height - cam.cy) / cam.fy + kFovMargin * tan_fovy;
  const float lim_y_neg = cam.cy / cam.fy + kFovMargin * tan_fovy;
  const float rz = 1.f / p.z;
  const float rz2 = rz * rz;
  const float u = p.x * rz, v = p.y * rz;
  Jacobian J;
  J.clamped_x = !(u <= lim_x_pos && u >= -lim_x_neg);
  J.clamped_y = !(v <= lim_y_pos && v >= -lim_y_neg);
  J.tx = p.z * fminf(lim_x_pos, fmaxf(-lim_x_neg, u));
  J.ty = p.z * fminf(lim_y_pos, fmaxf(-lim_y_neg, v));
  J.j00 = cam.fx * rz;
  J.j11 = cam.fy * rz;
  J.j02 = -cam.fx * J.tx * rz2;
  J.j12 = -cam.fy * J.ty * rz2;
  return J;
}

// Rows of T = J Sc (2x3).
struct Rows23 {
  float r[2][3];
};

PREBUILD_HD Rows23 jacobian_times(const Jacobian& J, const Mat3& S) {
  Rows23 T;
  for (int k = 0; k < 3; ++k) {
    T.r[0][k] = J.j00 * S.m[0][k] + J.j02 * S.m[2][k];
    T.r[1][k] = J.j11 * S.m[1][k] + J.j12 * S.m[2][k];
  }
  return T;
}

// J Sc J^T (before the blur).
PREBUILD_HD Sym2 project_covariance(const Jacobian& J, const Mat3& Sc) {
  const Rows23 T = jacobian_times(J, Sc);
  return {T.r[0][0] * J.j00 + T.r[0][2] * J.j02, T.r[0][1] * J.j11 + T.r[0][2] * J.j12,
          T.r[1][1] * J.j11 + T.r[1][2] * J.j12};
}

PREBUILD_HD float det2(const Sym2& s) { return s.a * s.c - s.b * s.b; }

// ------------------------------------------------------------------------------ forward

// Everything the forward writes for one (camera, Gaussian); radius 0, 0 when culled (the
// other fields are then zero).
struct Projected {
  int radius_x, radius_y;
  float mean2d_x, mean2d_y, depth;
  Sym2 conic;
  float compensation;
};

struct ProjectParams {
  float eps2d, near_plane, far_plane, radius_clip;
};

PREBUILD_HD Projected culled() {
  return {0, 0, 0.f, 0.f, 0.f, {0.f, 0.f, 0.f}, 0.f};
}

// Projects the Gaussian with world mean `mean` and covariance `covar` (packed, may be null:
// then from `quat`, `scale`) into `cam`.
PREBUILD_HD Projected project_gaussian(const Camera& cam, const ProjectParams& prm,
                                       const float* mean, const float* covar, const float* quat,
                                       const float* scale) {
  const Vec3 p = apply(cam.R, Vec3{mean[0], mean[1], mean[2]});
  const Vec3 pc = {p.x + cam.t.x, p.y + cam.t.y, p.z + cam.t.z};
  if (pc.z < prm.near_plane || pc.z > prm.far_plane) return culled();

  const Mat3 S = world_covariance(covar, quat, scale);
  const Mat3 Sc = matmul_bt(matmul(cam.R, S), cam.R);
  const Jacobian J = perspective_jacobian(cam, pc);
  Sym2 cov = project_covariance(J, Sc);
  const float det_orig = det2(cov);
  cov.a += prm.eps2d;
  cov.c += prm.eps2d;
  const float det = det2(cov);
  if (!(det > 0.f)) return culled();

  const float rx = ceilf(kExtend * sqrtf(cov.a));
  const float ry = ceilf(kExtend * sqrtf(cov.c));
  if (rx <= prm.radius_clip && ry <= prm.radius_clip) return culled();

  const float rz = 1.f / pc.z;
  const float mx = cam.fx * pc.x * rz + cam.cx;
  const float my = cam.fy * pc.y * rz + cam.cy;
  if (mx + rx <= 0.f || mx - rx >= cam.width || my + ry <= 0.f || my - ry >= cam.height) {
    return culled();
  }

  const float inv_det = 1.f / det;
  Projected out;
  out.radius_x = static_cast<int>(fminf(rx, kMaxRadius));
  out.radius_y = static_cast<int>(fminf(ry, kMaxRadius));
  out.mean2d_x = mx;
  out.mean2d_y = my;
  out.depth = pc.z;
  out.conic = {cov.c * inv_det, -cov.b * inv_det, cov.a * inv_det};
  out.compensation = sqrtf(fmaxf(0.f, det_orig / det));
  return out;
}

// ----------------------------------------------------------------------------- backward

// Incoming gradients of one (camera, Gaussian)'s outputs.
struct ProjectedGrad {
  float mean2d_x, mean2d_y, depth;
  float conic_a, conic_b, conic_c;
  float compensation;  // ignored unless has_compensation
  bool has_compensation;
};

// Gradients of one (camera, Gaussian) with respect to the Gaussian's parameters: mean and
// either the packed covariance (covar path) or quat and scale.
struct GaussianGrad {
  float mean[3];
  float covar[6];
  float quat[4];
  float scale[3];
};

// Gradients of one (camera, Gaussian) that was not culled, from its forward outputs `conic`
// and `compensation` and the incoming gradients `g`.
PREBUILD_HD GaussianGrad project_gaussian_vjp(const Camera& cam, float eps2d, const float* mean,
                                              const float* covar, const float* quat,
                                              const float* scale, const Sym2& conic,
                                              float compensation, const ProjectedGrad& g) {
  // conic = S2^-1: dL/dS2 = -P V P with V the symmetric gradient of P (b split in halves).
  const Sym2 P = conic;
  const Sym2 V = {g.conic_a, 0.5f * g.conic_b, g.conic_c};
  const float pv00 = P.a * V.a + P.b * V.b, pv01 = P.a * V.b + P.b * V.c;
  const float pv10 = P.b * V.a + P.c * V.b, pv11 = P.b * V.b + P.c * V.c;
  Sym2 G2 = {-(pv00 * P.a + pv01 * P.b), -(pv00 * P.b + pv01 * P.c),
             -(pv10 * P.b + pv11 * P.c)};
  if (g.has_compensation) {
    // compensation = sqrt(det(S2 - eps I) / det(S2)):
    // d comp^2 / d S2 = (1 - comp^2) S2^-1 - eps I det(S2^-1).
    const float det_conic = det2(P);
    const float v_sq = g.compensation * 0.5f / (compensation + kCompensationEps);
    const float one_minus = 1.f - compensation * compensation;
    G2.a += v_sq * (one_minus * P.a - eps2d * det_conic);
    G2.b += v_sq * (one_minus * P.b);
    G2.c += v_sq * (one_minus * P.c - eps2d * det_conic);
  }

  const Vec3 pw = {mean[0], mean[1], mean[2]};
  const Vec3 p = apply(cam.R, pw);
  const Vec3 pc = {p.x + cam.t.x, p.y + cam.t.y, p.z + cam.t.z};
  const Mat3 S = world_covariance(covar, quat, scale);
  const Mat3 Sc = matmul_bt(matmul(cam.R, S), cam.R);
  const Jacobian J = perspective_jacobian(cam, pc);

  // S2 = J Sc J^T: dL/dSc = J^T G2 J.
  const float jr[2][3] = {{J.j00, 0.f, J.j02}, {0.f, J.j11, J.j12}};
  const float g2[2][2] = {{G2.a, G2.b}, {G2.b, G2.c}};
  Mat3 v_Sc;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      float acc = 0.f;
      for (int r = 0; r < 2; ++r)
        for (int s = 0; s < 2; ++s) acc += jr[r][i] * g2[r][s] * jr[s][j];
      v_Sc.m[i][j] = acc;
    }

  // mean2d = (fx x/z + cx, fy y/z + cy).
  const float rz = 1.f / pc.z, rz2 = rz * rz, rz3 = rz2 * rz;
  Vec3 v_pc = {cam.fx * rz * g.mean2d_x, cam.fy * rz * g.mean2d_y,
               -(cam.fx * pc.x * g.mean2d_x + cam.fy * pc.y * g.mean2d_y) * rz2};

  // dL/dJ = 2 G2 J Sc (G2 and Sc symmetric); J depends on the mean through x, y, z.
  const Rows23 T = jacobian_times(J, Sc);
  float v_J[2][3];
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k) v_J[r][k] = 2.f * (g2[r][0] * T.r[0][k] + g2[r][1] * T.r[1][k]);
  if (!J.clamped_x) {
    v_pc.x += -cam.fx * rz2 * v_J[0][2];
  } else {
    v_pc.z += -cam.fx * rz3 * v_J[0][2] * J.tx;
  }
  if (!J.clamped_y) {
    v_pc.y += -cam.fy * rz2 * v_J[1][2];
  } else {
    v_pc.z += -cam.fy * rz3 * v_J[1][2] * J.ty;
  }
  v_pc.z += -cam.fx * rz2 * v_J[0][0] - cam.fy * rz2 * v_J[1][1] +
            2.f * cam.fx * J.tx * rz3 * v_J[0][2] + 2.f * cam.fy * J.ty * rz3 * v_J[1][2];
  v_pc.z += g.depth;

  // World to camera: p = W m + t, Sc = W S W^T.
  GaussianGrad out;
  const Vec3 v_mean = apply_transposed(cam.R, v_pc);
  out.mean[0] = v_mean.x;
  out.mean[1] = v_mean.y;
  out.mean[2] = v_mean.z;
  const Mat3 v_S = matmul(matmul_at(cam.R, v_Sc), cam.R);
  for (int i = 0; i < 6; ++i) out.covar[i] = 0.f;
  for (int i = 0; i < 4; ++i) out.quat[i] = 0.f;
  for (int i = 0; i < 3; ++i) out.scale[i] = 0.f;
  if (covar != nullptr) {
    out.covar[0] = v_S.m[0][0];
    out.covar[1] = v_S.m[0][1] + v_S.m[1][0];
    out.covar[2] = v_S.m[0][2] + v_S.m[2][0];
    out.covar[3] = v_S.m[1][1];
    out.covar[4] = v_S.m[1][2] + v_S.m[2][1];
    out.covar[5] = v_S.m[2][2];
  } else {
    covariance_vjp(quat, scale, v_S, out.quat, out.scale);
  }
  return out;
}

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
