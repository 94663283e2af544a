// Scheme II mod-reduce: the symmetric residue of an INT32 GEMM entry modulo a run-time modulus.
//
// sym_mod(x, m) = x - q m in [-(m / 2), (m - 1) / 2] (Python's symmetric_mod, what the CRT
// stage expects) for any int32 x and 2 <= m <= 256, so the result fits int8. No integer
// division: two float quotient estimates, then one correction each way.
//
//   round 1: q1 = rn(float(x) * rcp(m)). float(x), rcp(m) and the product each carry a relative
//            error <= 2**-24, so |x/m - q1| <= 1/2 + (2**31/m) 3.01 * 2**-24 and
//            r1 = x - q1 m has |r1| <= m/2 + 386 (exact in wrapping 32-bit arithmetic: the true
//            value is small, so the wrapped difference is the true one).
//   round 2: r1 is exact in float and |r1/m| <= 194, so r1 * rcp(m) is within 2**-15 of r1/m;
//            r1/m is either a half-integer (m even, an exact tie) or at least 1/(2m) >= 2**-9
//            away from one, so q2 is a nearest integer of r1/m and r2 = r1 - q2 m lies in
//            [-m/2, m/2].
//   fix:     r2 = m/2 (even m, a tie rounded down) becomes -m/2; for odd m the range is already
//            [-(m-1)/2, (m-1)/2].
//
// Host builds (the CPU test compiles this header with g++) use the IEEE equivalents of the
// intrinsics: float division is correctly rounded like __frcp_rn, casts round to nearest even
// like __int2float_rn, nearbyintf like __float2int_rn.
#pragma once

#if defined(__CUDACC__)
#define EMU_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define EMU_HD inline
#endif

namespace emu {

EMU_HD float rcp_rn(float v) {
#if defined(__CUDA_ARCH__)
  return __frcp_rn(v);
#else
  return 1.0f / v;
#endif
}

EMU_HD int nearest_int(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  return static_cast<int>(std::nearbyintf(v));
#endif
}

EMU_HD float to_float(int v) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}

// x - q m with 32-bit wrap-around (well defined: unsigned arithmetic).
EMU_HD int sub_mul(int x, int q, int m) {
  return static_cast<int>(static_cast<unsigned>(x) - static_cast<unsigned>(q) * static_cast<unsigned>(m));
}

// rcp = rcp_rn(float(m)), passed in so that a caller reducing many entries by one modulus
// computes it once.
EMU_HD int sym_mod(int x, int m, float rcp) {
  int r = sub_mul(x, nearest_int(to_float(x) * rcp), m);
  r = sub_mul(r, nearest_int(to_float(r) * rcp), m);
  return r > (m - 1) / 2 ? r - m : r;
}

EMU_HD int sym_mod(int x, int m) { return sym_mod(x, m, rcp_rn(to_float(m))); }

}  // namespace emu

#undef EMU_HD
