// Runtime choice of a CPU kernel's instruction set. Wheels must run on every x86-64 CPU, so
// the library is compiled for the x86-64 baseline (SSE2); a hot loop that gains from wider
// vectors is compiled again for AVX2 and for AVX-512 from the same source (wrappers marked
// PREBUILD_BASELINE_COPY, PREBUILD_AVX2_COPY and PREBUILD_AVX512_COPY, all calling the same
// inline body, defined by PREBUILD_CPU_COPIES), and `pick_isa` (PREBUILD_PICK_ISA) chooses the
// copy per call.
//
// Only the baseline copy is compiled where no wider one can run (not x86-64, or not GCC or
// Clang) and in a sanitizer build (PREBUILD_ONE_CPU_COPY, which prebuild's build defines with
// PREBUILD_SANITIZE): at the sanitizers' -O1 nothing is vectorised, so the wider copies would
// be the same checked code compiled again (the AVX copies were two thirds of ssim_cpu.cpp's
// 96 s under ASan).
//
// PREBUILD_CPU_ISA=baseline|avx2|avx512 forces a copy (the tests run each one the CPU has and
// compare them bit for bit; it is also the switch to try if a result ever looks
// CPU-dependent). Unset, empty or "best": the widest the CPU and OS support. The copies round
// alike: the host code is compiled with -ffp-contract=off (AVX-512 brings FMA, which would
// otherwise fuse a * b + c into one rounding) and without reassociation, so they differ only
// in how many lanes run at once.
#pragma once

#include <torch/headeronly/util/Exception.h>

#include <cstdlib>
#include <cstring>

// `flatten` inlines every call in a wrapper's body, lambdas and templates included: a call
// left out of line would be compiled once, for the baseline, and silently run without the
// wider instructions (tests/ops/test_cpu_isa.py reads the library's disassembly for this).
#if defined(__GNUC__) || defined(__clang__)
#define PREBUILD_BASELINE_COPY __attribute__((flatten))
#else
#define PREBUILD_BASELINE_COPY
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(PREBUILD_ONE_CPU_COPY)
#define PREBUILD_HAVE_WIDE_COPIES 1
#define PREBUILD_AVX2_COPY __attribute__((target("avx2"), flatten))
// x86-64-v4's AVX-512 subsets, with 512-bit vectors (compilers otherwise prefer 256-bit ones;
// GCC and Clang spell that differently).
#if defined(__clang__)
#define PREBUILD_AVX512_COPY                                                                 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq"), min_vector_width(512), flatten))
#else
#define PREBUILD_AVX512_COPY                                                              \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,prefer-vector-width=512"), \
                 flatten))
#endif
#else
#define PREBUILD_HAVE_WIDE_COPIES 0
#define PREBUILD_AVX2_COPY PREBUILD_BASELINE_COPY
#define PREBUILD_AVX512_COPY PREBUILD_BASELINE_COPY
#endif

// PREBUILD_CPU_COPIES(DEFINE) expands DEFINE(ATTRIBUTES, isa) once per copy this build
// compiles, DEFINE defining `name##_##isa` with the attributes; PREBUILD_PICK_ISA(name) is the
// copy of `name` to call.
#if PREBUILD_HAVE_WIDE_COPIES
#define PREBUILD_CPU_COPIES(DEFINE)           \
  DEFINE(PREBUILD_BASELINE_COPY, baseline)     \
  DEFINE(PREBUILD_AVX2_COPY, avx2)             \
  DEFINE(PREBUILD_AVX512_COPY, avx512)
#define PREBUILD_PICK_ISA(name) ::prebuild::pick_isa(&name##_baseline, &name##_avx2, &name##_avx512)
#else
#define PREBUILD_CPU_COPIES(DEFINE) DEFINE(PREBUILD_BASELINE_COPY, baseline)
#define PREBUILD_PICK_ISA(name) \
  ::prebuild::pick_isa(&name##_baseline, &name##_baseline, &name##_baseline)
#endif

// For the shared body of the copies (documents the intent; `flatten` does the inlining).
#if defined(__GNUC__) || defined(__clang__)
#define PREBUILD_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define PREBUILD_ALWAYS_INLINE inline
#endif

namespace prebuild {

enum class CpuIsa : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

inline const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    default: return "baseline";
  }
}

// The widest copy this CPU (and its OS: __builtin_cpu_supports checks that the registers are
// saved) runs.
inline CpuIsa best_cpu_isa() {
#if PREBUILD_HAVE_WIDE_COPIES
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
    return CpuIsa::kAvx512;
  if (__builtin_cpu_supports("avx2")) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kBaseline;
}

// Read per call (a getenv), so a test can switch copies within one process.
inline CpuIsa cpu_isa() {
  const char* want = std::getenv("PREBUILD_CPU_ISA");
  const CpuIsa best = best_cpu_isa();
  if (want == nullptr || *want == '\0' || std::strcmp(want, "best") == 0) return best;
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (std::strcmp(want, isa_name(isa)) != 0) continue;
    STD_TORCH_CHECK(static_cast<int>(isa) <= static_cast<int>(best), "PREBUILD_CPU_ISA=", want,
                    ", but this CPU (or this build) runs at most the ", isa_name(best),
                    " copy of the kernels; unset PREBUILD_CPU_ISA or ask for less");
    return isa;
  }
  STD_TORCH_CHECK(false, "PREBUILD_CPU_ISA must be 'baseline', 'avx2', 'avx512' or 'best', got '",
                  want, "'");
  return best;
}

template <typename Fn>
Fn pick_isa(Fn baseline, Fn avx2, Fn avx512) {
  switch (cpu_isa()) {
    case CpuIsa::kAvx512: return avx512;
    case CpuIsa::kAvx2: return avx2;
    default: return baseline;
  }
}

}  // namespace prebuild
