// Self-test kernels of the SIMT launcher, so its semantics are checked directly: a block
// reduction through shared memory, written correctly, with a barrier missing, and with a
// barrier in divergent code, and a __syncthreads_count. Test library only (torch.ops.prebuild_simt.harness_block_sum).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <stdexcept>

#include <prebuild/checks.h>
#include <prebuild/simt.h>
#include <prebuild/simt_launcher.h>

namespace prebuild {
namespace simt {
namespace {

constexpr int kBlockX = 8, kBlockY = 4, kThreads = kBlockX * kBlockY;

struct ReduceShared {
  float values[kThreads];
};

enum Mode : int64_t {
  kCorrect = 0,
  kMissingBarrier = 1,
  kDivergentBarrier = 2,
  kCountAboveHalf = 3,  // out[block] = how many inputs exceed 0.5, via ctx.sync_count
};

// out[block] = sum of the block's kThreads inputs (a tree reduction in shared memory).
template <typename Ctx>
PREBUILD_SIMT_BODY void block_sum(const Ctx& ctx, ReduceShared& sh, const float* in, float* out,
                                  int64_t mode) {
  const Index3 t = ctx.thread(), b = ctx.block(), g = ctx.grid_dim();
  const int tid = t.y * kBlockX + t.x;
  const int block = (b.z * g.y + b.y) * g.x + b.x;
  sh.values[tid] = in[block * kThreads + tid];
  if (mode == kCountAboveHalf) {
    const int count = ctx.sync_count(sh.values[tid] > 0.5f);
    if (tid == 0) out[block] = static_cast<float>(count);
    return;
  }
  if (mode != kMissingBarrier) ctx.sync();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride) {
      sh.values[tid] += sh.values[tid + stride];
      if (mode == kDivergentBarrier) ctx.sync();
    }
    if (mode != kDivergentBarrier) ctx.sync();
  }
  if (tid == 0) out[block] = sh.values[0];
}

torch::stable::Tensor harness_block_sum(torch::stable::Tensor in, int64_t gx, int64_t gy,
                                        int64_t gz, int64_t mode) {
  constexpr const char* op = "prebuild_simt::harness_block_sum";
  check_float32(in, op, "in");
  check_contiguous(in, op, "in");
  STD_TORCH_CHECK(in.numel() == gx * gy * gz * kThreads, op, ": in must hold ", kThreads,
                  " values per block");
  torch::stable::Tensor out = torch::stable::new_empty(in, {gx * gy * gz});
  const float* in_ptr = in.const_data_ptr<float>();
  float* out_ptr = out.mutable_data_ptr<float>();
  try {
    launch<ReduceShared>(
        {static_cast<int>(gx), static_cast<int>(gy), static_cast<int>(gz)}, {kBlockX, kBlockY, 1},
        [&](const HostContext& ctx, ReduceShared& sh) { block_sum(ctx, sh, in_ptr, out_ptr, mode); });
  } catch (const std::exception& e) {
    STD_TORCH_CHECK(false, op, ": ", e.what());
  }
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(prebuild_simt, m) {
  m.def("harness_block_sum(Tensor input, int gx, int gy, int gz, int mode) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) {
  m.impl("harness_block_sum", TORCH_BOX(&harness_block_sum));
}

}  // namespace simt
}  // namespace prebuild
