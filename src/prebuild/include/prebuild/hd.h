// Marks functions shared by the CUDA kernels and the CPU implementations.
// Under nvcc they compile for host and device; under a plain C++ compiler they are ordinary
// inline functions, so the CPU code runs exactly the same per-element math as the GPU.
#pragma once

#if defined(__CUDACC__)
#define PREBUILD_HD __host__ __device__ __forceinline__
#else
#define PREBUILD_HD inline
#endif
