// Host side of the tile-intersection op family, shared by its backends (CPU, CUDA, simt).
//
//   isect_tiles(means2d [I,N,2] f32, radii [I,N,2] i32, depths [I,N] f32, tile_size,
//               tile_width, tile_height, sort, image_ids?, n_images?)
//               -> (tiles_per_gauss [I,N] i32, isect_ids [M] i64, flatten_ids [M] i32)
//     packed (image_ids [nnz] i64 given): means2d [nnz,2], radii [nnz,2], depths [nnz],
//               n_images required -> tiles_per_gauss [nnz]; entry i is in image image_ids[i].
//   isect_offset_encode(isect_ids [M] i64 sorted, n_images, tile_width, tile_height)
//               -> offsets [I, tile_height, tile_width] i32
//
// I images (gsplat's leading batch dims times cameras, flattened by the Python wrapper).
// One host flow per op (run_isect_tiles, run_offset_encode) over a Backend that provides
// the device-specific steps; see intersect_cpu.cpp, intersect_cuda.cu, intersect_simt.cpp.
// The CPU scan, sort and id validation below are also the simt backend's.
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include <prebuild/checks.h>
#include <prebuild/zeros.h>
#include "intersect_kernels.h"
#include "scan.h"

namespace prebuild {
namespace gsplat {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

inline void check_dtype(const Tensor& t, ScalarType dtype, const char* dtype_name,
                        const char* op, const char* name) {
  STD_TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be ", dtype_name);
}

// Tile grid arguments shared by both ops; returns tile_bits. The ids pack the image, the
// tile and the 32 depth bits into 64 bits, as gsplat's.
inline int check_tile_grid(int64_t n_images, int64_t tile_width, int64_t tile_height,
                           const char* op) {
  STD_TORCH_CHECK(tile_width > 0 && tile_height > 0, op,
                  ": tile_width and tile_height must be positive, got ", tile_width, " and ",
                  tile_height);
  STD_TORCH_CHECK(tile_width <= kMaxInt32 && tile_height <= kMaxInt32, op,
                  ": tile_width and tile_height must be below 2^31");
  const int tile_bits = bit_length(static_cast<uint64_t>(tile_width * tile_height));
  const int image_bits = bit_length(static_cast<uint64_t>(n_images));
  STD_TORCH_CHECK(image_bits + tile_bits + 32 <= 64, op, ": ", n_images, " images (",
                  image_bits, " bits) and ", tile_width, "x", tile_height, " tiles (",
                  tile_bits, " bits) do not fit in a 64-bit isect_id with 32 depth bits");
  return tile_bits;
}

// Checks the inputs and returns the number of images.
inline int64_t check_tile_inputs(const Tensor& means2d, const Tensor& radii,
                                 const Tensor& depths, int64_t tile_size,
                                 const std::optional<Tensor>& image_ids,
                                 std::optional<int64_t> n_images, const char* op) {
  int64_t images = 0;
  if (image_ids.has_value()) {  // packed: [nnz, ...]
    check_dim(means2d, 2, op, "means2d [nnz, 2] (packed)");
    STD_TORCH_CHECK(means2d.size(1) == 2, op, ": means2d must have shape [nnz, 2] (packed)");
    check_dim(depths, 1, op, "depths [nnz] (packed)");
    STD_TORCH_CHECK(depths.size(0) == means2d.size(0), op,
                    ": depths must have shape [nnz] matching means2d [nnz, 2]");
    check_dim(*image_ids, 1, op, "image_ids [nnz]");
    STD_TORCH_CHECK(image_ids->size(0) == means2d.size(0), op,
                    ": image_ids must have shape [nnz] matching means2d [nnz, 2]");
    check_dtype(*image_ids, ScalarType::Long, "int64", op, "image_ids");
    check_contiguous(*image_ids, op, "image_ids");
    check_same_device(means2d, *image_ids, op, "means2d", "image_ids");
    STD_TORCH_CHECK(n_images.has_value(), op, ": n_images is required with image_ids (packed)");
    STD_TORCH_CHECK(*n_images >= 0, op, ": n_images must be non-negative, got ", *n_images);
    images = *n_images;
  } else {
    check_dim(means2d, 3, op, "means2d [I, N, 2]");
    STD_TORCH_CHECK(means2d.size(2) == 2, op, ": means2d must have shape [I, N, 2]");
    check_dim(depths, 2, op, "depths [I, N]");
    STD_TORCH_CHECK(depths.size(0) == means2d.size(0) && depths.size(1) == means2d.size(1), op,
                    ": depths must have shape [I, N] matching means2d [I, N, 2]");
    images = means2d.size(0);
    STD_TORCH_CHECK(!n_images.has_value() || *n_images == images, op, ": n_images (",
                    n_images.value_or(0), ") must be means2d's I (", images,
                    ") without image_ids");
  }
  check_same_shape(means2d, radii, op, "means2d", "radii");
  check_same_device(means2d, radii, op, "means2d", "radii");
  check_same_device(means2d, depths, op, "means2d", "depths");
  check_float32(means2d, op, "means2d");
  check_dtype(radii, ScalarType::Int, "int32", op, "radii");
  check_float32(depths, op, "depths");
  check_contiguous(means2d, op, "means2d");
  check_contiguous(radii, op, "radii");
  check_contiguous(depths, op, "depths");
  STD_TORCH_CHECK(tile_size > 0 && tile_size <= kMaxInt32, op,
                  ": tile_size must be positive (and below 2^31), got ", tile_size);
  STD_TORCH_CHECK(depths.numel() <= kMaxInt32, op,
                  ": the number of Gaussians (I * N, or nnz) must fit in int32 (flatten_ids "
                  "are int32)");
  return images;
}

// Sorts (keys, values) by key as unsigned 64-bit integers, stable (CPU and simt backends).
//
// A least-significant-digit radix sort over the bits in use, 8 bits per pass: each pass is a
// counting sort, which keeps equal digits in input order, so the whole sort is stable and
// equal ids (same image, tile and depth) keep the fill order (the Gaussians' order),
// exactly like CUB's radix sort on the GPU. O(M) per pass, at most 8 passes; passes whose
// digit is the same for every key (e.g. the image byte with one image) are skipped.
inline void radix_sort_pairs_host(int64_t* keys, int32_t* values, int64_t n, int end_bit) {
  if (n <= 1) return;
  std::vector<uint64_t> key_buf(static_cast<size_t>(n));
  std::vector<int32_t> value_buf(static_cast<size_t>(n));
  uint64_t* src_k = reinterpret_cast<uint64_t*>(keys);
  int32_t* src_v = values;
  uint64_t* dst_k = key_buf.data();
  int32_t* dst_v = value_buf.data();
  for (int shift = 0; shift < end_bit; shift += 8) {
    int64_t count[257] = {0};
    for (int64_t i = 0; i < n; ++i) ++count[((src_k[i] >> shift) & 0xFF) + 1];
    if (count[((src_k[0] >> shift) & 0xFF) + 1] == n) continue;  // one digit: nothing moves
    for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = count[(src_k[i] >> shift) & 0xFF]++;
      dst_k[at] = src_k[i];
      dst_v[at] = src_v[i];
    }
    std::swap(src_k, dst_k);
    std::swap(src_v, dst_v);
  }
  if (src_v != values) {  // the sorted data is in the buffers
    std::copy(src_k, src_k + n, reinterpret_cast<uint64_t*>(keys));
    std::copy(src_v, src_v + n, values);
  }
}

template <typename Backend>
std::tuple<Tensor, Tensor, Tensor> run_isect_tiles(const Tensor& means2d, const Tensor& radii,
                                                   const Tensor& depths, int64_t tile_size,
                                                   int64_t tile_width, int64_t tile_height,
                                                   bool sort,
                                                   const std::optional<Tensor>& image_ids,
                                                   std::optional<int64_t> n_images,
                                                   const char* op, Backend& backend) {
  const int64_t I = check_tile_inputs(means2d, radii, depths, tile_size, image_ids, n_images, op);
  STD_TORCH_CHECK(backend.on_device(means2d), op, ": this kernel runs on ", backend.device(),
                  " tensors");
  const int tile_bits = check_tile_grid(I, tile_width, tile_height, op);
  // Dense: I * N elements, element i in image i / N. Packed: nnz elements.
  const int64_t n_elements = depths.numel();
  const int64_t N = image_ids.has_value() ? n_elements : means2d.size(1);
  if (image_ids.has_value()) backend.validate_image_ids(*image_ids, I, op);

  Tensor tiles_per_gauss = torch::stable::new_empty(means2d, depths.sizes(), ScalarType::Int);
  Tensor cum = torch::stable::new_empty(means2d, {n_elements}, ScalarType::Long);
  TileArgs args{means2d.const_data_ptr<float>(),
                radii.const_data_ptr<int32_t>(),
                depths.const_data_ptr<float>(),
                image_ids.has_value() ? image_ids->const_data_ptr<int64_t>() : nullptr,
                N,
                n_elements,
                static_cast<float>(tile_size),
                static_cast<int32_t>(tile_width),
                static_cast<int32_t>(tile_height),
                tile_bits,
                tiles_per_gauss.mutable_data_ptr<int32_t>(),
                cum.mutable_data_ptr<int64_t>(),
                nullptr,
                nullptr};
  int64_t M = 0;
  if (n_elements > 0) {
    backend.count(args);
    backend.scan(cum, n_elements);
    M = backend.total(cum, n_elements);
  }
  STD_TORCH_CHECK(M <= kMaxInt32, op, ": ", M,
                  " intersections do not fit the int32 offsets of isect_offset_encode");
  Tensor isect_ids = torch::stable::new_empty(means2d, {M}, ScalarType::Long);
  Tensor flatten_ids = torch::stable::new_empty(means2d, {M}, ScalarType::Int);
  if (M == 0) return {tiles_per_gauss, isect_ids, flatten_ids};
  args.isect_ids = isect_ids.mutable_data_ptr<int64_t>();
  args.flatten_ids = flatten_ids.mutable_data_ptr<int32_t>();
  backend.fill(args);
  if (sort) {
    const int end_bit = 32 + tile_bits + bit_length(static_cast<uint64_t>(I));
    std::tie(isect_ids, flatten_ids) = backend.sort(isect_ids, flatten_ids, M, end_bit);
  }
  return {tiles_per_gauss, isect_ids, flatten_ids};
}

template <typename Backend>
Tensor run_offset_encode(const Tensor& isect_ids, int64_t n_images, int64_t tile_width,
                         int64_t tile_height, const char* op, Backend& backend) {
  check_dim(isect_ids, 1, op, "isect_ids [M]");
  check_dtype(isect_ids, ScalarType::Long, "int64", op, "isect_ids");
  check_contiguous(isect_ids, op, "isect_ids");
  STD_TORCH_CHECK(backend.on_device(isect_ids), op, ": this kernel runs on ", backend.device(),
                  " tensors");
  STD_TORCH_CHECK(n_images >= 0, op, ": n_images must be non-negative, got ", n_images);
  const int tile_bits = check_tile_grid(n_images, tile_width, tile_height, op);
  const int64_t M = isect_ids.size(0);
  STD_TORCH_CHECK(M <= kMaxInt32, op, ": ", M, " intersections do not fit int32 offsets");
  const int64_t n_tiles = tile_width * tile_height;
  Tensor offsets =
      prebuild::new_zeros(isect_ids, {n_images, tile_height, tile_width}, ScalarType::Int);
  if (M == 0 || n_images == 0) return offsets;
  OffsetArgs args{isect_ids.const_data_ptr<int64_t>(), M, n_images, n_tiles,
                  n_images * n_tiles, tile_bits, offsets.mutable_data_ptr<int32_t>()};
  backend.validate_ids(args, op);
  backend.offsets(args);
  return offsets;
}

// On the CPU (CPU and simt backends) the ids are checked before encoding: sorted, and made
// for n_images images. The CUDA backend does not read them back (that would synchronise);
// there wrong ids give wrong offsets but never write out of bounds (fill_offsets clips).
inline void validate_ids_host(const OffsetArgs& a, const char* op) {
  const uint64_t* ids = reinterpret_cast<const uint64_t*>(a.isect_ids);
  for (int64_t i = 0; i < a.n_isects; ++i) {
    STD_TORCH_CHECK(i == 0 || ids[i - 1] <= ids[i], op,
                    ": isect_ids must be sorted (as returned by isect_tiles with sort=True); "
                    "entry ", i, " is smaller than entry ", i - 1);
    const uint64_t image = ids[i] >> (32 + a.tile_bits);
    const uint64_t tile = (ids[i] >> 32) & ((uint64_t{1} << a.tile_bits) - 1);
    STD_TORCH_CHECK(image < static_cast<uint64_t>(a.n_images) &&
                        tile < static_cast<uint64_t>(a.n_tiles),
                    op, ": isect_ids entry ", i, " encodes image ", image, " and tile ", tile,
                    ", outside the ", a.n_images, " images of ", a.n_tiles, " tiles");
  }
}

// Packed image ids must name one of the n_images images (CPU and simt backends; on CUDA
// they are not read back, and an out-of-range id only makes meaningless isect_ids).
inline void validate_image_ids_host(const Tensor& image_ids, int64_t n_images, const char* op) {
  const int64_t* ids = image_ids.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < image_ids.numel(); ++i) {
    STD_TORCH_CHECK(ids[i] >= 0 && ids[i] < n_images, op,
                    ": image_ids must be in [0, n_images) = [0, ", n_images, "), got ", ids[i],
                    " at ", i);
  }
}

// The steps the CPU and simt backends share: everything but the count, fill and offset
// kernels (which they derive and add).
struct HostSteps {
  bool on_device(const Tensor& t) const { return t.is_cpu(); }
  const char* device() const { return "CPU"; }
  void scan(Tensor& cum, int64_t n) const {
    inclusive_scan_host(cum.mutable_data_ptr<int64_t>(), n);
  }
  int64_t total(const Tensor& cum, int64_t n) const {
    return cum.const_data_ptr<int64_t>()[n - 1];
  }
  std::tuple<Tensor, Tensor> sort(Tensor keys, Tensor values, int64_t n, int end_bit) const {
    radix_sort_pairs_host(keys.mutable_data_ptr<int64_t>(), values.mutable_data_ptr<int32_t>(),
                          n, end_bit);
    return {keys, values};
  }
  void validate_ids(const OffsetArgs& a, const char* op) const { validate_ids_host(a, op); }
  void validate_image_ids(const Tensor& ids, int64_t n_images, const char* op) const {
    validate_image_ids_host(ids, n_images, op);
  }
};

}  // namespace gsplat
}  // namespace prebuild
