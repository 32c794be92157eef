// simt::launch (launcher.h) for the simt backend's op implementations: the same launch
// geometry as the CUDA launch, and launcher errors (barrier divergence, bad dimensions)
// turned into torch errors that name the op.
#pragma once

#include <torch/headeronly/util/Exception.h>

#include <exception>

#include "simt_launcher.h"

namespace prebuild {
namespace simt {

// Runs `body(ctx, shared, args)` for every thread of `g` on the CPU.
template <typename Shared, typename Args, typename Body>
void launch_op(const char* op, const LaunchGeometry& g, const Args& args, const Body& body) {
  try {
    launch<Shared>(g.grid, g.block,
                   [&](const HostContext& ctx, Shared& shared) { body(ctx, shared, args); });
  } catch (const std::exception& e) {
    STD_TORCH_CHECK(false, op, " (simt): ", e.what());
  }
}

}  // namespace simt
}  // namespace prebuild
