// Shared by ozaki2_stats.cu and balance.cu: exact scaling by a power of two (one correctly
// rounded multiplication, the same value as ldexp, also for subnormal results) and a complex
// entry's interleaved parts in one load. No host headers: the same text compiles with NVRTC
// (cupy.RawModule), nvcc and, through src_amx/cuda_host.hpp, as host C++.
#pragma once

// 2**p for p in [-1074, 1023].
__device__ __forceinline__ double pow2(int p) {
  return p >= -1022 ? __longlong_as_double(static_cast<long long>(p + 1023) << 52)
                    : __longlong_as_double(1ll << (p + 1074));
}

// RN(x 2**p) for p in [-1074, 1100] (and x 2**p < 2**8 where p > 1023: the first step is then
// exact).
__device__ __forceinline__ double scale2(double x, int p) {
  if (p > 1023) return __dmul_rn(__dmul_rn(x, pow2(p - 64)), pow2(64));
  return __dmul_rn(x, pow2(p));
}

// A complex entry's parts, interleaved at p (aligned to their pair): one 16-byte (8-byte) load.
__device__ __forceinline__ void load_pair(const double* p, double& re, double& im) {
  const double2 v = *reinterpret_cast<const double2*>(p);
  re = v.x, im = v.y;
}
__device__ __forceinline__ void load_pair(const float* p, float& re, float& im) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  re = v.x, im = v.y;
}
