// Self-test kernels of the SIMT launcher, so its semantics are checked directly: a block
// reduction through shared memory, written correctly, with a barrier missing, and with a
// barrier in divergent code, and a __syncthreads_count; the warp collectives, used rightly
// and in divergent code. Test library only (torch.ops.prebuild_simt.harness_*).
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

enum WarpMode : int64_t {
  kWarpSum = 0,        // out[t] = the warp sums of (x, -2 x) as thread t sees them
  kWarpAnyMax = 1,     // out[t] = (warp_any(x > 0.5), warp_max(int(1e6 x)), lane)
  kWarpLoops = 2,      // warp w sums x w + 1 times: warps at different collectives at once
  kWarpReturned = 3,   // lane 1 returns while the others reach warp_sum: an error
  kWarpAtBarrier = 4,  // lane 1 waits at ctx.sync() while the others are at warp_sum: an error
  kWarpMismatch = 5,   // odd lanes call warp_any, even lanes warp_sum: an error
  kWarpScatter9 = 6,   // out[t] = (warp_scatter_sums of x (k + 1), k < 9: the lane's sum, its index)
  kWarpScatter3 = 7,   // the same with 3 values
};

constexpr int kWarpOut = 3;  // outputs per thread

// One thread per input x (block after block, linear thread rank within each).
template <typename Ctx>
PREBUILD_SIMT_BODY void warp_ops(const Ctx& ctx, const float* in, float* out, int64_t mode) {
  const Index3 t = ctx.thread(), b = ctx.block(), bd = ctx.block_dim(), g = ctx.grid_dim();
  const int threads = bd.x * bd.y * bd.z;
  const int rank = t.x + bd.x * (t.y + bd.y * t.z);
  const int block = b.x + g.x * (b.y + g.y * b.z);
  const int i = block * threads + rank;
  const float x = in[i];
  float* o = out + static_cast<int64_t>(i) * kWarpOut;
  float v[2] = {x, -2.f * x};
  switch (mode) {
    case kWarpSum:
      v[0] = ctx.warp_sum(v[0]);
      ctx.template warp_sums<1>(v + 1);
      break;
    case kWarpAnyMax:
      v[0] = ctx.warp_any(x > 0.5f) ? 1.f : 0.f;
      v[1] = static_cast<float>(ctx.warp_max(static_cast<int>(1e6f * x)));
      break;
    case kWarpLoops: {
      v[0] = 0.f;
      for (int k = 0; k <= rank / 32; ++k) v[0] += ctx.warp_sum(x);
      v[1] = 0.f;
      break;
    }
    case kWarpReturned:
      if (ctx.lane() == 1) return;
      v[0] = ctx.warp_sum(x);
      break;
    case kWarpAtBarrier:
      if (ctx.lane() == 1) {
        ctx.sync();
      } else {
        v[0] = ctx.warp_sum(x);
      }
      break;
    case kWarpScatter9:
    case kWarpScatter3: {
      float values[9];
      for (int k = 0; k < 9; ++k) values[k] = x * static_cast<float>(k + 1);
      const int lane = ctx.lane();
      if (mode == kWarpScatter9) {
        v[0] = simt::warp_scatter_sums<9>(ctx, values);
        v[1] = static_cast<float>(simt::scatter_index<9>(lane));
      } else {
        v[0] = simt::warp_scatter_sums<3>(ctx, values);
        v[1] = static_cast<float>(simt::scatter_index<3>(lane));
      }
      break;
    }
    case kWarpMismatch:
      if (ctx.lane() % 2 == 1) {
        v[0] = ctx.warp_any(true) ? 1.f : 0.f;
      } else {
        v[0] = ctx.warp_sum(x);
      }
      break;
  }
  o[0] = v[0];
  o[1] = v[1];
  o[2] = static_cast<float>(ctx.lane());
}

// Runs warp_ops over a grid (gx, gy, gz) of (bx, by, bz) blocks: out [threads, 3].
torch::stable::Tensor harness_warp(torch::stable::Tensor in, int64_t gx, int64_t gy, int64_t gz,
                                   int64_t bx, int64_t by, int64_t bz, int64_t mode) {
  constexpr const char* op = "prebuild_simt::harness_warp";
  check_float32(in, op, "in");
  check_contiguous(in, op, "in");
  STD_TORCH_CHECK(in.numel() == gx * gy * gz * bx * by * bz, op,
                  ": in must hold one value per thread");
  torch::stable::Tensor out = torch::stable::new_empty(in, {in.numel(), kWarpOut});
  const float* in_ptr = in.const_data_ptr<float>();
  float* out_ptr = out.mutable_data_ptr<float>();
  try {
    launch<NoShared>(
        {static_cast<int>(gx), static_cast<int>(gy), static_cast<int>(gz)},
        {static_cast<int>(bx), static_cast<int>(by), static_cast<int>(bz)},
        [&](const HostContext& ctx, NoShared&) { warp_ops(ctx, in_ptr, out_ptr, mode); });
  } catch (const std::exception& e) {
    STD_TORCH_CHECK(false, op, ": ", e.what());
  }
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(prebuild_simt, m) {
  m.def("harness_block_sum(Tensor input, int gx, int gy, int gz, int mode) -> Tensor");
  m.def(
      "harness_warp(Tensor input, int gx, int gy, int gz, int bx, int by, int bz, int mode) -> "
      "Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(prebuild_simt, CPU, m) {
  m.impl("harness_block_sum", TORCH_BOX(&harness_block_sum));
  m.impl("harness_warp", TORCH_BOX(&harness_warp));
}

}  // namespace simt
}  // namespace prebuild
