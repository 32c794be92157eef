// Fused SSIM on the CPU: the same per-pixel math as the CUDA kernels (ssim_math.h), as two
// separable passes parallelised over image rows with PyTorch's own thread pool.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "ssim.h"
#include "ssim_math.h"

namespace prebuild {
namespace ssim {
namespace {

struct PlaneGeometry {
  int64_t planes;  // B * C
  int64_t H, W;
  int64_t plane_size() const { return H * W; }
  int64_t numel() const { return planes * H * W; }
};

PlaneGeometry geometry(const Tensor& img) {
  return {img.size(0) * img.size(1), img.size(2), img.size(3)};
}

// Rows per parallel task: about 64k multiply-adds, so tiny images stay on one thread.
int64_t grain_rows(int64_t W) { return std::max<int64_t>(1, (1 << 16) / (W * kWindow * 5 + 1)); }

// The passes work on whole rows, one moment at a time (structure of arrays), so that the
// inner loops run over contiguous pixels and the compiler vectorises them. Each output still
// sums its taps k = 0..10 in order, as the CUDA kernels and the per-pixel loops before did.

// Horizontal pass: out[m][row][j] = sum_k w[k] * value(m, row, j + k - 5), zero outside the
// image. `value(i, v)` writes the kNumMoments quantities of in-bounds pixel i to v; `out` holds
// kNumMoments planes of `g.numel()` floats. Rows are (plane, y) pairs.
template <typename Value>
void horizontal_pass(const PlaneGeometry& g, float* out, const Value& value) {
  const int64_t rows = g.planes * g.H;
  const int64_t W = g.W, padded = W + 2 * kRadius;
  torch::stable::parallel_for(0, rows, grain_rows(W), [&](int64_t begin, int64_t end) {
    // The row's quantities with kRadius zeros on each side: no bounds checks in the sums.
    std::vector<float> line(kNumMoments * padded, 0.f);
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t j = 0; j < W; ++j) {
        float v[kNumMoments];
        value(row * W + j, v);
        for (int m = 0; m < kNumMoments; ++m) line[m * padded + kRadius + j] = v[m];
      }
      for (int m = 0; m < kNumMoments; ++m) {
        const float* src = line.data() + m * padded;
        float* dst = out + m * g.numel() + row * W;
        for (int64_t j = 0; j < W; ++j) dst[j] = 0.f;
        for (int k = 0; k < kWindow; ++k) {
          const float w = gauss_weight(k);
          for (int64_t j = 0; j < W; ++j) dst[j] += w * src[j + k];
        }
      }
    }
  });
}

// Vertical pass over the horizontal sums, then `finish(index, sums)` per pixel.
template <typename Finish>
void vertical_pass(const PlaneGeometry& g, const float* h, const Finish& finish) {
  const int64_t rows = g.planes * g.H;
  const int64_t W = g.W;
  torch::stable::parallel_for(0, rows, grain_rows(W), [&](int64_t begin, int64_t end) {
    std::vector<float> sums(kNumMoments * W);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t plane = row / g.H;
      const int64_t y = row % g.H;
      // Taps whose source row lies outside the image add zero: skip them.
      const int64_t k0 = std::max<int64_t>(0, kRadius - y);
      const int64_t k1 = std::min<int64_t>(kWindow, g.H - y + kRadius);
      for (int m = 0; m < kNumMoments; ++m) {
        float* acc = sums.data() + m * W;
        for (int64_t j = 0; j < W; ++j) acc[j] = 0.f;
        for (int64_t k = k0; k < k1; ++k) {
          const float w = gauss_weight(static_cast<int>(k));
          const float* src = h + m * g.numel() + plane * g.plane_size() + (y + k - kRadius) * W;
          for (int64_t j = 0; j < W; ++j) acc[j] += w * src[j];
        }
      }
      for (int64_t j = 0; j < W; ++j) {
        const float s[kNumMoments] = {sums[j], sums[W + j], sums[2 * W + j], sums[3 * W + j],
                                      sums[4 * W + j]};
        finish(row * W + j, s);
      }
    }
  });
}

}  // namespace

std::tuple<Tensor, Tensor> forward_cpu(Tensor img1, Tensor img2, bool train) {
  constexpr const char* op = "prebuild::fused_ssim_forward";
  check_images(img1, img2, op);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  const PlaneGeometry g = geometry(img1);

  ForwardOutputs outputs = allocate_forward(img1, img2, train);
  Tensor ssim_map = outputs.ssim_map, dS = outputs.dS;
  if (g.numel() == 0) return {ssim_map, dS};

  Tensor scratch = torch::stable::new_empty(img1, {kNumMoments, g.numel()});
  const float* x = img1.const_data_ptr<float>();
  const float* y = img2.const_data_ptr<float>();
  float* h = scratch.mutable_data_ptr<float>();
  float* out = ssim_map.mutable_data_ptr<float>();
  float* dS_ptr = train ? dS.mutable_data_ptr<float>() : nullptr;
  const int64_t n = g.numel();

  horizontal_pass(g, h, [&](int64_t i, float* v) { pixel_products(x[i], y[i], v); });
  vertical_pass(g, h, [&](int64_t i, const float* sums) {
    float d[kNumMoments];
    out[i] = ssim_from_sums(sums, dS_ptr ? d : nullptr);
    if (dS_ptr)
      for (int m = 0; m < kNumMoments; ++m) dS_ptr[m * n + i] = d[m];
  });
  return {ssim_map, dS};
}

std::tuple<Tensor, Tensor> backward_cpu(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS) {
  constexpr const char* op = "prebuild::fused_ssim_backward";
  check_backward_inputs(grad_map, img1, img2, dS, op);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  const PlaneGeometry g = geometry(img1);

  BackwardOutputs outputs = allocate_backward(grad_map, img1, img2, dS);
  Tensor grad1 = outputs.grad1, grad2 = outputs.grad2;
  if (g.numel() == 0) return {grad1, grad2};

  Tensor scratch = torch::stable::new_empty(img1, {kNumMoments, g.numel()});
  const float* gm = grad_map.const_data_ptr<float>();
  const float* x = img1.const_data_ptr<float>();
  const float* y = img2.const_data_ptr<float>();
  const float* d = dS.const_data_ptr<float>();
  float* h = scratch.mutable_data_ptr<float>();
  float* g1 = grad1.mutable_data_ptr<float>();
  float* g2 = grad2.mutable_data_ptr<float>();
  const int64_t n = g.numel();

  horizontal_pass(g, h, [&](int64_t i, float* v) {
    for (int m = 0; m < kNumMoments; ++m) v[m] = gm[i] * d[m * n + i];
  });
  vertical_pass(g, h, [&](int64_t i, const float* conv) {
    image_grads(x[i], y[i], conv, &g1[i], &g2[i]);
  });
  return {grad1, grad2};
}

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_cpu));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_cpu));
}

}  // namespace ssim
}  // namespace prebuild
