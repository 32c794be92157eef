// Fused SSIM on the CPU: the same per-pixel math as the CUDA kernels (ssim_math.h), both
// separable passes fused per band of rows, parallelised with PyTorch's own thread pool.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <prebuild/cpu_isa.h>

#include "ssim.h"
#include "ssim_math.h"

namespace prebuild {
namespace ssim {
namespace {

// Pixels per block of the inner loops: 32 gave the shortest times here (8 and 16: 10-40 %
// slower, 64: the same), enough independent chains of adds to hide the adder's latency.
constexpr int64_t kLanes = 32;

// Where the time goes, and why this shape: each output needs 11 horizontal sums of its five
// moments from 11 rows. A band of output rows keeps the horizontal sums of the last kWindow
// source rows in a ring (slot r % kWindow holds row r), so every horizontal sum is computed
// once per band and never leaves the cache: no scratch planes, whose first touch (page
// faults) cost as much as the arithmetic. The inner loops run over blocks of kLanes
// contiguous pixels with the taps unrolled, summing the taps k = 0..10 in order like the
// CUDA kernels, so both backends give the same bits.
struct Band {
  int64_t W, stride;      // stride: W rounded up to kLanes (the ring's row pitch)
  std::vector<float> line;  // one source row's moments, kRadius zeros each side, per moment
  std::vector<float> ring;  // kWindow rows x kNumMoments x stride horizontal sums

  explicit Band(int64_t width)
      : W(width), stride((width + kLanes - 1) / kLanes * kLanes),
        line(kNumMoments * (stride + 2 * kRadius), 0.f), ring(kWindow * kNumMoments * stride) {}

  float* line_of(int m) { return line.data() + m * (stride + 2 * kRadius); }
  float* ring_of(int64_t row, int m) { return ring.data() + ((row % kWindow) * kNumMoments + m) * stride; }
};

// Horizontal sums of source row `row` (pixel index `first` is its column 0) into the ring.
template <typename Value>
PREBUILD_ALWAYS_INLINE void horizontal_row(Band& b, int64_t row, int64_t first,
                                           const Value& value) {
  // The row's moments, a block of kLanes pixels at a time through registers (the fixed trip
  // count and the local array let the compiler vectorise `value`), the tail one by one.
  int64_t j0 = 0;
  for (; j0 + kLanes <= b.W; j0 += kLanes) {
    float v[kNumMoments][kLanes];
    for (int t = 0; t < kLanes; ++t) {
      float p[kNumMoments];
      value(first + j0 + t, p);
      for (int m = 0; m < kNumMoments; ++m) v[m][t] = p[m];
    }
    for (int m = 0; m < kNumMoments; ++m)
      for (int t = 0; t < kLanes; ++t) b.line_of(m)[kRadius + j0 + t] = v[m][t];
  }
  for (; j0 < b.W; ++j0) {
    float p[kNumMoments];
    value(first + j0, p);
    for (int m = 0; m < kNumMoments; ++m) b.line_of(m)[kRadius + j0] = p[m];
  }
  for (int m = 0; m < kNumMoments; ++m) {
    const float* src = b.line_of(m);
    float* dst = b.ring_of(row, m);
    for (int64_t j = 0; j < b.stride; j += kLanes) {
      // Taps innermost and fully unrolled: each tap is then one unaligned vector load per
      // vector of lanes (with the taps outermost, GCC rotates scalars between taps instead).
      for (int t = 0; t < kLanes; ++t) {
        float acc = 0.f;
#pragma GCC unroll 11
        for (int k = 0; k < kWindow; ++k) acc += gauss_weight(k) * src[j + t + k];
        dst[j + t] = acc;
      }
    }
  }
}

// Calls f(t) for the lanes t < `lanes` of a block: with a fixed trip count when the block is
// full, so that the per-pixel math in `f` vectorises.
template <typename F>
PREBUILD_ALWAYS_INLINE void for_lanes(int64_t lanes, const F& f) {
  if (lanes == kLanes) {
    for (int t = 0; t < kLanes; ++t) f(t);
  } else {
    for (int t = 0; t < lanes; ++t) f(t);
  }
}

using Block = float[kNumMoments][kLanes];

// Output rows [y0, y1) of one plane (pixel index `plane_first` is its (0, 0)): the
// horizontal sums of `value`, then the vertical sums, then `finish(first, lanes, sums)` per
// block of `lanes` pixels from index `first` (sums[m][t]: moment m of pixel first + t).
template <typename Value, typename Finish>
PREBUILD_ALWAYS_INLINE void band_rows(Band& b, int64_t H, int64_t plane_first, int64_t y0,
                                      int64_t y1, const Value& value, const Finish& finish) {
  const int64_t W = b.W;
  // Source rows y0 - kRadius .. y0 + kRadius - 1 first; each output row adds the next one.
  for (int64_t r = std::max<int64_t>(0, y0 - kRadius); r < std::min(H, y0 + kRadius); ++r)
    horizontal_row(b, r, plane_first + r * W, value);
  for (int64_t y = y0; y < y1; ++y) {
    if (y + kRadius < H) horizontal_row(b, y + kRadius, plane_first + (y + kRadius) * W, value);
    // Taps whose source row lies outside the image add zero: skip them.
    const int k0 = static_cast<int>(std::max<int64_t>(0, kRadius - y));
    const int k1 = static_cast<int>(std::min<int64_t>(kWindow, H - y + kRadius));
    const float* tap_rows[kWindow];
    for (int k = k0; k < k1; ++k) tap_rows[k] = b.ring_of(y + k - kRadius, 0);
    for (int64_t j0 = 0; j0 < W; j0 += kLanes) {
      // Taps outermost: five independent chains of adds (one per moment) keep the adder busy.
      Block s = {};
      for (int k = k0; k < k1; ++k) {
        const float w = gauss_weight(k);
        for (int m = 0; m < kNumMoments; ++m) {
          const float* src = tap_rows[k] + m * b.stride + j0;
          for (int t = 0; t < kLanes; ++t) s[m][t] += w * src[t];
        }
      }
      finish(plane_first + y * W + j0, std::min(kLanes, W - j0), s);
    }
  }
}

// Runs `band_rows` over the rows [begin, end) of the flattened (plane, y) rows: one band per
// plane the range touches.
template <typename Value, typename Finish>
PREBUILD_ALWAYS_INLINE void rows(int64_t H, int64_t W, int64_t begin, int64_t end,
                                 const Value& value, const Finish& finish) {
  Band b(W);
  for (int64_t row = begin; row < end;) {
    const int64_t plane = row / H, y0 = row % H;
    const int64_t y1 = std::min(H, y0 + (end - row));
    band_rows(b, H, plane * H * W, y0, y1, value, finish);
    row += y1 - y0;
  }
}

PREBUILD_ALWAYS_INLINE void forward_rows(const ForwardArgs& a, int64_t begin, int64_t end) {
  const int64_t n = a.planes * a.H * a.W;
  const auto value = [&](int64_t i, float* v) { pixel_products(a.x[i], a.y[i], v); };
  const auto finish = [&](int64_t first, int64_t lanes, const Block& s) {
    // Every lane (the tail's extra lanes hold zero sums), then the stores of the real ones.
    float S[kLanes];
    Block d;
    for (int t = 0; t < kLanes; ++t) {
      const float sums[kNumMoments] = {s[0][t], s[1][t], s[2][t], s[3][t], s[4][t]};
      float dt[kNumMoments];
      S[t] = ssim_from_sums(sums, dt);
      for (int m = 0; m < kNumMoments; ++m) d[m][t] = dt[m];
    }
    for_lanes(lanes, [&](int t) { a.ssim_map[first + t] = S[t]; });
    if (a.dS)
      for (int m = 0; m < kNumMoments; ++m)
        for_lanes(lanes, [&](int t) { a.dS[m * n + first + t] = d[m][t]; });
  };
  rows(a.H, a.W, begin, end, value, finish);
}

PREBUILD_ALWAYS_INLINE void backward_rows(const BackwardArgs& a, int64_t begin, int64_t end) {
  const int64_t n = a.planes * a.H * a.W;
  const auto value = [&](int64_t i, float* v) {
    for (int m = 0; m < kNumMoments; ++m) v[m] = a.grad_map[i] * a.dS[m * n + i];
  };
  const auto finish = [&](int64_t first, int64_t lanes, const Block& s) {
    for_lanes(lanes, [&](int t) {
      const int64_t i = first + t;
      const float conv[kNumMoments] = {s[0][t], s[1][t], s[2][t], s[3][t], s[4][t]};
      image_grads(a.x[i], a.y[i], conv, &a.grad1[i], &a.grad2[i]);
    });
  };
  rows(a.H, a.W, begin, end, value, finish);
}

// The two instruction-set copies of each pass (prebuild/cpu_isa.h).
void forward_rows_baseline(const ForwardArgs& a, int64_t begin, int64_t end) {
  forward_rows(a, begin, end);
}
PREBUILD_TARGET_AVX2 void forward_rows_avx2(const ForwardArgs& a, int64_t begin, int64_t end) {
  forward_rows(a, begin, end);
}
void backward_rows_baseline(const BackwardArgs& a, int64_t begin, int64_t end) {
  backward_rows(a, begin, end);
}
PREBUILD_TARGET_AVX2 void backward_rows_avx2(const BackwardArgs& a, int64_t begin,
                                             int64_t end) {
  backward_rows(a, begin, end);
}

// Rows per parallel task: enough that a task's kWindow - 1 extra horizontal rows (the band's
// halo) stay a small share, and tiny images stay on one thread.
int64_t grain_rows(int64_t W) {
  return std::max<int64_t>(4 * kWindow, (1 << 18) / (W * kWindow * kNumMoments + 1));
}

template <typename Args, typename Rows>
void run(const Args& a, Rows rows_fn) {
  torch::stable::parallel_for(0, a.planes * a.H, grain_rows(a.W),
                              [&](int64_t begin, int64_t end) { rows_fn(a, begin, end); });
}

}  // namespace

std::tuple<Tensor, Tensor> forward_cpu(Tensor img1, Tensor img2, bool train) {
  constexpr const char* op = "prebuild::fused_ssim_forward";
  check_images(img1, img2, op);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  ForwardOutputs out = allocate_forward(img1, img2, train);
  if (out.args.planes * out.args.H * out.args.W > 0)
    run(out.args, pick_isa(&forward_rows_baseline, &forward_rows_avx2));
  return {out.ssim_map, out.dS};
}

std::tuple<Tensor, Tensor> backward_cpu(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS) {
  constexpr const char* op = "prebuild::fused_ssim_backward";
  check_backward_inputs(grad_map, img1, img2, dS, op);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  BackwardOutputs out = allocate_backward(grad_map, img1, img2, dS);
  if (out.args.planes * out.args.H * out.args.W > 0)
    run(out.args, pick_isa(&backward_rows_baseline, &backward_rows_avx2));
  return {out.grad1, out.grad2};
}

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_cpu));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_cpu));
}

}  // namespace ssim
}  // namespace prebuild
