// Shared by the two Scheme II residue kernels (ozaki2_residues.cu, ozaki2_residues_mma.cu):
// what they take from the operand and give back are the same, only the arithmetic differs.
//
// The operand is a logical (B, R, C) array (float64, or float32: the kernels' In) with element
// strides (sb, sr, sc): rows are the lines that carry a shift (rows of A, columns of B) and C is
// the contraction axis k. Entry x of row r
// becomes the integer X = x * 2**shift[r] rounded to nearest, ties to even (NEAR), or toward zero,
// as emulinalg.algorithm.scaling.scale_to_integers (rounds_to_nearest picks NEAR; exactly: no float
// rounding is involved), and its residues X mod m_l in [-(m/2), (m-1)/2] go to planes (P, NMOD, B,
// Rpad, Cp) of int8, row-major with Cp (a multiple of 16) as the leading dimension: A's planes are
// A' itself, B's are B'^T, which is cuBLAS's "TN" INT8 GEMM. Rows >= R and columns >= C are written
// as zeros, so the planes need no memset. Complex operands (CPLX) get P = 3 plane sets: re, im and
// re + im (mod m) for the 3M products, or with GAUSS (complex, the Gaussian moduli
// kGaussianModuli) P = 2: u = re + iota im and v = re - iota im (mod m).
//
// |X| <= 2**82 (the scaling keeps max|x| * 2**(shift - s) < 2**6 and shift - s <= floor(L) <= 76,
// see scaling.ozaki2_shifts). Both kernels reduce sign(x) (|X| mod 2**96) for any entry, which is
// X there, so they write the same planes for every input (inf, NaN and shifts no scaling makes
// included). emulinalg/backends/cupy/products.py (RESIDUE_KERNEL) picks one per call.
#pragma once

#include "ozaki2_common.cuh"

#ifndef __CUDACC_RTC__
// An explicit instance of kernel K (both kernels take the same parameters), for the standalone
// nvcc build (register/spill check); the backend instantiates what it needs through NVRTC.
#define OZAKI2_RESIDUES_INSTANCE(K, NMOD, CPLX, NEAR)                                          \
  template __global__ void K<NMOD, CPLX, NEAR>(const double*, const double*, long long,        \
                                               long long, long long, int, int, int, int, int, \
                                               int, const int*, long long, unsigned*)
#define OZAKI2_RESIDUES_GAUSS_INSTANCE(K, NMOD, NEAR)                                          \
  template __global__ void K<NMOD, true, NEAR, double, true>(                                 \
      const double*, const double*, long long, long long, long long, int, int, int, int, int, \
      int, const int*, long long, unsigned*)
#endif

// |X| = hi 2**64 + lo (hi mod 2**32: |X| mod 2**96), X = x * 2**shift rounded to nearest, ties
// to even (NEAR) or toward zero, by integer shifts of the significand, for any x and shift.
// x = (-1)^s M 2^E with an integer M < 2**53, so |x| 2**shift = M 2**e2: M shifted left (an
// integer already) or right by -e2 bits (rounding |x| 2**shift and then applying the sign is
// the same: both roundings are symmetric).
struct Magnitude {
  unsigned long long lo, hi;
};

template <bool NEAR>
__device__ __forceinline__ Magnitude magnitude_bits(double x, int shift) {
  const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(x));
  const int eb = static_cast<int>((bits >> 52) & 0x7ff);
  unsigned long long mant = bits & ((1ull << 52) - 1);
  int e = -1074;  // subnormal
  if (eb != 0) {
    mant |= 1ull << 52;
    e = eb - 1075;
  }
  const int e2 = e + shift;
  unsigned long long lo = 0, hi = 0;
  if (e2 >= 0) {
    if (e2 < 64) {
      lo = mant << e2;
      hi = e2 == 0 ? 0 : mant >> (64 - e2);
    } else if (e2 < 128) {
      hi = mant << (e2 - 64);
    }
  } else if (e2 > -64) {
    // Nearest: M + (half - 1) + (the kept part's lowest bit), shifted, carries exactly when the
    // dropped bits exceed half, or equal it with an odd kept part (M + 2**62 < 2**64: no
    // overflow). From d = 54 on, M < 2**53 <= half gives 0, as for d >= 64 (M 2**e2 < 2**-11).
    const int d = -e2;
    const unsigned long long bias = NEAR ? (1ull << (d - 1)) - 1 + ((mant >> d) & 1) : 0;
    lo = (mant + bias) >> d;
  }
  return {lo, hi};
}
