// The pack op family on CUDA: thin __global__ wrappers over the block bodies of
// pack_kernels.h, CUB's scan (scan_cuda.cuh), registered for the CUDA dispatch key through
// pack.h's host functions.
#include <torch/csrc/stable/library.h>

#include <prebuild/cuda_launch.cuh>
#include "pack.h"
#include "pack_kernels.h"
#include "scan_cuda.cuh"

namespace prebuild {
namespace gsplat {
namespace pack {
namespace {

__global__ void __launch_bounds__(kBlock) flag_kernel(FlagArgs args) {
  NoShared shared;
  flag_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kBlock) pack_kernel(PackArgs args) {
  NoShared shared;
  pack_block(simt::DeviceContext{}, shared, args);
}

__global__ void __launch_bounds__(kBlock) unpack_kernel(UnpackArgs args) {
  NoShared shared;
  unpack_block(simt::DeviceContext{}, shared, args);
}

struct CudaBackend : OnCuda {
  static constexpr const char* name = "prebuild::pack_visible";

  static void flag(const FlagArgs& a, const Tensor& on) {
    launch("pack_visible (flag)", flag_kernel, element_geometry(a.n), 0, on, a);
  }
  static void scan(Tensor& cum, int64_t n, const Tensor& on) {
    inclusive_scan_cuda("pack_visible (scan)", on, cum, n);
  }
  static int64_t total(const Tensor& cum, int64_t n, const Tensor& on) {
    return read_total_cuda("pack_visible (read nnz)", on, cum, n);
  }
  static void pack(const PackArgs& a, const Tensor& on) {
    launch("pack_visible (pack)", pack_kernel, element_geometry(a.n), 0, on, a);
  }
  static void unpack(const UnpackArgs& a, const Tensor& on) {
    launch("pack_visible_backward", unpack_kernel, element_geometry(a.nnz), 0, on, a);
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) { register_ops<CudaBackend>(m); }

}  // namespace pack
}  // namespace gsplat
}  // namespace prebuild
