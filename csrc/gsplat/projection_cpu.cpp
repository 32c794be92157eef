// The projection ops on the CPU: the same per-element code as the CUDA kernels
// (projection_kernels.h / projection_math.h) on PyTorch's thread pool. The forwards run over
// all pairs; the fused backward runs over Gaussians, each summing its cameras in order, and
// sums viewmat gradients per fixed chunk of Gaussians, then the chunks in order: no atomics,
// the same result for any number of threads.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <prebuild/cpu_grid.h>

#include <vector>

#include "projection.h"
#include "projection_kernels.h"

namespace prebuild {
namespace gsplat {
namespace projection {
namespace {

constexpr int64_t kGrain = 1024;  // pairs (forward) or Gaussians (backward) per task

struct CpuBackend : OnCpu {
  static constexpr const char* forward_name = "prebuild::fully_fused_projection_forward";
  static constexpr const char* backward_name = "prebuild::fully_fused_projection_backward";
  static constexpr const char* proj_forward_name = "prebuild::proj_forward";
  static constexpr const char* proj_backward_name = "prebuild::proj_backward";

  static void run_forward(const ForwardArgs& a, const Tensor&) {
    cpu::for_each_element(pair_count(a.scene), kGrain,
                          [&](int64_t idx) { forward_element(a, idx); });
  }

  static void run_backward(const BackwardArgs& a, const Tensor&) {
    const int64_t B = a.scene.B, C = a.scene.C, N = a.scene.N;
    const int64_t rows = B * N;  // Gaussian rows
    const int64_t chunks = (rows + kGrain - 1) / kGrain;
    const bool with_viewmats = a.v_viewmats != nullptr;
    // Per chunk, the viewmat gradients of all B * C cameras (only when wanted).
    std::vector<float> partial(with_viewmats ? chunks * B * C * kViewmatGrad : 0, 0.f);
    torch::stable::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
      for (int64_t chunk = first; chunk < last; ++chunk) {
        float* cams = with_viewmats ? partial.data() + chunk * B * C * kViewmatGrad : nullptr;
        const int64_t end = std::min(rows, (chunk + 1) * kGrain);
        for (int64_t row = chunk * kGrain; row < end; ++row) {
          const int64_t b = row / N, n = row % N;
          for (int64_t c = 0; c < C; ++c) {
            const int64_t idx = (b * C + c) * N + n;
            if (is_culled(a, idx)) continue;
            const GaussianGrad g = backward_element(a, idx);
            accumulate(a, row, g, [](float* address, float value) { *address += value; });
            if (!with_viewmats) continue;
            float v_view[kViewmatGrad];
            viewmat_grad(g, v_view);
            for (int k = 0; k < kViewmatGrad; ++k) cams[(b * C + c) * kViewmatGrad + k] += v_view[k];
          }
        }
      }
    });
    if (!with_viewmats) return;
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      for (int64_t cam = 0; cam < B * C; ++cam)
        for (int k = 0; k < kViewmatGrad; ++k)
          a.v_viewmats[cam * 16 + k] += partial[(chunk * B * C + cam) * kViewmatGrad + k];
  }

  static void run_proj_forward(const ProjArgs& a, const Tensor&) {
    cpu::for_each_element(a.I * a.N, kGrain, [&](int64_t idx) { proj_forward_element(a, idx); });
  }

  static void run_proj_backward(const ProjArgs& a, const Tensor&) {
    cpu::for_each_element(a.I * a.N, kGrain, [&](int64_t idx) { proj_backward_element(a, idx); });
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) { register_ops<CpuBackend>(m); }

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
