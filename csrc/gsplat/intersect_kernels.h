// Block bodies of the tile-intersection kernels, written through the SIMT layer
// (prebuild/simt.h): compiled by nvcc into the CUDA library and run on the CPU by the simt
// launcher in tests. Each thread handles one element; the per-element functions are
// PREBUILD_HD so the plain CPU backend runs them too (over torch::stable::parallel_for).
//
//   count:  one thread per element ((image, Gaussian), or packed entry): its number of
//           tiles -> tiles_per_gauss and the int64 scan buffer (scanned in place afterwards).
//   fill:   one thread per element: writes its entries at the scanned offset, in gsplat's
//           order (elements in order, tiles row by row).
//   offset: one thread per sorted entry: where the (image, tile) key changes, writes the
//           start offsets of the keys in between (gsplat's isect_offset_encode).
#pragma once

#include <cstdint>

#include <prebuild/simt.h>
#include "intersect_math.h"

namespace prebuild {
namespace gsplat {

constexpr int kIsectThreads = 256;

using simt::LaunchGeometry;
using simt::NoShared;

// One thread per element (n < 2^31 * kIsectThreads, guaranteed by the host checks).
inline LaunchGeometry linear_geometry(int64_t n) {
  return {{static_cast<int>((n + kIsectThreads - 1) / kIsectThreads), 1, 1},
          {kIsectThreads, 1, 1}};
}

struct TileArgs {
  const float* means2d;      // [I, N, 2] or [nnz, 2] (packed)
  const int32_t* radii;      // like means2d
  const float* depths;       // [I, N] or [nnz]
  const int64_t* image_ids;  // [nnz] (packed), or nullptr: element i is in image i / N
  int64_t n_gaussians;       // N
  int64_t n_elements;        // I * N, or nnz
  float tile_size;
  int32_t tile_width, tile_height;
  int tile_bits;
  int32_t* tiles_per_gauss;  // [n_elements]
  int64_t* cum;              // [n_elements]: counts (count), then their inclusive scan (fill)
  int64_t* isect_ids;        // [M] (fill)
  int32_t* flatten_ids;      // [M] (fill)
};

PREBUILD_HD TileRange element_range(const TileArgs& a, int64_t i) {
  return tile_range(a.means2d[2 * i], a.means2d[2 * i + 1], a.radii[2 * i], a.radii[2 * i + 1],
                    a.tile_size, a.tile_width, a.tile_height);
}

PREBUILD_HD void count_element(const TileArgs& a, int64_t i) {
  const int64_t n = element_range(a, i).count();
  a.tiles_per_gauss[i] = static_cast<int32_t>(n);
  a.cum[i] = n;
}

PREBUILD_HD void fill_element(const TileArgs& a, int64_t i) {
  const TileRange r = element_range(a, i);
  if (r.count() == 0) return;
  int64_t out = i == 0 ? 0 : a.cum[i - 1];
  const int64_t image = a.image_ids ? a.image_ids[i] : i / a.n_gaussians;
  const uint64_t depth = depth_bits(a.depths[i]);
  for (int32_t ty = r.y0; ty < r.y1; ++ty) {
    for (int32_t tx = r.x0; tx < r.x1; ++tx) {
      const int64_t tile_id = static_cast<int64_t>(ty) * a.tile_width + tx;
      a.isect_ids[out] = isect_id(image, tile_id, depth, a.tile_bits);
      a.flatten_ids[out] = static_cast<int32_t>(i);
      ++out;
    }
  }
}

struct OffsetArgs {
  const int64_t* isect_ids;  // [M], sorted
  int64_t n_isects;          // M
  int64_t n_images;          // I
  int64_t n_tiles;
  int64_t n_keys;            // I * n_tiles
  int tile_bits;
  int32_t* offsets;  // [I * n_tiles], zero-initialised
};

// offsets[k] = v for k in [begin, end) clipped to the output: ids that are out of range
// (not produced by isect_tiles with these arguments) never write out of bounds.
PREBUILD_HD void fill_offsets(const OffsetArgs& a, int64_t begin, int64_t end, int32_t v) {
  if (begin < 0) begin = 0;
  if (end > a.n_keys) end = a.n_keys;
  for (int64_t k = begin; k < end; ++k) a.offsets[k] = v;
}

// Entry i owns the keys after the previous entry's key up to its own: they all start at i.
// The first entry also owns the keys before it, the last one the keys after it (start M).
PREBUILD_HD void offset_element(const OffsetArgs& a, int64_t i) {
  const int64_t key = image_tile_index(a.isect_ids[i], a.tile_bits, a.n_images, a.n_tiles);
  if (i == 0) fill_offsets(a, 0, key + 1, 0);
  if (i > 0) {
    const int64_t prev = image_tile_index(a.isect_ids[i - 1], a.tile_bits, a.n_images, a.n_tiles);
    if (prev != key) fill_offsets(a, prev + 1, key + 1, static_cast<int32_t>(i));
  }
  if (i == a.n_isects - 1) fill_offsets(a, key + 1, a.n_keys, static_cast<int32_t>(a.n_isects));
}

template <typename Ctx>
PREBUILD_SIMT_BODY int64_t global_thread(const Ctx& ctx) {
  return static_cast<int64_t>(ctx.block().x) * ctx.block_dim().x + ctx.thread().x;
}

template <typename Ctx>
PREBUILD_SIMT_BODY void count_block(const Ctx& ctx, NoShared&, const TileArgs& a) {
  const int64_t i = global_thread(ctx);
  if (i < a.n_elements) count_element(a, i);
}

template <typename Ctx>
PREBUILD_SIMT_BODY void fill_block(const Ctx& ctx, NoShared&, const TileArgs& a) {
  const int64_t i = global_thread(ctx);
  if (i < a.n_elements) fill_element(a, i);
}

template <typename Ctx>
PREBUILD_SIMT_BODY void offset_block(const Ctx& ctx, NoShared&, const OffsetArgs& a) {
  const int64_t i = global_thread(ctx);
  if (i < a.n_isects) offset_element(a, i);
}

}  // namespace gsplat
}  // namespace prebuild
