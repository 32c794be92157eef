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
//
// M: the planes summed (the five moments, or the four distinct maps of the backward).
template <int M>
struct Ring {
  static constexpr int kPlanes = M;
  int64_t W, stride;        // stride: W rounded up to kLanes (the ring's row pitch)
  std::vector<float> line;  // the next source row's values, kRadius zeros each side, per plane
  std::vector<float> ring;  // kWindow rows x M x stride horizontal sums

  explicit Ring(int64_t width)
      : W(width), stride((width + kLanes - 1) / kLanes * kLanes),
        line(M * (stride + 2 * kRadius), 0.f), ring(kWindow * M * stride) {}

  // Column j of the line is line_of(m)[j]; only [0, W) is ever written (the rest stays zero).
  float* line_of(int m) { return line.data() + m * (stride + 2 * kRadius) + kRadius; }
  const float* ring_of(int64_t row, int m) const {
    return ring.data() + ((row % kWindow) * M + m) * stride;
  }

  // The horizontal sums of the line, as source row `row`.
  PREBUILD_ALWAYS_INLINE void push(int64_t row) {
    for (int m = 0; m < M; ++m) {
      const float* src = line_of(m) - kRadius;
      float* dst = ring.data() + ((row % kWindow) * M + m) * stride;
      for (int64_t j = 0; j < stride; j += kLanes) {
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
};

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

template <int M = kNumMoments>
using Block = float[M][kLanes];

// Fills the ring's line with `value(index, v)` for the W pixels from index `first`, a block
// of kLanes at a time through a local array (so `value` vectorises), the tail one by one.
template <int M, typename Value>
PREBUILD_ALWAYS_INLINE void fill_line(Ring<M>& r, int64_t first, const Value& value) {
  int64_t j0 = 0;
  for (; j0 + kLanes <= r.W; j0 += kLanes) {
    Block<M> v;
    for (int t = 0; t < kLanes; ++t) {
      float p[M];
      value(first + j0 + t, p);
      for (int m = 0; m < M; ++m) v[m][t] = p[m];
    }
    for (int m = 0; m < M; ++m)
      for (int t = 0; t < kLanes; ++t) r.line_of(m)[j0 + t] = v[m][t];
  }
  for (; j0 < r.W; ++j0) {
    float p[M];
    value(first + j0, p);
    for (int m = 0; m < M; ++m) r.line_of(m)[j0] = p[m];
  }
}

// Calls `block(j0, lanes, sums)` for each block of output row y (of an H-row plane): the
// vertical sums of the ring's horizontal sums, which must hold rows y - kRadius .. y +
// kRadius (those inside the image).
template <int M, typename Visit>
PREBUILD_ALWAYS_INLINE void vertical_row(const Ring<M>& r, int64_t H, int64_t y, const Visit& block) {
  // Taps whose source row lies outside the image add zero: skip them.
  const int k0 = static_cast<int>(std::max<int64_t>(0, kRadius - y));
  const int k1 = static_cast<int>(std::min<int64_t>(kWindow, H - y + kRadius));
  const float* tap_rows[kWindow];
  for (int k = k0; k < k1; ++k) tap_rows[k] = r.ring_of(y + k - kRadius, 0);
  for (int64_t j0 = 0; j0 < r.W; j0 += kLanes) {
    // Taps outermost: five independent chains of adds (one per moment) keep the adder busy.
    Block<M> s = {};
    for (int k = k0; k < k1; ++k) {
      const float w = gauss_weight(k);
      for (int m = 0; m < M; ++m) {
        const float* src = tap_rows[k] + m * r.stride + j0;
        for (int t = 0; t < kLanes; ++t) s[m][t] += w * src[t];
      }
    }
    block(j0, std::min(kLanes, r.W - j0), s);
  }
}

// SSIM and its derivatives for every lane of a block of window sums (a tail block's extra
// lanes hold zero sums: finite, never stored).
PREBUILD_ALWAYS_INLINE void ssim_block(const Block<>& s, float (&S)[kLanes], Block<>& d) {
  for (int t = 0; t < kLanes; ++t) {
    const float sums[kNumMoments] = {s[0][t], s[1][t], s[2][t], s[3][t], s[4][t]};
    float dt[kNumMoments];
    S[t] = ssim_from_sums(sums, dt);
    for (int m = 0; m < kNumMoments; ++m) d[m][t] = dt[m];
  }
}

// Output rows [y0, y1) of one plane (pixel index `plane` is its (0, 0)) of one separable
// pass: `push(row)` puts source row `row`'s horizontal sums into the ring, `finish(first,
// lanes, sums)` gets the window sums per block of `lanes` pixels from index `first`.
template <int M, typename Push, typename Finish>
PREBUILD_ALWAYS_INLINE void pass_band(const Ring<M>& r, int64_t H, int64_t plane, int64_t y0,
                                      int64_t y1, const Push& push, const Finish& finish) {
  // Source rows y0 - kRadius .. y0 + kRadius - 1 first; each output row adds the next one.
  for (int64_t row = std::max<int64_t>(0, y0 - kRadius); row < std::min(H, y0 + kRadius); ++row)
    push(row);
  for (int64_t y = y0; y < y1; ++y) {
    if (y + kRadius < H) push(y + kRadius);
    vertical_row(r, H, y, [&](int64_t j0, int64_t lanes, const Block<M>& s) {
      finish(plane + y * r.W + j0, lanes, s);
    });
  }
}

// The push of a pass whose source values come from `value(index, v)` per pixel.
template <int M, typename Value>
PREBUILD_ALWAYS_INLINE auto push_values(Ring<M>& r, int64_t plane, const Value& value) {
  return [&r, plane, &value](int64_t row) {
    fill_line(r, plane + row * r.W, value);
    r.push(row);
  };
}

// Runs `band(plane, y0, y1)` over the rows [begin, end) of the flattened (plane, y) rows: one
// band per plane the range touches (`plane`: the pixel index of its (0, 0)).
template <typename Band>
PREBUILD_ALWAYS_INLINE void bands(int64_t H, int64_t W, int64_t begin, int64_t end,
                                  const Band& band) {
  for (int64_t row = begin; row < end;) {
    const int64_t y0 = row % H, y1 = std::min(H, y0 + (end - row));
    band((row / H) * H * W, y0, y1);
    row += y1 - y0;
  }
}

// DistinctMap -> Moment as a table: in the loops over the maps, which the compiler does not
// unroll, moment_of's chain of selects made the training call 18 % slower (AVX-512, one
// thread, 1080x1920; docs/benchmarks-history.md).
constexpr int kMomentOf[kMapsBoth] = {moment_of(kDX), moment_of(kDSquares), moment_of(kDXY),
                                      moment_of(kDY)};

PREBUILD_ALWAYS_INLINE void forward_rows(const ForwardArgs& a, int64_t begin, int64_t end) {
  const int64_t n = a.planes * a.H * a.W;
  const auto value = [&](int64_t i, float* v) { pixel_products(a.x[i], a.y[i], v); };
  const auto finish = [&](int64_t first, int64_t lanes, const Block<>& s) {
    float S[kLanes];
    Block<> d;
    ssim_block(s, S, d);
    for_lanes(lanes, [&](int t) { a.ssim_map[first + t] = S[t]; });
    for (int m = 0; m < a.ds_maps; ++m)
      for_lanes(lanes, [&](int t) { a.dS[m * n + first + t] = d[kMomentOf[m]][t]; });
  };
  Ring<kNumMoments> r(a.W);
  bands(a.H, a.W, begin, end, [&](int64_t plane, int64_t y0, int64_t y1) {
    pass_band(r, a.H, plane, y0, y1, push_values(r, plane, value), finish);
  });
}

// The backward sums the maps g * dS/d(window sum) that the wanted gradients read: the M
// distinct ones of ssim_math.h (DistinctMap), as the forward stores them.

// dL/dmap as it multiplies dS at pixel i before the sums: the pixel's value, or 1 for a
// broadcast one (kScalarGrad), which multiplies the gradients after them (BackwardArgs).
template <bool kScalarGrad>
PREBUILD_ALWAYS_INLINE float grad_at(const BackwardArgs& a, int64_t i) {
  return kScalarGrad ? 1.f : a.grad_map[i];
}

// The image gradients of a block from the window sums of the M distinct maps.
template <int M, bool kScalarGrad>
PREBUILD_ALWAYS_INLINE void image_grads_block(const BackwardArgs& a, int64_t first,
                                              int64_t lanes, const Block<M>& s) {
  static_assert(M == kMapsImg1 || M == kMapsBoth, "img1's three maps or all four");
  const float scale = kScalarGrad && a.grad_map ? a.grad_map[0] : 1.f;
  for_lanes(lanes, [&](int t) {
    const int64_t i = first + t;
    float distinct[M];
    for (int m = 0; m < M; ++m) distinct[m] = s[m][t];
    float conv[kNumMoments];
    distinct_to_moments<M>(distinct, conv);
    float g1 = image1_grad(a.x[i], a.y[i], conv);
    if (kScalarGrad) g1 = scale * g1;
    a.grad1[i] = g1;
    if (M == kMapsBoth) {
      float g2 = image2_grad(a.x[i], a.y[i], conv);
      if (kScalarGrad) g2 = scale * g2;
      a.grad2[i] = g2;
    }
  });
}

// The backward from the dS the forward stored.
template <int M, bool kScalarGrad>
PREBUILD_ALWAYS_INLINE void backward_rows(const BackwardArgs& a, int64_t begin, int64_t end) {
  const int64_t n = a.planes * a.H * a.W;
  const auto value = [&](int64_t i, float* v) {
    const float g = grad_at<kScalarGrad>(a, i);
    for (int m = 0; m < M; ++m) v[m] = g * a.dS[m * n + i];
  };
  const auto finish = [&](int64_t first, int64_t lanes, const Block<M>& s) {
    image_grads_block<M, kScalarGrad>(a, first, lanes, s);
  };
  Ring<M> r(a.W);
  bands(a.H, a.W, begin, end, [&](int64_t plane, int64_t y0, int64_t y1) {
    pass_band(r, a.H, plane, y0, y1, push_values(r, plane, value), finish);
  });
}

// The backward without a stored dS: the forward pass runs again a few rows ahead of the
// backward pass, and each row of dS lives only in the backward ring's line. Same arithmetic
// as the forward plus the stored backward, so the same bits, without the 5 planes of dS
// (at 1080p, 124 MB of fresh pages per call: more time than the arithmetic they save).
// With `ssim_map`, the forward's map is written too (rows [begin, end) only: a band's halo
// rows belong to its neighbours): fused_ssim_forward_backward in one pass.
template <int M, bool kScalarGrad>
PREBUILD_ALWAYS_INLINE void backward_recompute_rows(const BackwardArgs& a, float* ssim_map,
                                                    int64_t begin, int64_t end) {
  const int64_t W = a.W, H = a.H;
  Ring<kNumMoments> fwd(W);
  Ring<M> bwd(W);
  bands(H, W, begin, end, [&](int64_t plane, int64_t y0, int64_t y1) {
    int64_t next_fwd = std::max<int64_t>(0, y0 - 2 * kRadius);  // next source row of `fwd`
    // Row `row` of g * dS into the backward ring: the forward's window sums of that row
    // need its source rows up to row + kRadius.
    const auto products = [&](int64_t i, float* v) { pixel_products(a.x[i], a.y[i], v); };
    const auto push_fwd = push_values(fwd, plane, products);
    const auto push_bwd = [&](int64_t row) {
      for (; next_fwd <= std::min(H - 1, row + kRadius); ++next_fwd) push_fwd(next_fwd);
      vertical_row(fwd, H, row, [&](int64_t j0, int64_t lanes, const Block<>& s) {
        float S[kLanes];
        Block<> d;
        ssim_block(s, S, d);
        if (ssim_map && row >= y0 && row < y1)
          for_lanes(lanes, [&](int t) { ssim_map[plane + row * W + j0 + t] = S[t]; });
        float g[kLanes];
        for_lanes(lanes, [&](int t) { g[t] = grad_at<kScalarGrad>(a, plane + row * W + j0 + t); });
        for (int m = 0; m < M; ++m)
          for_lanes(lanes, [&](int t) { bwd.line_of(m)[j0 + t] = g[t] * d[kMomentOf[m]][t]; });
      });
      bwd.push(row);
    };
    const auto finish = [&](int64_t first, int64_t lanes, const Block<M>& s) {
      image_grads_block<M, kScalarGrad>(a, first, lanes, s);
    };
    pass_band(bwd, H, plane, y0, y1, push_bwd, finish);
  });
}

// One backward instantiation per (maps, broadcast dL/dmap, stored dS) case.
template <int M, bool kScalarGrad>
PREBUILD_ALWAYS_INLINE void backward_case(const BackwardArgs& a, float* ssim_map,
                                          int64_t begin, int64_t end) {
  if (a.dS)
    backward_rows<M, kScalarGrad>(a, begin, end);
  else
    backward_recompute_rows<M, kScalarGrad>(a, ssim_map, begin, end);
}

// `ssim_map`: also write the forward's map (only without a stored dS).
PREBUILD_ALWAYS_INLINE void backward_any(const BackwardArgs& a, float* ssim_map, int64_t begin,
                                         int64_t end) {
  if (a.grad2) {
    if (a.grad_map_step) backward_case<kMapsBoth, false>(a, ssim_map, begin, end);
    else backward_case<kMapsBoth, true>(a, ssim_map, begin, end);
  } else {
    if (a.grad_map_step) backward_case<kMapsImg1, false>(a, ssim_map, begin, end);
    else backward_case<kMapsImg1, true>(a, ssim_map, begin, end);
  }
}

// The instruction-set copies of each pass (prebuild/cpu_isa.h).
#define PREBUILD_SSIM_COPIES(COPY, isa)                                                \
  COPY void forward_rows_##isa(const ForwardArgs& a, int64_t begin, int64_t end) {   \
    forward_rows(a, begin, end);                                                      \
  }                                                                                   \
  COPY void backward_rows_##isa(const BackwardArgs& a, float* ssim_map, int64_t begin, \
                                int64_t end) {                                          \
    backward_any(a, ssim_map, begin, end);                                              \
  }
PREBUILD_CPU_COPIES(PREBUILD_SSIM_COPIES)
#undef PREBUILD_SSIM_COPIES

// Rows per parallel task: enough that a band's halo (the horizontal sums of 10 rows outside
// it, 30 for the recomputing backward) stays a small share, and tiny images stay on one
// thread.
int64_t grain_rows(int64_t W) {
  return std::max<int64_t>(4 * kWindow, (1 << 18) / (W * kWindow * kNumMoments + 1));
}

// Runs `rows(begin, end)` over the flattened (plane, y) rows on PyTorch's thread pool.
template <typename Args, typename Rows>
void run(const Args& a, const Rows& rows) {
  torch::stable::parallel_for(0, a.planes * a.H, grain_rows(a.W), rows);
}

}  // namespace

std::tuple<Tensor, Tensor> forward_cpu(Tensor img1, Tensor img2, bool train, bool grad_img2) {
  constexpr const char* op = "prebuild::fused_ssim_forward";
  check_images(img1, img2, op);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  ForwardOutputs out = allocate_forward(img1, img2, train, grad_img2);
  if (out.args.planes * out.args.H * out.args.W > 0) {
    const auto rows = PREBUILD_PICK_ISA(forward_rows);
    run(out.args, [&](int64_t begin, int64_t end) { rows(out.args, begin, end); });
  }
  return {out.ssim_map, out.dS};
}

std::tuple<Tensor, Tensor> backward_cpu(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS,
                                        bool grad_img2) {
  constexpr const char* op = "prebuild::fused_ssim_backward";
  check_backward_inputs(grad_map, img1, img2, dS, grad_img2, op, /*recomputes=*/true);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  BackwardOutputs out = allocate_backward(grad_map_of(grad_map), img1, img2, dS, grad_img2);
  if (out.args.planes * out.args.H * out.args.W > 0) {
    const auto rows = PREBUILD_PICK_ISA(backward_rows);
    run(out.args, [&](int64_t begin, int64_t end) { rows(out.args, nullptr, begin, end); });
  }
  return {out.grad1, out.grad2};
}

std::tuple<Tensor, Tensor, Tensor> forward_backward_cpu(Tensor img1, Tensor img2, bool grad_img2) {
  constexpr const char* op = "prebuild::fused_ssim_forward_backward";
  check_images(img1, img2, op);
  STD_TORCH_CHECK(img1.is_cpu(), op, ": the CPU kernel got tensors that are not on the CPU");
  // The forward's outputs without dS: the backward then runs as its recomputing pass, whose
  // forward ring writes the map on the way.
  ForwardOutputs fwd = allocate_forward(img1, img2, /*train=*/false, grad_img2);
  static constexpr float kOne = 1.f;  // dL/dmap of sum(ssim_map), at every pixel
  BackwardOutputs bwd = allocate_backward({&kOne, 0}, img1, img2, fwd.dS, grad_img2);
  if (bwd.args.planes * bwd.args.H * bwd.args.W > 0) {
    const auto rows = PREBUILD_PICK_ISA(backward_rows);
    float* ssim_map = fwd.args.ssim_map;
    run(bwd.args, [&](int64_t begin, int64_t end) { rows(bwd.args, ssim_map, begin, end); });
  }
  return {fwd.ssim_map, bwd.grad1, bwd.grad2};
}

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_cpu));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_cpu));
  m.impl("fused_ssim_forward_backward", TORCH_BOX(&forward_backward_cpu));
}

}  // namespace ssim
}  // namespace prebuild
