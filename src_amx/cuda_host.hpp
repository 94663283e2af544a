// Lets the CUDA sources of src_cuda/ compile as host C++: CUDA keywords become plain C++
// and the intrinsics they use get exact host equivalents. src_amx/ozaki2_host.cpp runs their
// per-entry arithmetic (residues, CRT) on the CPU with it; tests/kernels/cuda_host_shim.h adds a
// grid launcher so the CPU tests can run whole kernels. Build with -ffp-contract=off: the kernels'
// __dadd_rn/__dmul_rn pairs must stay two roundings.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __constant__
#define __shared__ static
#define __launch_bounds__(...)

struct emu_uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) uint4 {  // CUDA's 16-byte vector types
  unsigned x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) longlong2 {
  long long x, y;
};
struct alignas(16) double2 {
  double x, y;
};
struct alignas(8) float2 {
  float x, y;
};
// cp.async (ozaki2_stats.cu's ring of rows): the copy at once; groups need no waiting. The
// kernels' CPU tests (tests/kernels/cuda_host_shim.h) define EMU_STRICT_CP_ASYNC and their own,
// which holds each copy back until its group is waited for.
#define EMU_CUDA_HOST 1
#ifndef EMU_STRICT_CP_ASYNC
inline void cp_async16(void* smem, const void* gmem) { std::memcpy(smem, gmem, 16); }
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}
#endif

inline thread_local emu_uint3 threadIdx;
inline emu_uint3 blockIdx, blockDim, gridDim;

template <class T>
inline T emu_bits(const void* p) {
  T t;
  std::memcpy(&t, p, sizeof t);
  return t;
}
inline long long __double_as_longlong(double x) { return emu_bits<long long>(&x); }
inline double __longlong_as_double(long long x) { return emu_bits<double>(&x); }
inline float __uint_as_float(unsigned x) { return emu_bits<float>(&x); }
inline unsigned __float_as_uint(float x) { return emu_bits<unsigned>(&x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
// Blocks run one after another here (tests/kernels/cuda_host_shim.h): a fence orders nothing more.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline int __double2int_rn(double x) { return static_cast<int>(std::nearbyint(x)); }  // RNE
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline long long __double2ll_rn(double x) { return std::llrint(x); }  // RNE
inline double __ll2double_rn(long long x) { return static_cast<double>(x); }  // RNE
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }     // RNE
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline double __dsqrt_rn(double a) { return std::sqrt(a); }  // correctly rounded (IEEE)
// The cast rounds to nearest; where that rose in magnitude (to inf included), the float one
// step toward zero: its bit pattern less one (the sign bit stays), as nextafter(f, 0) but with
// no library call, so that loops around it vectorize.
inline float __double2float_rn(double x) { return static_cast<float>(x); }
inline float __double2float_rz(double x) {
  float f = static_cast<float>(x);
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u -= std::fabs(static_cast<double>(f)) > std::fabs(x) ? 1u : 0u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline int min(int a, int b) { return std::min(a, b); }
inline int max(int a, int b) { return std::max(a, b); }
