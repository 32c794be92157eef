// The one place where CUDA kernels are launched.
//
// Every launch (a) makes the inputs' device current (a multi-GPU job that launched on the
// wrong device is how fused SSIM losses crashed with "illegal memory access" on cuda:1),
// (b) runs on PyTorch's current stream for that device (never the legacy default stream),
// and (c) checks the launch, turning "no kernel image" into advice on which wheel to install.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

#include <utility>

#include "simt.h"

// The package these kernels belong to, named in every error (`prebuild wheel` passes
// -DPREBUILD_PACKAGE=<[tool.prebuild] package>).
#ifndef PREBUILD_PACKAGE
#define PREBUILD_PACKAGE prebuild
#endif
#define PREBUILD_STRINGIFY_(x) #x
#define PREBUILD_STRINGIFY(x) PREBUILD_STRINGIFY_(x)
#define PREBUILD_PACKAGE_NAME PREBUILD_STRINGIFY(PREBUILD_PACKAGE)

namespace prebuild {

inline void check_cuda_launch(cudaError_t err, const char* kernel) {
  if (err == cudaSuccess) return;
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorUnsupportedPtxVersion ||
      err == cudaErrorInvalidKernelImage) {
    int device = -1;
    cudaGetDevice(&device);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    STD_TORCH_CHECK(false, PREBUILD_PACKAGE_NAME ": ", kernel, " has no code for cuda:", device, " (",
                    prop.name, ", compute capability ", prop.major, ".", prop.minor,
                    "). This wheel was not built for it; build one with `prebuild wheel --arch sm_",
                    prop.major, prop.minor, "` and pip install it. (CUDA error: ",
                    cudaGetErrorString(err), ")");
  }
  STD_TORCH_CHECK(false, PREBUILD_PACKAGE_NAME ": launching ", kernel, " failed: ", cudaGetErrorString(err));
}

// PyTorch's current stream for `device`. The stable ABI's own getter
// (Stream::nativeHandle()) exists only from torch 2.13; the AOTI C shim's
// aoti_torch_get_current_cuda_stream (the layer under the stable ABI, kept ABI-compatible) has
// been in every torch we target. It lives in libtorch_cuda.so, which a library built against a
// CPU torch cannot link to: it is looked up, once, in the libtorch_cuda that torch has loaded.
inline cudaStream_t current_stream(int32_t device) {
  using Getter = AOTITorchError (*)(int32_t, void**);
  static const Getter getter = [] {
    void* cuda = dlopen("libtorch_cuda.so", RTLD_NOLOAD | RTLD_LAZY);
    void* found = dlsym(cuda != nullptr ? cuda : RTLD_DEFAULT, "aoti_torch_get_current_cuda_stream");
    return reinterpret_cast<Getter>(found);
  }();
  STD_TORCH_CHECK(getter != nullptr, PREBUILD_PACKAGE_NAME ": this torch has no aoti_torch_get_current_cuda_stream "
                  "in a loaded libtorch_cuda.so: is it a CUDA build of torch?");
  void* stream = nullptr;
  STD_TORCH_CHECK(getter(device, &stream) == AOTI_TORCH_SUCCESS, PREBUILD_PACKAGE_NAME
                  ": cannot get PyTorch's current CUDA stream of cuda:", device);
  return static_cast<cudaStream_t>(stream);
}

// Runs `fn(stream)` with the device of `on` made current and PyTorch's current stream for
// that device, then checks for a launch error. For library calls that launch kernels
// themselves (CUB's radix sort and scans): they take the stream as an argument.
template <typename Fn>
void on_current_stream(const char* name, const torch::stable::Tensor& on, Fn&& fn) {
  const auto device = on.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  fn(current_stream(device));
  check_cuda_launch(cudaGetLastError(), name);
}

inline dim3 to_dim3(simt::Index3 i) {
  return dim3(static_cast<unsigned>(i.x), static_cast<unsigned>(i.y), static_cast<unsigned>(i.z));
}

// Launches `kernel<<<g.grid, g.block, shared_bytes, current stream of device>>>(args...)`
// with the device of `on` made current for the duration of the call.
template <typename... KernelArgs, typename... Args>
void launch(const char* name, void (*kernel)(KernelArgs...), const simt::LaunchGeometry& g,
            size_t shared_bytes, const torch::stable::Tensor& on, Args&&... args) {
  on_current_stream(name, on, [&](cudaStream_t stream) {
    kernel<<<to_dim3(g.grid), to_dim3(g.block), shared_bytes, stream>>>(
        std::forward<Args>(args)...);
  });
}

}  // namespace prebuild
