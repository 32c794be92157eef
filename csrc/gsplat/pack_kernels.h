// Block bodies of the pack op family (pack.h), written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and by the C++ compiler into the
// simt test library; the *_element functions are also what the CPU backend runs. One thread
// per element, grid-stride. Each element writes only its own outputs (a visible pair's row is
// its rank among the visible ones, from an inclusive scan of the flags): no atomics, the same
// bits on every backend.
#pragma once

#include <stdint.h>

#include <prebuild/hd.h>
#include <prebuild/simt_grid.h>

namespace prebuild {
namespace gsplat {
namespace pack {

constexpr int kBlock = simt::kElementBlock;

using simt::element_geometry;
using simt::LaunchGeometry;
using simt::NoShared;

// A projected (image, Gaussian) pair is visible when both its radii are positive (gsplat's
// packed rule: (radii > 0).all(-1)).
PREBUILD_HD bool is_visible(const int32_t* radii, int64_t i) {
  return radii[2 * i] > 0 && radii[2 * i + 1] > 0;
}

struct FlagArgs {
  const int32_t* radii;  // [n, 2]
  int64_t n;             // B * C * N pairs
  int64_t* visible;      // [n]: 1 or 0, scanned in place afterwards
};

struct PackArgs {
  const int32_t* radii;        // [n, 2] dense
  const float* means2d;        // [n, 2]
  const float* depths;         // [n]
  const float* conics;         // [n, 3]
  const float* compensations;  // [n] or nullptr
  const float* opacities;      // [B * N] per Gaussian, or nullptr
  const float* colors;         // [B * N, F] per Gaussian, or nullptr
  const int64_t* rank;         // [n]: inclusive scan of the flags (row + 1 of a visible pair)
  int64_t n, C, N, F;
  int64_t* batch_ids;  // [nnz]
  int64_t* camera_ids;
  int64_t* gaussian_ids;
  int64_t* image_ids;  // batch * C + camera
  int32_t* radii_out;  // [nnz, 2]
  float* means2d_out;  // [nnz, 2]
  float* depths_out;   // [nnz]
  float* conics_out;   // [nnz, 3]
  float* compensations_out;  // [nnz] or nullptr
  float* opacities_out;      // [nnz] or nullptr
  float* colors_out;         // [nnz, F] or nullptr
};

// The packed rows' gradients back (zero-initialised outputs): to the dense pairs with plain
// stores (each visible pair has one row), to the Gaussians with adds (a Gaussian seen by C
// cameras has up to C rows: atomics on the GPU). A nullptr gradient is absent: its output is
// not written.
struct UnpackArgs {
  const int64_t* image_ids;     // [nnz]
  const int64_t* gaussian_ids;  // [nnz]
  int64_t nnz, n_images, C, N, F;  // an id pair outside the n_images * N dense pairs is
                                   // skipped, never a wild store
  const float* v_means2d;  // [nnz, 2] or nullptr
  const float* v_depths;   // [nnz] or nullptr
  const float* v_conics;   // [nnz, 3] or nullptr
  const float* v_compensations;  // [nnz] or nullptr
  const float* v_opacities;  // [nnz] or nullptr
  const float* v_colors;     // [nnz, F] or nullptr
  float* d_means2d;        // [n, 2]
  float* d_depths;         // [n]
  float* d_conics;         // [n, 3]
  float* d_compensations;  // [n]
  float* d_opacities;      // [B * N]
  float* d_colors;         // [B * N, F]
};

PREBUILD_HD void flag_element(const FlagArgs& a, int64_t i) {
  a.visible[i] = is_visible(a.radii, i) ? 1 : 0;
}

PREBUILD_HD void pack_element(const PackArgs& a, int64_t i) {
  if (!is_visible(a.radii, i)) return;
  const int64_t j = a.rank[i] - 1;
  const int64_t image = i / a.N;
  a.batch_ids[j] = image / a.C;
  a.camera_ids[j] = image % a.C;
  a.gaussian_ids[j] = i % a.N;
  a.image_ids[j] = image;
  for (int k = 0; k < 2; ++k) {
    a.radii_out[2 * j + k] = a.radii[2 * i + k];
    a.means2d_out[2 * j + k] = a.means2d[2 * i + k];
  }
  a.depths_out[j] = a.depths[i];
  for (int k = 0; k < 3; ++k) a.conics_out[3 * j + k] = a.conics[3 * i + k];
  if (a.compensations) a.compensations_out[j] = a.compensations[i];
  const int64_t row = image / a.C * a.N + i % a.N;  // the Gaussian's row: batch * N + id
  if (a.opacities) a.opacities_out[j] = a.opacities[row];
  if (a.colors) {
    for (int64_t k = 0; k < a.F; ++k) a.colors_out[j * a.F + k] = a.colors[row * a.F + k];
  }
}

// Packed row j's image and Gaussian; false for ids outside the dense pairs (skipped).
PREBUILD_HD bool packed_pair(const UnpackArgs& a, int64_t j, int64_t* image, int64_t* g) {
  *image = a.image_ids[j];
  *g = a.gaussian_ids[j];
  return *g >= 0 && *g < a.N && *image >= 0 && *image < a.n_images;
}

PREBUILD_HD void unpack_element(const UnpackArgs& a, int64_t j) {
  int64_t image, g;
  if (!packed_pair(a, j, &image, &g)) return;
  const int64_t i = image * a.N + g;
  if (a.v_means2d) {
    for (int k = 0; k < 2; ++k) a.d_means2d[2 * i + k] = a.v_means2d[2 * j + k];
  }
  if (a.v_depths) a.d_depths[i] = a.v_depths[j];
  if (a.v_conics) {
    for (int k = 0; k < 3; ++k) a.d_conics[3 * i + k] = a.v_conics[3 * j + k];
  }
  if (a.v_compensations) a.d_compensations[i] = a.v_compensations[j];
}

// Row j's per-Gaussian gradients, added with `add(address, value)`.
template <typename Add>
PREBUILD_HD void unpack_gaussian_element(const UnpackArgs& a, int64_t j, const Add& add) {
  int64_t image, g;
  if (!packed_pair(a, j, &image, &g)) return;
  const int64_t row = image / a.C * a.N + g;
  if (a.v_opacities) add(a.d_opacities + row, a.v_opacities[j]);
  if (a.v_colors) {
    for (int64_t k = 0; k < a.F; ++k) add(a.d_colors + row * a.F + k, a.v_colors[j * a.F + k]);
  }
}

// ctx.atomic_add as a functor (a lambda capturing the context made nvcc keep it on the stack).
template <typename Ctx>
struct AtomicAdd {
  const Ctx& ctx;
  PREBUILD_SIMT_BODY void operator()(float* address, float value) const {
    ctx.atomic_add(address, value);
  }
};

template <typename Ctx>
PREBUILD_SIMT_BODY void flag_block(const Ctx& ctx, NoShared&, const FlagArgs& a) {
  simt::for_each_element(ctx, a.n, [&](int64_t i) { flag_element(a, i); });
}

template <typename Ctx>
PREBUILD_SIMT_BODY void pack_block(const Ctx& ctx, NoShared&, const PackArgs& a) {
  simt::for_each_element(ctx, a.n, [&](int64_t i) { pack_element(a, i); });
}

template <typename Ctx>
PREBUILD_SIMT_BODY void unpack_block(const Ctx& ctx, NoShared&, const UnpackArgs& a) {
  simt::for_each_element(ctx, a.nnz, [&](int64_t j) {
    unpack_element(a, j);
    unpack_gaussian_element(a, j, AtomicAdd<Ctx>{ctx});
  });
}

}  // namespace pack
}  // namespace gsplat
}  // namespace prebuild
