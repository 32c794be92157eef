// Tile intersection on CUDA: thin __global__ wrappers over the block bodies of
// intersect_kernels.h, CUB's scan and radix sort on the current stream, and the host
// functions registered for the CUDA dispatch key.
#include <cuda_runtime.h>
#include <torch/csrc/stable/library.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <prebuild/cuda_launch.cuh>
#include "intersect.h"
#include "intersect_kernels.h"
#include "scan_cuda.cuh"

namespace prebuild {
namespace gsplat {

// scan_cuda.cuh's, here beside the sort (also the pack family's: see there).
void inclusive_scan_cuda(const char* name, const Tensor& on, Tensor& cum, int64_t n) {
  int64_t* data = cum.mutable_data_ptr<int64_t>();
  with_cub_temp(name, on, [&](void* temp, size_t& bytes, cudaStream_t s) {
    return cub::DeviceScan::InclusiveSum(temp, bytes, data, data, n, s);
  });
}

int64_t read_total_cuda(const char* name, const Tensor& on, const Tensor& cum, int64_t n) {
  int64_t total = 0;
  on_current_stream(name, on, [&](cudaStream_t s) {
    check_cuda(cudaMemcpyAsync(&total, cum.const_data_ptr<int64_t>() + (n - 1), sizeof(total),
                               cudaMemcpyDeviceToHost, s),
               name);
    check_cuda(cudaStreamSynchronize(s), name);
  });
  return total;
}

namespace {

__global__ void __launch_bounds__(kIsectThreads) count_kernel(TileArgs args) {
  NoShared shared;
  count_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kIsectThreads) fill_kernel(TileArgs args) {
  NoShared shared;
  fill_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kIsectThreads) offset_kernel(OffsetArgs args) {
  NoShared shared;
  offset_block(simt::DeviceContext{}, shared, args);
}

struct CudaBackend {
  const Tensor& on;  // the inputs' device: kernels run there, on its current stream

  bool on_device(const Tensor& t) const { return t.is_cuda(); }
  const char* device() const { return "CUDA"; }
  void count(const TileArgs& a) const {
    const LaunchGeometry g = linear_geometry(a.n_elements);
    launch("isect_tiles (count)", count_kernel, g, 0, on, a);
  }
  void scan(Tensor& cum, int64_t n) const {
    inclusive_scan_cuda("isect_tiles (scan)", on, cum, n);
  }
  // M decides the outputs' size: read it back, on the current stream, and wait for it.
  int64_t total(const Tensor& cum, int64_t n) const {
    return read_total_cuda("isect_tiles (read M)", on, cum, n);
  }
  void fill(const TileArgs& a) const {
    const LaunchGeometry g = linear_geometry(a.n_elements);
    launch("isect_tiles (fill)", fill_kernel, g, 0, on, a);
  }
  // Ids are sorted as unsigned 64-bit keys over bits [0, end_bit): image, tile, depth.
  std::tuple<Tensor, Tensor> sort(const Tensor& keys, const Tensor& values, int64_t n,
                                  int end_bit) const {
    Tensor keys_out = torch::stable::new_empty(keys, {n});
    Tensor values_out = torch::stable::new_empty(values, {n});
    const auto* k_in = reinterpret_cast<const uint64_t*>(keys.const_data_ptr<int64_t>());
    auto* k_out = reinterpret_cast<uint64_t*>(keys_out.mutable_data_ptr<int64_t>());
    const int32_t* v_in = values.const_data_ptr<int32_t>();
    int32_t* v_out = values_out.mutable_data_ptr<int32_t>();
    with_cub_temp("isect_tiles (sort)", on, [&](void* temp, size_t& bytes, cudaStream_t s) {
      return cub::DeviceRadixSort::SortPairs(temp, bytes, k_in, k_out, v_in, v_out, n, 0,
                                             end_bit, s);
    });
    return {keys_out, values_out};
  }
  // Not read back on the GPU (see validate_ids_host); fill_offsets keeps writes in bounds.
  void validate_ids(const OffsetArgs&, const char*) const {}
  // Not read back either (see validate_image_ids_host): ids only go into isect_ids' bits.
  void validate_image_ids(const Tensor&, int64_t, const char*) const {}
  void offsets(const OffsetArgs& a) const {
    const LaunchGeometry g = linear_geometry(a.n_isects);
    launch("isect_offset_encode", offset_kernel, g, 0, on, a);
  }
};

std::tuple<Tensor, Tensor, Tensor> isect_tiles_cuda(Tensor means2d, Tensor radii, Tensor depths,
                                                    int64_t tile_size, int64_t tile_width,
                                                    int64_t tile_height, bool sort,
                                                    std::optional<Tensor> image_ids,
                                                    std::optional<int64_t> n_images) {
  CudaBackend backend{means2d};
  return run_isect_tiles(means2d, radii, depths, tile_size, tile_width, tile_height, sort,
                         image_ids, n_images, "prebuild::isect_tiles", backend);
}

Tensor isect_offset_encode_cuda(Tensor isect_ids, int64_t n_images, int64_t tile_width,
                                int64_t tile_height) {
  CudaBackend backend{isect_ids};
  return run_offset_encode(isect_ids, n_images, tile_width, tile_height,
                           "prebuild::isect_offset_encode", backend);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) {
  m.impl("isect_tiles", TORCH_BOX(&isect_tiles_cuda));
  m.impl("isect_offset_encode", TORCH_BOX(&isect_offset_encode_cuda));
}

}  // namespace gsplat
}  // namespace prebuild
