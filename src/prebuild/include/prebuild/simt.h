// The SIMT layer every CUDA kernel is written through, so that the kernel's own source also
// runs on the CPU in tests.
//
// A kernel is split into
//   - a *block body*: a function template over a context `Ctx` and a struct holding the
//     block's shared memory, marked PREBUILD_SIMT_BODY. It reads its indices from the context
//     (ctx.thread(), ctx.block(), ctx.block_dim(), ctx.grid_dim()), synchronises the block
//     with ctx.sync() / ctx.sync_count(predicate) (= __syncthreads_count) and adds to global
//     memory shared by blocks with ctx.atomic_add(address, value); it never names threadIdx,
//     __shared__, __syncthreads or atomicAdd itself;
//   - a thin __global__ wrapper (CUDA) that declares the shared struct and calls the body with
//     a DeviceContext, whose methods are the CUDA built-ins: zero cost once inlined;
//   - on the host, simt::launch (prebuild/simt_launcher.h) runs the same body for every block of
//     the grid with blockDim logical threads (see there for how).
#pragma once

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
};

}  // namespace simt
}  // namespace prebuild

#else
#define PREBUILD_SIMT_BODY inline
#endif
