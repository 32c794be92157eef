// Input checks shared by the CPU and CUDA host functions of every op.
// The Python wrappers validate first and raise precise Python exceptions; these checks keep
// direct `torch.ops.prebuild.*` calls from ever reading out of bounds.
#pragma once

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

namespace prebuild {

using torch::stable::Tensor;

inline void check_float32(const Tensor& t, const char* op, const char* name) {
  STD_TORCH_CHECK(t.scalar_type() == torch::headeronly::ScalarType::Float, op, ": ", name,
                  " must be float32");
}

inline void check_contiguous(const Tensor& t, const char* op, const char* name) {
  STD_TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}

inline void check_dim(const Tensor& t, int64_t dim, const char* op, const char* name) {
  STD_TORCH_CHECK(t.dim() == dim, op, ": ", name, " must have ", dim, " dimensions, got ",
                  t.dim());
}

inline void check_same_shape(const Tensor& a, const Tensor& b, const char* op,
                             const char* name_a, const char* name_b) {
  bool same = a.dim() == b.dim();
  for (int64_t d = 0; same && d < a.dim(); ++d) same = a.size(d) == b.size(d);
  STD_TORCH_CHECK(same, op, ": ", name_a, " and ", name_b, " must have the same shape");
}

inline void check_same_device(const Tensor& a, const Tensor& b, const char* op,
                              const char* name_a, const char* name_b) {
  STD_TORCH_CHECK(a.device() == b.device(), op, ": ", name_a, " and ", name_b,
                  " must be on the same device");
}

// A float32 contiguous tensor on `like`'s device (the inputs of most ops).
inline void check_float_input(const Tensor& t, const Tensor& like, const char* op,
                              const char* name, const char* like_name) {
  check_same_device(t, like, op, name, like_name);
  check_float32(t, op, name);
  check_contiguous(t, op, name);
}

// The device part of an op family's backends (see csrc/gsplat/projection.h): the CPU kernels
// and the simt launcher take CPU tensors, the CUDA kernels CUDA ones.
struct OnCpu {
  static constexpr const char* device = "CPU";
  static bool on_device(const Tensor& t) { return t.is_cpu(); }
};

struct OnCuda {
  static constexpr const char* device = "CUDA";
  static bool on_device(const Tensor& t) { return t.is_cuda(); }
};

// Refuses a call whose tensors (`on`) are not on the Backend's device.
template <typename Backend>
void check_backend(const Tensor& on, const char* op) {
  STD_TORCH_CHECK(Backend::on_device(on), op, ": this kernel runs on ", Backend::device,
                  " tensors");
}

}  // namespace prebuild
