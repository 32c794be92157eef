// Per-Gaussian math of the tile-intersection ops, shared by the CUDA kernels, the simt
// backend and the plain CPU backend (PREBUILD_HD: the same code on host and device).
//
// Conventions are gsplat 1.5.3's (IntersectTile.cu, _torch_impl._isect_tiles):
//   - a Gaussian is culled unless both of its radii are > 0;
//   - its tiles are [floor((mean - radius) / tile_size), ceil((mean + radius) / tile_size))
//     per axis, computed in float32 and clamped to [0, tile_width] x [0, tile_height];
//   - its entries are emitted row by row (ty outer, tx inner);
//   - isect_id = image << (32 + tile_bits) | tile_id << 32 | bits(depth) (zero-extended),
//     tile_id = ty * tile_width + tx, tile_bits = bit_length(tile_width * tile_height).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <prebuild/hd.h>

namespace prebuild {
namespace gsplat {

// Number of bits needed to write v (Python's int.bit_length): 0 for 0.
PREBUILD_HD int bit_length(uint64_t v) {
  int n = 0;
  while (v != 0) {
    ++n;
    v >>= 1;
  }
  return n;
}

// Tiles [x0, x1) x [y0, y1) touched by one Gaussian (empty when culled).
struct TileRange {
  int32_t x0, x1, y0, y1;
  PREBUILD_HD int64_t count() const {
    return static_cast<int64_t>(x1 - x0) * static_cast<int64_t>(y1 - y0);
  }
};

// floor / ceil of a tile coordinate clamped to [0, limit]. The clamp happens in float, so
// huge or non-finite coordinates never reach an out-of-range float -> int conversion (NaN
// clamps to 0, as gsplat's does through its int conversion).
PREBUILD_HD int32_t clamp_tile(float t, int32_t limit) {
  const float lo = t > 0.f ? t : 0.f;  // false for NaN: NaN -> 0
  const float c = lo < static_cast<float>(limit) ? lo : static_cast<float>(limit);
  return static_cast<int32_t>(c);
}

PREBUILD_HD TileRange tile_range(float mean_x, float mean_y, int32_t radius_x, int32_t radius_y,
                                 float tile_size, int32_t tile_width, int32_t tile_height) {
  if (radius_x <= 0 || radius_y <= 0) return {0, 0, 0, 0};
  const float tx = mean_x / tile_size, ty = mean_y / tile_size;
  const float rx = static_cast<float>(radius_x) / tile_size;
  const float ry = static_cast<float>(radius_y) / tile_size;
  return {clamp_tile(floorf(tx - rx), tile_width), clamp_tile(ceilf(tx + rx), tile_width),
          clamp_tile(floorf(ty - ry), tile_height), clamp_tile(ceilf(ty + ry), tile_height)};
}

// The float's bit pattern, zero-extended to 64 bits.
PREBUILD_HD uint64_t depth_bits(float depth) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__float_as_uint(depth));
#else
  uint32_t bits;
  std::memcpy(&bits, &depth, sizeof(bits));
  return static_cast<uint64_t>(bits);
#endif
}

PREBUILD_HD int64_t isect_id(int64_t image, int64_t tile_id, uint64_t depth_bits,
                             int tile_bits) {
  const uint64_t id = (static_cast<uint64_t>(image) << (32 + tile_bits)) |
                      (static_cast<uint64_t>(tile_id) << 32) | depth_bits;
  return static_cast<int64_t>(id);
}

// The (image, tile) part of an isect_id as a flat index image * n_tiles + tile_id.
// Images past n_images (ids not made for these arguments) count as n_images, so the
// index stays below 2^33 and callers can clip it to their output.
PREBUILD_HD int64_t image_tile_index(int64_t isect_id, int tile_bits, int64_t n_images,
                                     int64_t n_tiles) {
  const uint64_t key = static_cast<uint64_t>(isect_id) >> 32;
  uint64_t image = key >> tile_bits;
  if (image > static_cast<uint64_t>(n_images)) image = static_cast<uint64_t>(n_images);
  const uint64_t tile = key & ((uint64_t{1} << tile_bits) - 1);
  return static_cast<int64_t>(image * static_cast<uint64_t>(n_tiles) + tile);
}

}  // namespace gsplat
}  // namespace prebuild
