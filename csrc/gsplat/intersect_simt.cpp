// The tile-intersection CUDA block bodies (intersect_kernels.h) run on the CPU by the SIMT
// launcher, for tests: registered as the CPU kernels of torch.ops.prebuild_simt.isect_*.
// The scan and the sort are the CPU backend's (intersect.h).
#include <torch/csrc/stable/library.h>

#include <prebuild/simt_launch_op.h>
#include "intersect.h"
#include "intersect_kernels.h"

namespace prebuild {
namespace gsplat {
namespace {

// Runs `body` with one thread per element.
template <typename Args, typename Body>
void run_simt(const char* op, int64_t n, const Args& args, const Body& body) {
  simt::launch_op<NoShared>(op, linear_geometry(n), args, body);
}

constexpr const char* kTilesOp = "prebuild_simt::isect_tiles";
constexpr const char* kOffsetOp = "prebuild_simt::isect_offset_encode";

struct SimtBackend : HostSteps {
  void count(const TileArgs& a) const {
    run_simt(kTilesOp, a.n_elements, a, count_block<simt::HostContext>);
  }
  void fill(const TileArgs& a) const {
    run_simt(kTilesOp, a.n_elements, a, fill_block<simt::HostContext>);
  }
  void offsets(const OffsetArgs& a) const {
    run_simt(kOffsetOp, a.n_isects, a, offset_block<simt::HostContext>);
  }
};

std::tuple<Tensor, Tensor, Tensor> isect_tiles_simt(Tensor means2d, Tensor radii, Tensor depths,
                                                    int64_t tile_size, int64_t tile_width,
                                                    int64_t tile_height, bool sort,
                                                    std::optional<Tensor> image_ids,
                                                    std::optional<int64_t> n_images) {
  SimtBackend backend;
  return run_isect_tiles(means2d, radii, depths, tile_size, tile_width, tile_height, sort,
                         image_ids, n_images, kTilesOp, backend);
}

Tensor isect_offset_encode_simt(Tensor isect_ids, int64_t n_images, int64_t tile_width,
                                int64_t tile_height) {
  SimtBackend backend;
  return run_offset_encode(isect_ids, n_images, tile_width, tile_height, kOffsetOp, backend);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) {
  m.impl("isect_tiles", TORCH_BOX(&isect_tiles_simt));
  m.impl("isect_offset_encode", TORCH_BOX(&isect_offset_encode_simt));
}

}  // namespace gsplat
}  // namespace prebuild
