// The CPU launcher of the SIMT layer (simt.h): runs a kernel's block body on the host, for
// tests. Host-only; never part of the production libraries.
//
// How: each block runs on the calling OS thread with blockDim logical threads as *fibers*
// (ucontext). The scheduler resumes every fiber in turn; a fiber runs until it reaches
// ctx.sync() (it then yields) or returns. When every fiber waits at the barrier, the round
// is over and they are released. Every thread must reach every barrier, as __syncthreads
// requires: threads that wait at different barriers, or wait while another has returned
// (a barrier in divergent code), are reported as an error.
//
// A warp collective (ctx.warp_sum/warp_any/warp_max, simt.h) is a rendezvous of the calling
// warp's lanes only: a lane that reaches one yields too, and once no fiber can run, every warp
// whose lanes all wait at the same collective gets its results (computed as the GPU does,
// see simt.h) and runs on, while other warps may be anywhere. A warp whose lanes wait at
// different collectives, or some at a collective while others have returned or wait at a
// block barrier (both deadlock or are undefined on a GPU), is reported as an error.
//
// The schedule is deterministic: thread 0 always runs its whole phase before thread 1
// starts its own, so a missing barrier makes a thread read shared memory its peers have
// not written yet, every time, instead of sometimes. Shared memory is filled with 0xFF
// bytes (NaN for floats) before each block, so such a read poisons the output visibly.
// Fibers rather than OS threads also keep a 256-thread block cheap and AddressSanitizer
// exact: every switch between stacks is announced to it.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "simt.h"

#if defined(__SANITIZE_ADDRESS__)
#define PREBUILD_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PREBUILD_SIMT_ASAN 1
#endif
#endif

#ifdef PREBUILD_SIMT_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace prebuild {
namespace simt {

class BlockScheduler;

// What a block body sees on the CPU: the same interface as DeviceContext.
class HostContext {
 public:
  HostContext(Index3 thread, Index3 block, Index3 block_dim, Index3 grid_dim,
              BlockScheduler* scheduler)
      : thread_(thread), block_(block), block_dim_(block_dim), grid_dim_(grid_dim),
        scheduler_(scheduler) {}
  Index3 thread() const { return thread_; }
  Index3 block() const { return block_; }
  Index3 block_dim() const { return block_dim_; }
  Index3 grid_dim() const { return grid_dim_; }
  inline void sync() const;
  inline int sync_count(int predicate) const;
  int lane() const {
    return (thread_.x + block_dim_.x * (thread_.y + block_dim_.y * thread_.z)) & 31;
  }
  inline float warp_sum(float value) const;
  template <int N>
  void warp_sums(float* values) const {
    for (int i = 0; i < N; ++i) values[i] = warp_sum(values[i]);
  }
  inline bool warp_any(bool predicate) const;
  inline float shfl_xor(float value, int offset) const;
  bool warp_is_full() const {
    const int threads = block_dim_.x * block_dim_.y * block_dim_.z;
    const int rank = thread_.x + block_dim_.x * (thread_.y + block_dim_.y * thread_.z);
    return (threads & 31) == 0 || rank < (threads & ~31);
  }
  inline int warp_max(int value) const;
  // Fibers of all blocks run on one OS thread, one at a time: a plain add is atomic here.
  template <typename T>
  void atomic_add(T* address, T value) const {
    *address += value;
  }

 private:
  Index3 thread_, block_, block_dim_, grid_dim_;
  BlockScheduler* scheduler_;
};

class BlockScheduler {
 public:
  // Large enough for the kernels' locals with AddressSanitizer's redzones.
  static constexpr size_t kStackBytes = 256 * 1024;

  explicit BlockScheduler(int threads) : fibers_(static_cast<size_t>(threads)) {
    for (auto& f : fibers_) f.stack.reset(new char[kStackBytes]);
  }

  // Runs run_thread(i) for i in [0, threads) as fibers with barrier semantics (see top).
  template <typename RunThread>
  void run_block(RunThread& run_thread) {
    body_ = &run_thread;
    body_call_ = [](void* body, int i) { (*static_cast<RunThread*>(body))(i); };
    for (size_t i = 0; i < fibers_.size(); ++i) {
      Fiber& f = fibers_[i];
      if (getcontext(&f.context) != 0) throw std::runtime_error("simt: getcontext failed");
      f.context.uc_stack.ss_sp = f.stack.get();
      f.context.uc_stack.ss_size = kStackBytes;
      f.context.uc_link = &scheduler_context_;
      const auto self = reinterpret_cast<uintptr_t>(this);
      makecontext(&f.context, reinterpret_cast<void (*)()>(&BlockScheduler::entry), 3,
                  static_cast<unsigned>(self >> 32), static_cast<unsigned>(self & 0xffffffffu),
                  static_cast<unsigned>(i));
      f.state = State::kReady;
      f.barriers = 0;
      f.asan_fake_stack = nullptr;  // a fresh fiber has no saved fake stack
    }
    for (;;) {
      for (size_t i = 0; i < fibers_.size(); ++i) {
        if (fibers_[i].state != State::kReady) continue;
        current_ = static_cast<int>(i);
        fibers_[i].state = State::kRunning;
        switch_to_fiber(fibers_[i]);
      }
      if (release_warps()) continue;
      const Fiber* first_waiting = nullptr;
      bool any_done = false;
      for (auto& f : fibers_) {
        any_done = any_done || f.state == State::kDone;
        if (f.state != State::kWaiting) continue;
        if (first_waiting == nullptr) first_waiting = &f;
        if (f.barriers != first_waiting->barriers) throw divergence(*first_waiting, f);
      }
      if (first_waiting != nullptr && any_done) throw divergence(*first_waiting, *first_waiting);
      if (first_waiting == nullptr) return;  // every thread has returned
      last_count_ = 0;
      for (auto& f : fibers_) {
        if (f.state != State::kWaiting) continue;
        last_count_ += f.predicate != 0;
        f.state = State::kReady;
      }
    }
  }

  // Called by the running fiber at ctx.sync(): yield to the scheduler until released.
  // With `predicate`, returns how many threads of the block passed a non-zero one.
  int barrier(int predicate = 0) {
    Fiber& f = fibers_[static_cast<size_t>(current_)];
    f.predicate = predicate;
    f.state = State::kWaiting;
    ++f.barriers;
    switch_to_scheduler(f, /*finished=*/false);
    return last_count_;  // set by the scheduler when it released this barrier
  }

  enum class WarpOp { kSum, kAny, kMax, kShflXor };

  // Called by the running fiber at a warp collective: yield until its warp's lanes all wait
  // at it. kSum reduces `sum`, kAny and kMax `value`; kShflXor gives each lane the `sum` of
  // lane ^ `value` (a full warp, every lane with the same offset).
  struct WarpResult {
    float sum;
    int value;
  };
  WarpResult warp_collective(WarpOp op, float sum, int value) {
    Fiber& f = fibers_[static_cast<size_t>(current_)];
    f.warp_op = op;
    f.sum = sum;
    f.value = value;
    f.state = State::kWarpWaiting;
    ++f.collectives;
    switch_to_scheduler(f, /*finished=*/false);
    return {f.sum, f.value};  // the results, set by release_warps
  }

 private:
  enum class State { kReady, kRunning, kWaiting, kWarpWaiting, kDone };
  struct Fiber {
    ucontext_t context{};
    std::unique_ptr<char[]> stack;
    State state = State::kDone;
    long barriers = 0;
    int predicate = 0;
    long collectives = 0;  // warp collectives reached
    WarpOp warp_op = WarpOp::kSum;
    float sum = 0.f;  // warp_sum's operand, then its result
    int value = 0;    // warp_any's and warp_max's
    void* asan_fake_stack = nullptr;
  };

  static constexpr int kWarp = 32;

  // Completes the collective of every warp whose lanes all wait at it (the others must not
  // wait at one: see top). Returns whether any warp can run again.
  bool release_warps() {
    bool released = false;
    for (size_t base = 0; base < fibers_.size(); base += kWarp) {
      const int lanes = static_cast<int>(std::min<size_t>(kWarp, fibers_.size() - base));
      Fiber* warp = &fibers_[base];
      int first = -1;
      for (int l = 0; l < lanes && first < 0; ++l) {
        if (warp[l].state == State::kWarpWaiting) first = l;
      }
      if (first < 0) continue;
      for (int l = 0; l < lanes; ++l) {
        const Fiber& f = warp[l];
        if (f.state != State::kWarpWaiting || f.collectives != warp[first].collectives ||
            f.warp_op != warp[first].warp_op) {
          throw warp_divergence(base, first, l);
        }
      }
      if (warp[first].warp_op == WarpOp::kShflXor) check_shfl_xor(warp, lanes, base);
      combine(warp, lanes);
      for (int l = 0; l < lanes; ++l) warp[l].state = State::kReady;
      released = true;
    }
    return released;
  }

  // The collective's results, as DeviceContext computes them (simt.h).
  static void combine(Fiber* warp, int lanes) {
    switch (warp[0].warp_op) {
      case WarpOp::kSum: {
        float v[kWarp], next[kWarp];
        for (int l = 0; l < kWarp; ++l) v[l] = l < lanes ? warp[l].sum : 0.f;
        for (int offset = kWarp / 2; offset > 0; offset /= 2) {
          for (int l = 0; l < kWarp; ++l) next[l] = v[l] + v[l ^ offset];
          std::memcpy(v, next, sizeof v);
        }
        for (int l = 0; l < lanes; ++l) warp[l].sum = lanes == kWarp ? v[l] : v[0];
        return;
      }
      case WarpOp::kShflXor: {
        float v[kWarp];
        for (int l = 0; l < kWarp; ++l) v[l] = warp[l].sum;
        for (int l = 0; l < kWarp; ++l) warp[l].sum = v[l ^ warp[l].value];
        return;
      }
      case WarpOp::kAny: {
        int any = 0;
        for (int l = 0; l < lanes; ++l) any |= warp[l].value != 0;
        for (int l = 0; l < lanes; ++l) warp[l].value = any;
        return;
      }
      case WarpOp::kMax: {
        int max = warp[0].value;
        for (int l = 1; l < lanes; ++l) max = std::max(max, warp[l].value);
        for (int l = 0; l < lanes; ++l) warp[l].value = max;
        return;
      }
    }
  }

  static const char* op_name(WarpOp op) {
    return op == WarpOp::kSum   ? "warp_sum"
           : op == WarpOp::kAny ? "warp_any"
           : op == WarpOp::kMax ? "warp_max"
                                : "shfl_xor";
  }

  // shfl_xor runs in full warps only (DeviceContext's is __shfl_xor_sync over all 32 lanes),
  // every lane with the same offset in [1, 31].
  static void check_shfl_xor(const Fiber* warp, int lanes, size_t base) {
    if (lanes != kWarp) {
      throw std::runtime_error("shfl_xor in the partial warp at thread " + std::to_string(base) +
                               ": it needs all 32 lanes");
    }
    for (int l = 0; l < kWarp; ++l) {
      if (warp[l].value != warp[0].value || warp[l].value < 1 || warp[l].value > 31) {
        throw std::runtime_error("shfl_xor at thread " + std::to_string(base + l) +
                                 ": every lane must pass the same offset in [1, 31]");
      }
    }
  }

  // Lane `other` of the warp at `base` is not where lane `first` waits.
  std::runtime_error warp_divergence(size_t base, int first, int other) const {
    const Fiber& a = fibers_[base + static_cast<size_t>(first)];
    const Fiber& b = fibers_[base + static_cast<size_t>(other)];
    auto at = [](const Fiber& f) {
      return std::string(op_name(f.warp_op)) + " (warp collective #" +
             std::to_string(f.collectives) + ")";
    };
    const std::string where = b.state == State::kDone      ? "has returned"
                              : b.state == State::kWaiting ? "waits at a block barrier"
                                                           : "waits at " + at(b);
    return std::runtime_error(
        "simt: warp divergence: in warp " + std::to_string(base / kWarp) + " of the block, lane " +
        std::to_string(first) + " waits at " + at(a) + " while lane " + std::to_string(other) +
        " " + where + "; every lane of a warp must reach every warp collective together");
  }

  // Every thread must reach every barrier: a barrier in divergent code (some threads skip
  // it, or return while others wait) is undefined behaviour on a GPU and an error here.
  std::runtime_error divergence(const Fiber& a, const Fiber& b) const {
    return std::runtime_error(
        "simt: barrier divergence: threads of one block reached different ctx.sync() calls "
        "(one waits at its barrier #" + std::to_string(a.barriers) + ", another " +
        (&a == &b ? std::string("has returned") : "waits at #" + std::to_string(b.barriers)) +
        "); every thread of a block must reach every barrier");
  }

  static void entry(unsigned hi, unsigned lo, unsigned index) {
    auto* self = reinterpret_cast<BlockScheduler*>((static_cast<uintptr_t>(hi) << 32) | lo);
    Fiber& f = self->fibers_[index];
    self->arrived_on_fiber(f);
    self->body_call_(self->body_, static_cast<int>(index));
    f.state = State::kDone;
    self->leaving_fiber(f, /*finished=*/true);
    // Returning resumes uc_link: the scheduler.
  }

  void switch_to_fiber(Fiber& f) {
#ifdef PREBUILD_SIMT_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, f.stack.get(), kStackBytes);
    swapcontext(&scheduler_context_, &f.context);
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
    swapcontext(&scheduler_context_, &f.context);
#endif
  }

  void switch_to_scheduler(Fiber& f, bool finished) {
    leaving_fiber(f, finished);
    swapcontext(&f.context, &scheduler_context_);
    arrived_on_fiber(f);
  }

  void arrived_on_fiber(Fiber& f) {
#ifdef PREBUILD_SIMT_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, &scheduler_stack_bottom_,
                                    &scheduler_stack_size_);
#else
    (void)f;
#endif
  }

  void leaving_fiber(Fiber& f, bool finished) {
#ifdef PREBUILD_SIMT_ASAN
    // A finished fiber passes nullptr: ASan may then free its fake stack.
    __sanitizer_start_switch_fiber(finished ? nullptr : &f.asan_fake_stack,
                                   scheduler_stack_bottom_, scheduler_stack_size_);
#else
    (void)f;
    (void)finished;
#endif
  }

  std::vector<Fiber> fibers_;
  ucontext_t scheduler_context_{};
  int current_ = -1;
  int last_count_ = 0;
  void* body_ = nullptr;
  void (*body_call_)(void*, int) = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
};

inline void HostContext::sync() const { scheduler_->barrier(); }
inline int HostContext::sync_count(int predicate) const { return scheduler_->barrier(predicate); }
inline float HostContext::warp_sum(float value) const {
  return scheduler_->warp_collective(BlockScheduler::WarpOp::kSum, value, 0).sum;
}
inline float HostContext::shfl_xor(float value, int offset) const {
  return scheduler_->warp_collective(BlockScheduler::WarpOp::kShflXor, value, offset).sum;
}
inline bool HostContext::warp_any(bool predicate) const {
  return scheduler_->warp_collective(BlockScheduler::WarpOp::kAny, 0.f, predicate).value != 0;
}
inline int HostContext::warp_max(int value) const {
  return scheduler_->warp_collective(BlockScheduler::WarpOp::kMax, 0.f, value).value;
}

// Runs `body(ctx, shared)` for every thread of every block of `grid`, the blocks one after
// another, as a CUDA launch of grid x block threads would, with `Shared` as the block's
// __shared__ memory.
template <typename Shared, typename Body>
void launch(Index3 grid, Index3 block, const Body& body) {
  if (grid.x < 1 || grid.y < 1 || grid.z < 1 || block.x < 1 || block.y < 1 || block.z < 1 ||
      block.x * block.y * block.z > 1024) {
    throw std::invalid_argument("simt::launch: invalid grid or block dimensions");
  }
  const int threads = block.x * block.y * block.z;
  BlockScheduler scheduler(threads);
  std::unique_ptr<Shared> shared(new Shared);
  for (int bz = 0; bz < grid.z; ++bz) {
    for (int by = 0; by < grid.y; ++by) {
      for (int bx = 0; bx < grid.x; ++bx) {
        std::memset(static_cast<void*>(shared.get()), 0xFF, sizeof(Shared));  // poison
        const Index3 block_index{bx, by, bz};
        auto run_thread = [&](int i) {
          const Index3 t{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
          HostContext ctx(t, block_index, block, grid, &scheduler);
          body(ctx, *shared);
        };
        scheduler.run_block(run_thread);
      }
    }
  }
}

}  // namespace simt
}  // namespace prebuild
