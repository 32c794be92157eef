// Per-Gaussian math of the EWA projection (gsplat 1.5.3's fully fused projection and `proj`,
// pinhole, orthographic and fisheye cameras), shared by the CUDA kernels and the CPU
// implementation.
//
// For a Gaussian (mean m, covariance S, or quaternion q and scale s with S = R(q) diag(s)^2
// R(q)^T) and a camera (world-to-camera [W | t], intrinsics fx, fy, cx, cy, image w x h):
//   p  = W m + t                          camera-space mean; depth = p.z
//   Sc = W S W^T                          camera-space covariance
//   mean2d, J = the camera model's projection of p and its Jacobian (project_point):
//     pinhole: mean2d = (fx x/z + cx, fy y/z + cy), J = [[fx/z, 0, -fx tx/z^2],
//              [0, fy/z, -fy ty/z^2]] where tx = z clamp(x/z, -lim_x_neg, lim_x_pos) (same
//              for y): the frustum widened by 0.3 tan(fov/2) on each side
//     ortho:   mean2d = (fx x + cx, fy y + cy), J = [[fx, 0, 0], [0, fy, 0]]
//     fisheye: equidistant, mean2d = f theta / |xy| (x, y) + c with theta = atan2(|xy|, z),
//              J its Jacobian (gsplat's formulas, their 1e-7 guards included)
//   S2 = J Sc J^T + eps2d I               2D covariance (with the anti-aliasing blur)
//   conic = S2^-1 as (a, b, c)
//   compensation = sqrt(max(0, det(S2 - eps2d I) / det(S2)))
//   radius = ceil(e sqrt(S2_00)), ceil(e sqrt(S2_11))   (per axis), the extent e = 3.33, or
//            with an opacity o: min(3.33, sqrt(2 ln(o / (1/255)))), where o exp(-e^2 / 2)
//            falls to 1/255 (o times the compensation when compensations are computed)
// A Gaussian is culled (radii 0, 0) when z < near or z > far, det(S2) <= 0, o < 1/255, both
// radii <= radius_clip (or 0), or its box [mean2d -/+ radius] misses the image.
//
// The backward functions are the vector-Jacobian products of the same chain, in the same
// order, with gsplat's conventions: d conic_b counts once (the off-diagonal entries of the
// inverse each get half of it), the clamp of tx, ty passes no gradient to x, y where it is
// active, and the compensation term divides by (compensation + 1e-6). The derivatives of
// mean2d and J with respect to p come from project_point itself, run on dual numbers.
#pragma once

#include <cmath>
#include <cstdint>

#include <prebuild/hd.h>
#include "covariance_math.h"  // Mat3, quat_to_rotmat, covariance_vjp (shared)
#include "dual.h"

namespace prebuild {
namespace gsplat {
namespace projection {

constexpr float kExtend = 3.33f;          // radius = ceil(3.33 sigma) at most, as gsplat's
constexpr float kAlphaThreshold = 1.f / 255.f;  // gsplat's: smaller alphas are skipped
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

// ----------------------------------------------------------------------- camera models

// gsplat's camera_model values, as the ops take them (CAMERA_MODELS in ops/projection.py).
enum CameraModel : int { kPinhole = 0, kOrtho = 1, kFisheye = 2 };

PREBUILD_HD bool is_camera_model(int64_t model) { return model >= kPinhole && model <= kFisheye; }

// A camera-space point's image position and the Jacobian of the projection used for the
// covariance (2x3, row-major).
template <typename T>
struct PointProjection {
  T mean2d[2];
  T J[2][3];
};

// Projects the camera-space point (x, y, z) with `model`; T is float, or Dual for derivatives.
template <typename T>
PREBUILD_HD PointProjection<T> project_point(int model, const Camera& cam, T x, T y, T z) {
  PointProjection<T> out;
  const T zero = constant<T>(0.f);
  if (model == kOrtho) {
    out.mean2d[0] = cam.fx * x + cam.cx;
    out.mean2d[1] = cam.fy * y + cam.cy;
    out.J[0][0] = constant<T>(cam.fx);
    out.J[0][1] = zero;
    out.J[0][2] = zero;
    out.J[1][0] = zero;
    out.J[1][1] = constant<T>(cam.fy);
    out.J[1][2] = zero;
  } else if (model == kFisheye) {
    const float eps = 1e-7f;
    const T xy_len = sqrt_of(x * x + y * y) + eps;
    const T theta = atan2_of(xy_len, z + eps);
    out.mean2d[0] = cam.fx * x * theta / xy_len + cam.cx;
    out.mean2d[1] = cam.fy * y * theta / xy_len + cam.cy;
    const T x2 = x * x + eps, y2 = y * y, xy = x * y;
    const T x2y2 = x2 + y2;
    const T inv_l2 = 1.f / (x2y2 + z * z);
    const T b = atan2_of(xy_len, z) / xy_len / x2y2;
    const T a = z * inv_l2 / x2y2;
    out.J[0][0] = cam.fx * (x2 * a + y2 * b);
    out.J[0][1] = cam.fx * xy * (a - b);
    out.J[0][2] = -cam.fx * x * inv_l2;
    out.J[1][0] = cam.fy * xy * (a - b);
    out.J[1][1] = cam.fy * (y2 * a + x2 * b);
    out.J[1][2] = -cam.fy * y * inv_l2;
  } else {  // pinhole
    const float tan_fovx = 0.5f * cam.width / cam.fx;
    const float tan_fovy = 0.5f * cam.height / cam.fy;
    const float lim_x_pos = (cam.width - cam.cx) / cam.fx + kFovMargin * tan_fovx;
    const float lim_x_neg = cam.cx / cam.fx + kFovMargin * tan_fovx;
    const float lim_y_pos = (cam.height - cam.cy) / cam.fy + kFovMargin * tan_fovy;
    const float lim_y_neg = cam.cy / cam.fy + kFovMargin * tan_fovy;
    const T rz = 1.f / z;
    const T rz2 = rz * rz;
    const T tx = z * clamp_of(x * rz, -lim_x_neg, lim_x_pos);
    const T ty = z * clamp_of(y * rz, -lim_y_neg, lim_y_pos);
    out.mean2d[0] = cam.fx * x * rz + cam.cx;
    out.mean2d[1] = cam.fy * y * rz + cam.cy;
    out.J[0][0] = cam.fx * rz;
    out.J[0][1] = zero;
    out.J[0][2] = -cam.fx * tx * rz2;
    out.J[1][0] = zero;
    out.J[1][1] = cam.fy * rz;
    out.J[1][2] = -cam.fy * ty * rz2;
  }
  return out;
}

// Row-major 2x2 matrix (the 2D covariance of `proj`, and gradients with respect to it).
struct Mat2 {
  float m[2][2];
};

// J S J^T for a 2x3 J and any 3x3 S.
PREBUILD_HD Mat2 project_covariance(const float (&J)[2][3], const Mat3& S) {
  float T[2][3];
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k)
      T[r][k] = J[r][0] * S.m[0][k] + J[r][1] * S.m[1][k] + J[r][2] * S.m[2][k];
  Mat2 out;
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < 2; ++s)
      out.m[r][s] = T[r][0] * J[s][0] + T[r][1] * J[s][1] + T[r][2] * J[s][2];
  return out;
}

PREBUILD_HD float det2(const Sym2& s) { return s.a * s.c - s.b * s.b; }

// mean2d and S2 = J Sc J^T (no blur) of the camera-space mean `pc` and covariance `Sc`.
struct Projected2D {
  float mean2d[2];
  Mat2 cov2d;
};

PREBUILD_HD Projected2D project_to_image(int model, const Camera& cam, const Vec3& pc,
                                         const Mat3& Sc) {
  const PointProjection<float> pp = project_point(model, cam, pc.x, pc.y, pc.z);
  return {{pp.mean2d[0], pp.mean2d[1]}, project_covariance(pp.J, Sc)};
}

// Gradients of a loss with respect to the camera-space mean and covariance, from its gradients
// v_mean2d and G (with respect to S2 = J Sc J^T) through project_to_image.
struct CameraSpaceGrad {
  Vec3 mean;
  Mat3 covar;
};

PREBUILD_HD CameraSpaceGrad project_to_image_vjp(int model, const Camera& cam, const Vec3& pc,
                                                 const Mat3& Sc, const float* v_mean2d,
                                                 const Mat2& G) {
  const PointProjection<float> pp = project_point(model, cam, pc.x, pc.y, pc.z);
  CameraSpaceGrad out;
  // S2 = J Sc J^T: dL/dSc = J^T G J, dL/dJ = G J Sc^T + G^T J Sc.
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      float acc = 0.f;
      for (int r = 0; r < 2; ++r)
        for (int s = 0; s < 2; ++s) acc += pp.J[r][i] * G.m[r][s] * pp.J[s][j];
      out.covar.m[i][j] = acc;
    }
  float v_J[2][3];
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k) {
      float acc = 0.f;
      for (int s = 0; s < 2; ++s)
        for (int j = 0; j < 3; ++j)
          acc += G.m[r][s] * pp.J[s][j] * Sc.m[k][j] + G.m[s][r] * pp.J[s][j] * Sc.m[j][k];
      v_J[r][k] = acc;
    }
  // mean2d and J depend on p: their derivatives along x, y and z from dual numbers.
  float v_p[3];
  for (int k = 0; k < 3; ++k) {
    const Dual x = {pc.x, k == 0 ? 1.f : 0.f};
    const Dual y = {pc.y, k == 1 ? 1.f : 0.f};
    const Dual z = {pc.z, k == 2 ? 1.f : 0.f};
    const PointProjection<Dual> d = project_point(model, cam, x, y, z);
    float acc = v_mean2d[0] * d.mean2d[0].d + v_mean2d[1] * d.mean2d[1].d;
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) acc += v_J[r][c] * d.J[r][c].d;
    v_p[k] = acc;
  }
  out.mean = {v_p[0], v_p[1], v_p[2]};
  return out;
}

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
  bool calc_compensations;  // the rasterizer will scale the opacity by the compensation
};

// gsplat's opacity-aware extent in sigmas (arXiv 2402.00525, B.2): beyond it the Gaussian's
// alpha, opacity exp(-extent^2 / 2), is below 1/255 and skipped anyway, so the box can stop
// there; at most 3.33. logf, not gsplat's __logf: the CPU and simt backends then agree bit
// for bit and CUDA runs the same source (as expf in the rasterizer).
PREBUILD_HD float opacity_extent(float opacity) {
  return fminf(kExtend, sqrtf(2.f * logf(opacity / kAlphaThreshold)));
}

PREBUILD_HD Projected culled() {
  return {0, 0, 0.f, 0.f, 0.f, {0.f, 0.f, 0.f}, 0.f};
}

// World to camera: p = W m + t, Sc = W S W^T.
PREBUILD_HD Vec3 to_camera(const Camera& cam, const float* mean) {
  const Vec3 p = apply(cam.R, Vec3{mean[0], mean[1], mean[2]});
  return {p.x + cam.t.x, p.y + cam.t.y, p.z + cam.t.z};
}

PREBUILD_HD Mat3 covariance_to_camera(const Camera& cam, const Mat3& S) {
  return matmul_bt(matmul(cam.R, S), cam.R);
}

// Projects the Gaussian with world mean `mean` and covariance `covar` (packed, may be null:
// then from `quat`, `scale`) into `cam`, a `camera_model` camera. `opacity` (may be null:
// the fixed 3.33 sigma extent) bounds the box as gsplat's does when given opacities.
PREBUILD_HD Projected project_gaussian(const Camera& cam, int camera_model,
                                       const ProjectParams& prm,
                                       const float* mean, const float* covar, const float* quat,
                                       const float* scale, const float* opacity) {
  const Vec3 pc = to_camera(cam, mean);
  // Written as !(inside) so that a NaN depth or image position is culled too.
  if (!(pc.z >= prm.near_plane && pc.z <= prm.far_plane)) return culled();

  const Mat3 Sc = covariance_to_camera(cam, world_covariance(covar, quat, scale));
  const Projected2D img = project_to_image(camera_model, cam, pc, Sc);
  Sym2 cov = {img.cov2d.m[0][0], img.cov2d.m[0][1], img.cov2d.m[1][1]};
  const float det_orig = det2(cov);
  cov.a += prm.eps2d;
  cov.c += prm.eps2d;
  const float det = det2(cov);
  if (!(det > 0.f)) return culled();

  const float compensation = sqrtf(fmaxf(0.f, det_orig / det));
  float extend = kExtend;
  if (opacity != nullptr) {
    const float o = prm.calc_compensations ? *opacity * compensation : *opacity;
    if (o < kAlphaThreshold) return culled();
    extend = opacity_extent(o);  // a NaN opacity gives 3.33 (fminf), as gsplat's min
  }
  const float rx = ceilf(extend * sqrtf(cov.a));
  const float ry = ceilf(extend * sqrtf(cov.c));
  // Radii 0 (a zero extent: o exactly 1/255) are culled even where a negative radius_clip
  // would keep them, so that a pair is visible exactly when its radii are positive.
  if ((rx <= prm.radius_clip && ry <= prm.radius_clip) || rx == 0.f) return culled();

  const float mx = img.mean2d[0], my = img.mean2d[1];
  if (!(mx + rx > 0.f && mx - rx < cam.width && my + ry > 0.f && my - ry < cam.height)) {
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
  out.compensation = compensation;
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

// Gradients of one (camera, Gaussian) with respect to the Gaussian's parameters (mean and
// either the packed covariance or quat and scale) and to the camera's world-to-camera
// rotation and translation.
struct GaussianGrad {
  float mean[3];
  float covar[6];
  float quat[4];
  float scale[3];
  Mat3 rotation;  // d/dW
  Vec3 translation;  // d/dt
};

// Gradient with respect to S2 (the blurred 2D covariance) of the conic S2^-1 and the
// compensation, from their incoming gradients; `cov2d` is S2 - eps2d I (before the blur).
PREBUILD_HD Sym2 conic_vjp(const Sym2& conic, const Sym2& cov2d, float eps2d, float compensation,
                           const ProjectedGrad& g) {
  // conic = S2^-1: dL/dS2 = -P V P with V the symmetric gradient of P (b split in halves).
  const Sym2 P = conic;
  const Sym2 V = {g.conic_a, 0.5f * g.conic_b, g.conic_c};
  const float pv00 = P.a * V.a + P.b * V.b, pv01 = P.a * V.b + P.b * V.c;
  const float pv10 = P.b * V.a + P.c * V.b, pv11 = P.b * V.b + P.c * V.c;
  Sym2 G2 = {-(pv00 * P.a + pv01 * P.b), -(pv00 * P.b + pv01 * P.c),
             -(pv10 * P.b + pv11 * P.c)};
  if (g.has_compensation) {
    // comp^2 = det(S2o) / det(S2) with S2o = S2 - eps I, and
    // d comp^2 / d S2 = ((1 - comp^2) cof(S2o) - comp^2 eps I) / det(S2), cof the cofactor
    // matrix. (gsplat's equal form, (1 - comp^2) S2^-1 - eps det(S2^-1) I, subtracts two
    // nearly equal terms when comp is small, which loses all precision for thin Gaussians.)
    const Sym2 blurred = {cov2d.a + eps2d, cov2d.b, cov2d.c + eps2d};
    const float inv_det = 1.f / det2(blurred);
    const float c2 = compensation * compensation;
    const float v_sq = g.compensation * 0.5f / (compensation + kCompensationEps);
    G2.a += v_sq * ((1.f - c2) * cov2d.c - c2 * eps2d) * inv_det;
    G2.b += v_sq * (1.f - c2) * -cov2d.b * inv_det;
    G2.c += v_sq * ((1.f - c2) * cov2d.a - c2 * eps2d) * inv_det;
  }
  return G2;
}

// Gradients of one (camera, Gaussian) that was not culled, from its forward outputs `conic`
// and `compensation` and the incoming gradients `g`.
PREBUILD_HD GaussianGrad project_gaussian_vjp(const Camera& cam, int camera_model, float eps2d,
                                              const float* mean, const float* covar,
                                              const float* quat, const float* scale,
                                              const Sym2& conic, float compensation,
                                              const ProjectedGrad& g) {
  const Vec3 pc = to_camera(cam, mean);
  const Mat3 S = world_covariance(covar, quat, scale);
  const Mat3 Sc = covariance_to_camera(cam, S);
  Sym2 cov2d = {0.f, 0.f, 0.f};  // needed by the compensation term only
  if (g.has_compensation) {
    const Mat2 m = project_to_image(camera_model, cam, pc, Sc).cov2d;
    cov2d = {m.m[0][0], m.m[0][1], m.m[1][1]};
  }
  const Sym2 G2 = conic_vjp(conic, cov2d, eps2d, compensation, g);
  const float v_mean2d[2] = {g.mean2d_x, g.mean2d_y};
  const Mat2 G = {{{G2.a, G2.b}, {G2.b, G2.c}}};
  CameraSpaceGrad v_cam = project_to_image_vjp(camera_model, cam, pc, Sc, v_mean2d, G);
  v_cam.mean.z += g.depth;

  // World to camera: p = W m + t, Sc = W S W^T.
  GaussianGrad out;
  const Vec3 v_mean = apply_transposed(cam.R, v_cam.mean);
  out.mean[0] = v_mean.x;
  out.mean[1] = v_mean.y;
  out.mean[2] = v_mean.z;
  const Mat3 v_S = matmul(matmul_at(cam.R, v_cam.covar), cam.R);
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
  // dL/dW = v_p m^T + (v_Sc + v_Sc^T) W S (S symmetric); dL/dt = v_p.
  Mat3 v_sym;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) v_sym.m[i][j] = v_cam.covar.m[i][j] + v_cam.covar.m[j][i];
  out.rotation = matmul(matmul(v_sym, cam.R), S);
  for (int i = 0; i < 3; ++i) {
    const float vi = i == 0 ? v_cam.mean.x : (i == 1 ? v_cam.mean.y : v_cam.mean.z);
    for (int j = 0; j < 3; ++j) out.rotation.m[i][j] += vi * mean[j];
  }
  out.translation = v_cam.mean;
  return out;
}

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
