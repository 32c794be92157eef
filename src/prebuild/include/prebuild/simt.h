// The SIMT layer every CUDA kernel is written through, so that the kernel's own source also
// runs on the CPU in tests.
//
// A kernel is split into
//   - a *block body*: a function template over a context `Ctx` and a struct holding the
//     block's shared memory, marked PREBUILD_SIMT_BODY. It reads its indices from the context
//     (ctx.thread(), ctx.block(), ctx.block_dim(), ctx.grid_dim()), synchronises the block
//     with ctx.sync() / ctx.sync_count(predicate) (= __syncthreads_count), exchanges values
//     within its warp with the warp collectives below, and adds to global memory shared by
//     blocks with ctx.atomic_add(address, value); it never names threadIdx, __shared__,
//     __syncthreads, __shfl_*_sync or atomicAdd itself;
//   - a thin __global__ wrapper (CUDA) that declares the shared struct and calls the body with
//     a DeviceContext, whose methods are the CUDA built-ins: zero cost once inlined;
//   - on the host, simt::launch (prebuild/simt_launcher.h) runs the same body for every block of
//     the grid with blockDim logical threads (see there for how).
//
// Warps, as CUDA forms them: the lanes of a warp are 32 consecutive linear thread ranks
// (x + block_dim.x * (y + block_dim.y * z)); ctx.lane() is the rank mod 32. A block whose size
// is not a multiple of 32 ends in a partial warp of the remaining lanes, and its collectives
// name exactly those lanes (the mask CUDA requires: a lane that does not exist never takes part).
// The warp collectives, which every lane of the warp must reach together (in converged code;
// the CPU launcher reports a lane that has returned or waits at a block barrier, or lanes at
// different collectives, as an error):
//   - ctx.warp_sum(value): every lane gets the float sum over the warp, as the butterfly of
//     __shfl_xor_sync over offsets 16, 8, 4, 2, 1 adds it, so the CPU launcher gives the
//     GPU's bits. A partial warp sums as a full one whose missing lanes hold
//     0.f (its lane 0 adds 0.f where a partner is missing, then every lane gets lane 0's sum:
//     in a full butterfly every lane ends with the same bits);
//   - ctx.warp_sums<N>(values): warp_sum of each of N floats, in place, with the same bits;
//     on the GPU the N butterflies run interleaved, so their shuffles' latencies overlap
//     (one sum after another leaves a warp waiting on each shuffle in turn);
//   - simt::warp_scatter_sums<N>(ctx, values) (below): the N sums spread over the lanes, each
//     lane getting one, with the same bits, in about a third of the shuffles;
//   - ctx.warp_any(predicate): whether any lane passed true (__any_sync);
//   - ctx.warp_max(value): the largest int of the warp (exact in any order).
#pragma once

#include <limits.h>

#include "hd.h"

namespace prebuild {
namespace simt {

struct Index3 {
  int x, y, z;
};

// The grid and block of a launch: the same numbers for the CUDA launch
// (cuda_launch.cuh) and the CPU one (simt_launch_op.h).
struct LaunchGeometry {
  Index3 grid, block;
};

// The shared memory of a kernel that uses none.
struct NoShared {};

}  // namespace simt
}  // namespace prebuild

#if defined(__CUDACC__)
// Block bodies are only ever instantiated for the device under nvcc (with DeviceContext),
// and only for the host under the C++ compiler (with the CPU launcher's context).
#define PREBUILD_SIMT_BODY __device__ __forceinline__

namespace prebuild {
namespace simt {

struct DeviceContext {
  __device__ __forceinline__ Index3 thread() const {
    return {static_cast<int>(threadIdx.x), static_cast<int>(threadIdx.y),
            static_cast<int>(threadIdx.z)};
  }
  __device__ __forceinline__ Index3 block() const {
    return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
            static_cast<int>(blockIdx.z)};
  }
  __device__ __forceinline__ Index3 block_dim() const {
    return {static_cast<int>(blockDim.x), static_cast<int>(blockDim.y),
            static_cast<int>(blockDim.z)};
  }
  __device__ __forceinline__ Index3 grid_dim() const {
    return {static_cast<int>(gridDim.x), static_cast<int>(gridDim.y),
            static_cast<int>(gridDim.z)};
  }
  __device__ __forceinline__ void sync() const { __syncthreads(); }
  // __syncthreads_count: a barrier that returns how many threads passed a non-zero value.
  __device__ __forceinline__ int sync_count(int predicate) const {
    return __syncthreads_count(predicate);
  }
  template <typename T>
  __device__ __forceinline__ void atomic_add(T* address, T value) const {
    atomicAdd(address, value);
  }

  __device__ __forceinline__ int lane() const { return rank() & 31; }
  __device__ __forceinline__ float warp_sum(float value) const {
    return warp_reduce(value, 0.f, Add{});
  }
  template <int N>
  __device__ __forceinline__ void warp_sums(float* values) const {
    if (full_warp()) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
          values[i] += __shfl_xor_sync(0xffffffffu, values[i], offset);
        }
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < N; ++i) values[i] = warp_reduce(values[i], 0.f, Add{});
  }
  // Partner lane ^ offset's value, in a full warp (warp_scatter_sums' step).
  __device__ __forceinline__ float shfl_xor(float value, int offset) const {
    return __shfl_xor_sync(0xffffffffu, value, offset);
  }
  // Whether the calling lane's warp has all 32 lanes (not a block's last, partial one).
  __device__ __forceinline__ bool warp_is_full() const { return full_warp(); }
  __device__ __forceinline__ bool warp_any(bool predicate) const {
    return __any_sync(warp_mask(), predicate) != 0;
  }
  __device__ __forceinline__ int warp_max(int value) const {
    return warp_reduce(value, INT_MIN, Max{});
  }

 private:
  struct Add {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
  };
  struct Max {
    __device__ __forceinline__ int operator()(int a, int b) const { return a > b ? a : b; }
  };
  __device__ __forceinline__ int rank() const {
    return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  }
  __device__ __forceinline__ bool full_warp() const {
    const int threads = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
    return (threads & 31) == 0 || rank() < (threads & ~31);
  }
  // A partial warp's lane count and mask, from special registers read anew at each call
  // (volatile asm is never hoisted): kept in registers across a caller's loop, they made the
  // rasterize backward spill, though only a block's last warp needs them.
  __device__ __forceinline__ static unsigned fresh(int which) {
    unsigned r;
    switch (which) {
      case 0: asm volatile("mov.u32 %0, %%tid.x;" : "=r"(r)); break;
      case 1: asm volatile("mov.u32 %0, %%tid.y;" : "=r"(r)); break;
      case 2: asm volatile("mov.u32 %0, %%tid.z;" : "=r"(r)); break;
      case 3: asm volatile("mov.u32 %0, %%ntid.x;" : "=r"(r)); break;
      default: asm volatile("mov.u32 %0, %%ntid.y;" : "=r"(r)); break;
    }
    return r;
  }
  __device__ __forceinline__ static int partial_lanes() {
    const unsigned nx = fresh(3), ny = fresh(4);
    const unsigned rank = fresh(0) + nx * (fresh(1) + ny * fresh(2));
    const int left = static_cast<int>(nx * ny * blockDim.z - (rank & ~31u));
    return left < 32 ? left : 32;
  }
  __device__ __forceinline__ unsigned warp_mask() const {
    return full_warp() ? 0xffffffffu : (1u << partial_lanes()) - 1u;
  }
  // The butterfly (see top). In a partial warp a missing partner contributes `identity`, which
  // is exact on lane 0 (every lane it reads from holds only missing lanes' identities), and
  // lane 0's result is broadcast.
  template <typename T, typename Combine>
  __device__ __forceinline__ T warp_reduce(T v, T identity, Combine combine) const {
    if (full_warp()) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        v = combine(v, __shfl_xor_sync(0xffffffffu, v, offset));
      }
      return v;
    }
    const int n = partial_lanes();
    const unsigned mask = (1u << n) - 1u;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      bool exists;
      const T other = shfl_xor_below(v, offset, n, mask, &exists);
      v = combine(v, exists ? other : identity);
    }
    return __shfl_sync(mask, v, 0);
  }
  // __shfl_xor_sync within lanes [0, n): shfl's own clamp (its c operand: the last lane,
  // segment mask 0) says whether the partner exists.
  template <typename T>
  __device__ __forceinline__ static T shfl_xor_below(T v, int offset, int n, unsigned mask,
                                                     bool* exists) {
    static_assert(sizeof(T) == 4, "32-bit values");
    unsigned in, out, found;
    memcpy(&in, &v, 4);
    asm("{\n\t.reg .pred p;\n\t"
        "shfl.sync.bfly.b32 %0|p, %2, %3, %4, %5;\n\t"
        "selp.u32 %1, 1, 0, p;\n\t}"
        : "=r"(out), "=r"(found)
        : "r"(in), "r"(offset), "r"(n - 1), "r"(mask));
    *exists = found != 0;
    T result;
    memcpy(&result, &out, 4);
    return result;
  }
};

}  // namespace simt
}  // namespace prebuild

#else
#define PREBUILD_SIMT_BODY inline
#endif

namespace prebuild {
namespace simt {

// warp_scatter_sums: the warp sums of N <= 16 floats, as warp_sum gives each (the same bits),
// spread over the lanes: lane L gets the sum of value scatter_index<N>(L) (zero where that
// index is N or more), held by scatter_lanes<N> consecutive lanes; scatter_owner<N>(L) picks
// one of them, e.g. to add it to global memory: one atomic instruction for the warp's N sums.
//
// How (a full warp): at each of the butterfly's first log2(P) steps (P: N rounded up to a
// power of two) a lane keeps half of its values and sends its partner the other half, so each
// step adds half as many values; then the remaining steps add the one value left. Each sum
// meets the same partners in the same order as warp_sum's butterfly, so its bits are the
// same, with P - 1 + (5 - log2 P) shuffles instead of 5 N (16 instead of 45 for N = 9). A
// block's last, partial warp takes one warp_sum per value; its lanes may end before the
// owners of the last indices, so callers add those with warp_sums there (ctx.warp_is_full()).
template <int N>
struct Scatter {
  static_assert(N >= 1 && N <= 16, "warp_scatter_sums: 1 to 16 values");
  static constexpr int kPadded = N <= 1 ? 1 : N <= 2 ? 2 : N <= 4 ? 4 : N <= 8 ? 8 : 16;
  static constexpr int kSplits = kPadded == 1 ? 0 : kPadded == 2 ? 1 : kPadded == 4 ? 2
                                 : kPadded == 8 ? 3 : 4;
  static constexpr int kShift = 5 - kSplits;  // lanes per sum: 1 << kShift
};

template <int N>
PREBUILD_SIMT_BODY int scatter_index(int lane) {
  return lane >> Scatter<N>::kShift;
}

template <int N>
PREBUILD_SIMT_BODY bool scatter_owner(int lane) {
  return (lane & ((1 << Scatter<N>::kShift) - 1)) == 0;
}

template <int N, typename Ctx>
PREBUILD_SIMT_BODY float warp_scatter_sums(const Ctx& ctx, const float* values) {
  using S = Scatter<N>;
  const int lane = ctx.lane();
  if (!ctx.warp_is_full()) {
    float mine = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float sum = ctx.warp_sum(values[i]);
      if (i == scatter_index<N>(lane)) mine = sum;
    }
    return mine;
  }
  float a[S::kPadded];
#pragma unroll
  for (int i = 0; i < S::kPadded; ++i) a[i] = i < N ? values[i] : 0.f;
  // Split steps: offsets 16, 8, ... keeping the lower half of the values (lane bit clear)
  // or the upper one (bit set); a[0, half) then holds the kept values' partial sums.
  // The inner loop's bound is a constant and `half` a guard: with `i < half` as its bound, nvcc
  // unrolls the inner loop before the outer one, sees no constant trip count, and leaves a
  // loop whose a[half + i] are selects over every register (SASS, sm_90: ~220 instructions
  // for the first step instead of ~30).
#pragma unroll
  for (int step = 0; step < S::kSplits; ++step) {
    const int offset = 16 >> step, half = S::kPadded >> (step + 1);
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < S::kPadded / 2; ++i) {
      if (i < half) {
        const float keep = upper ? a[half + i] : a[i];
        const float send = upper ? a[i] : a[half + i];
        a[i] = keep + ctx.shfl_xor(send, offset);
      }
    }
  }
  // The remaining steps: one value per lane, added over the lanes that share it.
#pragma unroll
  for (int offset = 16 >> S::kSplits; offset > 0; offset >>= 1) {
    a[0] += ctx.shfl_xor(a[0], offset);
  }
  return a[0];
}

}  // namespace simt
}  // namespace prebuild
