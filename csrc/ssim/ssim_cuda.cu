// Fused SSIM on CUDA: one 16x16 thread block per output tile. The block stages its tile plus
// a 5-pixel halo in shared memory, runs the horizontal Gaussian pass into shared memory, then
// the vertical pass per pixel, and applies the per-pixel math of ssim_math.h.
// Planes (B*C) run along grid.z, striding when there are more than gridDim.z of them.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cstdint>

#include "../common/cuda_launch.cuh"
#include "ssim.h"
#include "ssim_math.h"

namespace prebuild {
namespace ssim {
namespace {

constexpr int kTile = 16;
constexpr int kHalo = kTile + 2 * kRadius;  // 26: tile plus halo on both sides
constexpr int kMaxGridZ = 65535;

// Stages the tile+halo of quantity `value(plane_index, m, v)` for all moments into `staged`
// [kHalo][kHalo][kNumMoments] (zero outside the image), then runs the horizontal pass into
// `hsum` [kHalo][kTile][kNumMoments]. `value` is called only for in-bounds pixels.
template <typename Value>
__device__ void stage_and_horizontal(int H, int W, int64_t plane_offset, int oy, int ox,
                                     float (*staged)[kHalo][kNumMoments],
                                     float (*hsum)[kTile][kNumMoments], const Value& value) {
  const int tid = threadIdx.y * kTile + threadIdx.x;
  for (int i = tid; i < kHalo * kHalo; i += kTile * kTile) {
    const int r = i / kHalo, c = i % kHalo;
    const int gy = oy + r - kRadius, gx = ox + c - kRadius;
    if (gy >= 0 && gy < H && gx >= 0 && gx < W) {
      value(plane_offset + static_cast<int64_t>(gy) * W + gx, staged[r][c]);
    } else {
      for (int m = 0; m < kNumMoments; ++m) staged[r][c][m] = 0.f;
    }
  }
  __syncthreads();
  for (int i = tid; i < kHalo * kTile; i += kTile * kTile) {
    const int r = i / kTile, c = i % kTile;
    float acc[kNumMoments] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < kWindow; ++k) {
      const float w = gauss_weight(k);
#pragma unroll
      for (int m = 0; m < kNumMoments; ++m) acc[m] += w * staged[r][c + k][m];
    }
#pragma unroll
    for (int m = 0; m < kNumMoments; ++m) hsum[r][c][m] = acc[m];
  }
  __syncthreads();
}

// Vertical pass for this thread's pixel.
__device__ void vertical(float (*hsum)[kTile][kNumMoments], float sums[kNumMoments]) {
#pragma unroll
  for (int m = 0; m < kNumMoments; ++m) sums[m] = 0.f;
#pragma unroll
  for (int k = 0; k < kWindow; ++k) {
    const float w = gauss_weight(k);
#pragma unroll
    for (int m = 0; m < kNumMoments; ++m) sums[m] += w * hsum[threadIdx.y + k][threadIdx.x][m];
  }
}

__global__ void ssim_forward_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                    int64_t planes, int H, int W, float* __restrict__ ssim_map,
                                    float* __restrict__ dS) {
  __shared__ float staged[kHalo][kHalo][kNumMoments];
  __shared__ float hsum[kHalo][kTile][kNumMoments];
  const int64_t n = planes * H * W;
  const int oy = blockIdx.y * kTile, ox = blockIdx.x * kTile;
  const int py = oy + threadIdx.y, px = ox + threadIdx.x;
  for (int64_t plane = blockIdx.z; plane < planes; plane += gridDim.z) {
    const int64_t offset = plane * H * W;
    stage_and_horizontal(H, W, offset, oy, ox, staged, hsum,
                         [&](int64_t i, float* v) { pixel_products(x[i], y[i], v); });
    if (py < H && px < W) {
      float sums[kNumMoments];
      vertical(hsum, sums);
      const int64_t i = offset + static_cast<int64_t>(py) * W + px;
      float d[kNumMoments];
      ssim_map[i] = ssim_from_sums(sums, dS ? d : nullptr);
      if (dS) {
#pragma unroll
        for (int m = 0; m < kNumMoments; ++m) dS[m * n + i] = d[m];
      }
    }
    __syncthreads();  // the next plane overwrites the shared tiles
  }
}

__global__ void ssim_backward_kernel(const float* __restrict__ grad_map,
                                     const float* __restrict__ x, const float* __restrict__ y,
                                     const float* __restrict__ dS, int64_t planes, int H, int W,
                                     float* __restrict__ grad1, float* __restrict__ grad2) {
  __shared__ float staged[kHalo][kHalo][kNumMoments];
  __shared__ float hsum[kHalo][kTile][kNumMoments];
  const int64_t n = planes * H * W;
  const int oy = blockIdx.y * kTile, ox = blockIdx.x * kTile;
  const int py = oy + threadIdx.y, px = ox + threadIdx.x;
  for (int64_t plane = blockIdx.z; plane < planes; plane += gridDim.z) {
    const int64_t offset = plane * H * W;
    stage_and_horizontal(H, W, offset, oy, ox, staged, hsum, [&](int64_t i, float* v) {
      const float g = grad_map[i];
#pragma unroll
      for (int m = 0; m < kNumMoments; ++m) v[m] = g * dS[m * n + i];
    });
    if (py < H && px < W) {
      float conv[kNumMoments];
      vertical(hsum, conv);
      const int64_t i = offset + static_cast<int64_t>(py) * W + px;
      image_grads(x[i], y[i], conv, &grad1[i], &grad2[i]);
    }
    __syncthreads();
  }
}

dim3 grid_for(int64_t planes, int64_t H, int64_t W) {
  return dim3(static_cast<unsigned>((W + kTile - 1) / kTile),
              static_cast<unsigned>((H + kTile - 1) / kTile),
              static_cast<unsigned>(std::min<int64_t>(planes, kMaxGridZ)));
}

void check_cuda_images(const Tensor& img, const char* op) {
  STD_TORCH_CHECK(img.is_cuda(), op, ": the CUDA kernel got tensors that are not on a GPU");
  STD_TORCH_CHECK(img.size(2) <= INT32_MAX / 2 && img.size(3) <= INT32_MAX / 2, op,
                  ": image height and width must be below 2^30");
  STD_TORCH_CHECK((img.size(2) + kTile - 1) / kTile <= 65535, op,
                  ": image height must be at most ", 65535 * kTile, " pixels");
}

std::tuple<Tensor, Tensor> forward_cuda(Tensor img1, Tensor img2, bool train) {
  constexpr const char* op = "prebuild::fused_ssim_forward";
  check_images(img1, img2, op);
  check_cuda_images(img1, op);
  const int64_t B = img1.size(0), C = img1.size(1), H = img1.size(2), W = img1.size(3);
  Tensor ssim_map = torch::stable::new_empty(img1, {B, C, H, W});
  Tensor dS = train ? torch::stable::new_empty(img1, {kNumMoments, B, C, H, W})
                    : torch::stable::new_empty(img1, {0});
  if (B * C * H * W == 0) return {ssim_map, dS};
  launch("fused_ssim_forward", ssim_forward_kernel, grid_for(B * C, H, W), dim3(kTile, kTile),
         0, img1, img1.const_data_ptr<float>(), img2.const_data_ptr<float>(), B * C,
         static_cast<int>(H), static_cast<int>(W), ssim_map.mutable_data_ptr<float>(),
         train ? dS.mutable_data_ptr<float>() : nullptr);
  return {ssim_map, dS};
}

std::tuple<Tensor, Tensor> backward_cuda(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS) {
  constexpr const char* op = "prebuild::fused_ssim_backward";
  check_backward_inputs(grad_map, img1, img2, dS, op);
  check_cuda_images(img1, op);
  const int64_t B = img1.size(0), C = img1.size(1), H = img1.size(2), W = img1.size(3);
  Tensor grad1 = torch::stable::new_empty(img1, {B, C, H, W});
  Tensor grad2 = torch::stable::new_empty(img1, {B, C, H, W});
  if (B * C * H * W == 0) return {grad1, grad2};
  launch("fused_ssim_backward", ssim_backward_kernel, grid_for(B * C, H, W),
         dim3(kTile, kTile), 0, img1, grad_map.const_data_ptr<float>(),
         img1.const_data_ptr<float>(), img2.const_data_ptr<float>(), dS.const_data_ptr<float>(),
         B * C, static_cast<int>(H), static_cast<int>(W), grad1.mutable_data_ptr<float>(),
         grad2.mutable_data_ptr<float>());
  return {grad1, grad2};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CUDA, m) {
  m.impl("fused_ssim_forward", TORCH_BOX(&forward_cuda));
  m.impl("fused_ssim_backward", TORCH_BOX(&backward_cuda));
}

}  // namespace ssim
}  // namespace prebuild
