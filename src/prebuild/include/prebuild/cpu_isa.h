// Runtime choice of a CPU kernel's instruction set. Wheels must run on every x86-64 CPU, so
// the library is compiled for the x86-64 baseline (SSE2); a hot loop that gains from wider
// vectors is compiled a second time for AVX2 from the same source (a wrapper marked
// PREBUILD_AVX2_COPY beside one marked PREBUILD_BASELINE_COPY, both calling the same inline
// body), and `pick_isa` chooses the copy per call.
//
// PREBUILD_CPU_ISA=baseline forces the portable copy (the tests run both copies and compare
// them bit for bit; it is also the switch to try if a result ever looks CPU-dependent).
// Unset, empty or "best": AVX2 where the CPU and OS support it. The copies round alike: no
// FMA contraction (AVX2 alone does not enable FMA) and no reassociation, so they differ only
// in how many lanes run at once.
#pragma once

#include <torch/headeronly/util/Exception.h>

#include <cstdlib>
#include <cstring>

// The two copies' wrappers. `flatten` inlines every call in the wrapper's body, lambdas
// and templates included: a call left out of line would be compiled once, for the
// baseline, and silently run without AVX2 (tests/ops/test_cpu_isa.py checks the library).
#if defined(__GNUC__) || defined(__clang__)
#define PREBUILD_BASELINE_COPY __attribute__((flatten))
#else
#define PREBUILD_BASELINE_COPY
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PREBUILD_HAVE_AVX2_COPY 1
#define PREBUILD_AVX2_COPY __attribute__((target("avx2"), flatten))
#else
#define PREBUILD_HAVE_AVX2_COPY 0
#define PREBUILD_AVX2_COPY PREBUILD_BASELINE_COPY
#endif

// For the shared body of both copies (documents the intent; `flatten` does the inlining).
#if defined(__GNUC__) || defined(__clang__)
#define PREBUILD_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define PREBUILD_ALWAYS_INLINE inline
#endif

namespace prebuild {

enum class CpuIsa : int { kBaseline = 0, kAvx2 = 1 };

inline const char* isa_name(CpuIsa isa) { return isa == CpuIsa::kAvx2 ? "avx2" : "baseline"; }

inline bool cpu_has_avx2() {
#if PREBUILD_HAVE_AVX2_COPY
  return __builtin_cpu_supports("avx2");  // also checks that the OS saves the AVX registers
#else
  return false;
#endif
}

// Read per call (a getenv), so a test can switch copies within one process.
inline CpuIsa cpu_isa() {
  const char* want = std::getenv("PREBUILD_CPU_ISA");
  const CpuIsa best = cpu_has_avx2() ? CpuIsa::kAvx2 : CpuIsa::kBaseline;
  if (want == nullptr || *want == '\0' || std::strcmp(want, "best") == 0) return best;
  if (std::strcmp(want, "baseline") == 0) return CpuIsa::kBaseline;
  if (std::strcmp(want, "avx2") == 0) {
    STD_TORCH_CHECK(best == CpuIsa::kAvx2,
                    "PREBUILD_CPU_ISA=avx2, but this CPU (or this build) has no AVX2 copy of "
                    "the kernels; unset it or set PREBUILD_CPU_ISA=baseline");
    return CpuIsa::kAvx2;
  }
  STD_TORCH_CHECK(false, "PREBUILD_CPU_ISA must be 'baseline', 'avx2' or 'best', got '", want,
                  "'");
  return best;
}

template <typename Fn>
Fn pick_isa(Fn baseline, Fn avx2) {
  return cpu_isa() == CpuIsa::kAvx2 ? avx2 : baseline;
}

}  // namespace prebuild
