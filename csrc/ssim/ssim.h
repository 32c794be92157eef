// Host-side pieces of the fused SSIM op family shared by its backends (CPU, CUDA, simt).
//
//   fused_ssim_forward(img1, img2, train, grad_img2=True) -> (ssim_map, dS)
//     img1, img2: (B, C, H, W) float32, contiguous, same shape and device.
//     ssim_map:   (B, C, H, W) SSIM at every pixel ("same" zero padding).
//     dS:         when train, (M, B, C, H, W): the M distinct maps of dS/d(window sum) in
//                 DistinctMap order (ssim_math.h), M = 4, or 3 (img1's gradient alone) when
//                 not grad_img2; else shape (0,).
//   fused_ssim_backward(grad_map, img1, img2, dS, grad_img2=True) -> (grad_img1, grad_img2)
//     grad_map: dL/dssim_map, contiguous, or one value broadcast to every pixel (every
//     stride 0: what the backward of a mean hands over), read in place.
//     dS: the forward's (img2's gradient needs its 4 maps); the CPU backend also takes the
//     empty dS of train=False and recomputes the derivatives on the fly (the CUDA backend
//     refuses it).
//     grad_img2: False skips img2's gradient (returned as shape (0,)): a quarter less work
//     for the usual loss against a fixed target.
//   fused_ssim_forward_backward(img1, img2, grad_img2) -> (ssim_map, grad_img1, grad_img2)
//     The forward's map and, in the same call, the gradients of sum(ssim_map): what the
//     backward of a (weighted) mean of the map needs, up to one scale. The CPU backend runs
//     both in one pass over the images (no second run of the forward); CUDA and simt run
//     their two kernels back to back, dS living only between them.
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <tuple>

#include <prebuild/checks.h>
#include "ssim_kernels.h"

namespace prebuild {
namespace ssim {

using torch::stable::Tensor;

// Checks shared by both backends; `op` names the op in the message.
inline void check_images(const Tensor& img1, const Tensor& img2, const char* op) {
  check_dim(img1, 4, op, "img1 (B, C, H, W)");
  check_same_shape(img1, img2, op, "img1", "img2");
  check_same_device(img1, img2, op, "img1", "img2");
  check_float32(img1, op, "img1");
  check_float32(img2, op, "img2");
  check_contiguous(img1, op, "img1");
  check_contiguous(img2, op, "img2");
}

// A tensor whose every element is the same memory (an expanded scalar), or a single one.
inline bool is_broadcast_scalar(const Tensor& t) {
  if (t.numel() == 1) return true;
  for (int64_t s : t.strides()) {
    if (s != 0) return false;
  }
  return true;
}

// `dS` is what fused_ssim_forward returned: (5, B, C, H, W) when it ran with train, else the
// empty (0,), which only the CPU backend takes (it recomputes dS on the fly; `recomputes`).
inline void check_backward_inputs(const Tensor& grad_map, const Tensor& img1,
                                  const Tensor& img2, const Tensor& dS, bool grad_img2,
                                  const char* op, bool recomputes) {
  check_images(img1, img2, op);
  check_same_shape(grad_map, img1, op, "grad_map", "img1");
  check_same_device(grad_map, img1, op, "grad_map", "img1");
  check_float32(grad_map, op, "grad_map");
  STD_TORCH_CHECK(grad_map.is_contiguous() || is_broadcast_scalar(grad_map), op,
                  ": grad_map must be contiguous or one value broadcast to every pixel "
                  "(every stride 0)");
  check_same_device(dS, img1, op, "dS", "img1");
  check_float32(dS, op, "dS");
  if (dS.dim() == 1 && dS.size(0) == 0) {
    STD_TORCH_CHECK(recomputes, op, ": this backend needs the dS of fused_ssim_forward(train=True), "
                    "got the empty dS of train=False");
    return;
  }
  check_dim(dS, 5, op, "dS (M, B, C, H, W) from fused_ssim_forward(train=True)");
  STD_TORCH_CHECK((dS.size(0) == kMapsImg1 || dS.size(0) == kMapsBoth) &&
                      dS.size(1) == img1.size(0) && dS.size(2) == img1.size(1) &&
                      dS.size(3) == img1.size(2) && dS.size(4) == img1.size(3),
                  op, ": dS must have shape (4, B, C, H, W) or (3, B, C, H, W) matching img1");
  STD_TORCH_CHECK(!grad_img2 || dS.size(0) == kMapsBoth, op,
                  ": img2's gradient needs the 4 maps of fused_ssim_forward(train=True, "
                  "grad_img2=True); this dS has 3 (img1's gradient only)");
  check_contiguous(dS, op, "dS");
}

// Grid limits of the tiled kernels (CUDA and simt): height along grid.y, int pixel indices.
inline void check_tileable(const Tensor& img, const char* op) {
  STD_TORCH_CHECK(img.size(2) < (int64_t{1} << 30) && img.size(3) < (int64_t{1} << 30), op,
                  ": image height and width must be below 2^30");
  STD_TORCH_CHECK((img.size(2) + kMinTileRows - 1) / kMinTileRows <= kMaxGridY, op,
                  ": image height must be at most ", int64_t{kMaxGridY} * kMinTileRows, " pixels");
}

struct ForwardOutputs {
  Tensor ssim_map, dS;
  ForwardArgs args;  // pointers into the inputs and these outputs
};

// Outputs of the forward and the kernel arguments pointing at them (inputs already checked).
inline ForwardOutputs allocate_forward(const Tensor& img1, const Tensor& img2, bool train,
                                       bool grad_img2) {
  const int64_t B = img1.size(0), C = img1.size(1), H = img1.size(2), W = img1.size(3);
  const int maps = train ? (grad_img2 ? kMapsBoth : kMapsImg1) : 0;
  Tensor ssim_map = torch::stable::new_empty(img1, {B, C, H, W});
  Tensor dS = train ? torch::stable::new_empty(img1, {maps, B, C, H, W})
                    : torch::stable::new_empty(img1, {0});
  ForwardArgs args{img1.const_data_ptr<float>(),
                   img2.const_data_ptr<float>(),
                   B * C,
                   static_cast<int>(H),
                   static_cast<int>(W),
                   ssim_map.mutable_data_ptr<float>(),
                   train ? dS.mutable_data_ptr<float>() : nullptr,
                   maps};
  return {ssim_map, dS, args};
}

struct BackwardOutputs {
  Tensor grad1, grad2;
  BackwardArgs args;
};

// dL/dssim_map as the kernels read it: a value per pixel (step 1) or one for all (step 0).
struct GradMap {
  const float* data;
  int64_t step;
};

inline GradMap grad_map_of(const Tensor& grad_map) {
  return {grad_map.const_data_ptr<float>(), is_broadcast_scalar(grad_map) ? int64_t{0} : int64_t{1}};
}

inline BackwardOutputs allocate_backward(GradMap grad_map, const Tensor& img1,
                                         const Tensor& img2, const Tensor& dS, bool grad_img2) {
  const int64_t B = img1.size(0), C = img1.size(1), H = img1.size(2), W = img1.size(3);
  Tensor grad1 = torch::stable::new_empty(img1, {B, C, H, W});
  Tensor grad2 = grad_img2 ? torch::stable::new_empty(img1, {B, C, H, W})
                           : torch::stable::new_empty(img1, {0});
  BackwardArgs args{grad_map.data,
                    grad_map.step,
                    img1.const_data_ptr<float>(),
                    img2.const_data_ptr<float>(),
                    dS.numel() > 0 ? dS.const_data_ptr<float>() : nullptr,
                    B * C,
                    static_cast<int>(H),
                    static_cast<int>(W),
                    grad1.mutable_data_ptr<float>(),
                    grad_img2 ? grad2.mutable_data_ptr<float>() : nullptr};
  return {grad1, grad2, args};
}

// What a backend launches the tiled kernels with: `forward(geometry, args)` and
// `backward<M>(geometry, args)` (M maps: kMapsImg1 or kMapsBoth).
template <typename Backend>
void launch_forward(const Backend& backend, const ForwardArgs& args) {
  backend.forward(launch_geometry(args.planes, args.H, args.W, ForwardTile::kRows), args);
}

template <typename Backend>
void launch_backward(const Backend& backend, const BackwardArgs& args) {
  if (args.grad2 != nullptr) {
    using T = typename BackwardShared<kMapsBoth>::T;
    backend.template backward<kMapsBoth>(launch_geometry(args.planes, args.H, args.W, T::kRows),
                                         args);
  } else {
    using T = typename BackwardShared<kMapsImg1>::T;
    backend.template backward<kMapsImg1>(launch_geometry(args.planes, args.H, args.W, T::kRows),
                                         args);
  }
}

// The host side of the tiled kernels, shared by the CUDA and simt backends: checks,
// outputs, then the launches unless there is nothing to compute. `backend.on_device(t)`
// says whether the tensors are on the backend's device; `backend.device` names it.
template <typename Backend>
std::tuple<Tensor, Tensor> forward_tiled(const Tensor& img1, const Tensor& img2, bool train,
                                         bool grad_img2, const char* op, const Backend& backend) {
  check_images(img1, img2, op);
  STD_TORCH_CHECK(backend.on_device(img1), op, ": this kernel runs on ", backend.device, " tensors");
  check_tileable(img1, op);
  ForwardOutputs out = allocate_forward(img1, img2, train, grad_img2);
  if (out.args.planes * out.args.H * out.args.W > 0) launch_forward(backend, out.args);
  return {out.ssim_map, out.dS};
}

template <typename Backend>
std::tuple<Tensor, Tensor> backward_tiled(const Tensor& grad_map, const Tensor& img1,
                                          const Tensor& img2, const Tensor& dS, bool grad_img2,
                                          const char* op, const Backend& backend) {
  check_backward_inputs(grad_map, img1, img2, dS, grad_img2, op, /*recomputes=*/false);
  STD_TORCH_CHECK(backend.on_device(img1), op, ": this kernel runs on ", backend.device, " tensors");
  check_tileable(img1, op);
  BackwardOutputs out = allocate_backward(grad_map_of(grad_map), img1, img2, dS, grad_img2);
  if (out.args.planes * out.args.H * out.args.W > 0) launch_backward(backend, out.args);
  return {out.grad1, out.grad2};
}

// fused_ssim_forward_backward by the tiled kernels: the forward storing dS, then the
// backward reading dL/dmap = 1 at every pixel (a constant the kernels know: no tensor of
// it is filled per call).
template <typename Backend>
std::tuple<Tensor, Tensor, Tensor> forward_backward_tiled(const Tensor& img1, const Tensor& img2,
                                                          bool grad_img2, const char* op,
                                                          const Backend& backend) {
  check_images(img1, img2, op);
  STD_TORCH_CHECK(backend.on_device(img1), op, ": this kernel runs on ", backend.device, " tensors");
  check_tileable(img1, op);
  ForwardOutputs fwd = allocate_forward(img1, img2, /*train=*/true, grad_img2);
  BackwardOutputs bwd = allocate_backward({nullptr, 0}, img1, img2, fwd.dS, grad_img2);
  if (fwd.args.planes * fwd.args.H * fwd.args.W > 0) {
    launch_forward(backend, fwd.args);
    launch_backward(backend, bwd.args);
  }
  return {fwd.ssim_map, bwd.grad1, bwd.grad2};
}

std::tuple<Tensor, Tensor> forward_cpu(Tensor img1, Tensor img2, bool train, bool grad_img2);
std::tuple<Tensor, Tensor> backward_cpu(Tensor grad_map, Tensor img1, Tensor img2, Tensor dS,
                                        bool grad_img2);
std::tuple<Tensor, Tensor, Tensor> forward_backward_cpu(Tensor img1, Tensor img2, bool grad_img2);

}  // namespace ssim
}  // namespace prebuild
