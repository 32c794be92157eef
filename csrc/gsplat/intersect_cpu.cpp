// Tile intersection on the CPU: the per-Gaussian math and per-entry writes of the CUDA
// kernels (intersect_kernels.h), parallelised with PyTorch's thread pool, and the host scan
// and stable radix sort of intersect.h.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <prebuild/cpu_grid.h>

#include "intersect.h"

namespace prebuild {
namespace gsplat {
namespace {

constexpr int64_t kGrain = 4096;

struct CpuBackend : HostSteps {
  void count(const TileArgs& a) const {
    cpu::for_each_element(a.n_elements, kGrain, [&](int64_t i) { count_element(a, i); });
  }
  void fill(const TileArgs& a) const {
    cpu::for_each_element(a.n_elements, kGrain, [&](int64_t i) { fill_element(a, i); });
  }
  // Sorted, validated ids: the entries write disjoint ranges of offsets.
  void offsets(const OffsetArgs& a) const {
    cpu::for_each_element(a.n_isects, kGrain, [&](int64_t i) { offset_element(a, i); });
  }
};

std::tuple<Tensor, Tensor, Tensor> isect_tiles_cpu(Tensor means2d, Tensor radii, Tensor depths,
                                                   int64_t tile_size, int64_t tile_width,
                                                   int64_t tile_height, bool sort,
                                                   std::optional<Tensor> image_ids,
                                                   std::optional<int64_t> n_images) {
  CpuBackend backend;
  return run_isect_tiles(means2d, radii, depths, tile_size, tile_width, tile_height, sort,
                         image_ids, n_images, "prebuild::isect_tiles", backend);
}

Tensor isect_offset_encode_cpu(Tensor isect_ids, int64_t n_images, int64_t tile_width,
                               int64_t tile_height) {
  CpuBackend backend;
  return run_offset_encode(isect_ids, n_images, tile_width, tile_height,
                           "prebuild::isect_offset_encode", backend);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) {
  m.impl("isect_tiles", TORCH_BOX(&isect_tiles_cpu));
  m.impl("isect_offset_encode", TORCH_BOX(&isect_offset_encode_cpu));
}

}  // namespace gsplat
}  // namespace prebuild
