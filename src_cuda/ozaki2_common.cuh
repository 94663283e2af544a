// Shared by the Scheme II kernels (ozaki2_residues.cu, ozaki2_crt.cu, ozaki2_crt_s8.cu): the
// moduli.
//
// The moduli are compile-time constants so that `x % m` becomes a multiply-high sequence
// instead of a division: the kernels walk them by template recursion (step<L + 1>), never with a
// runtime index (and without lambdas, which NVRTC would compile as host code); kModuli is in
// ozaki2_tables.h, generated from emulinalg.algorithm.moduli.MODULI. No host headers: the same text
// compiles with NVRTC (cupy.RawModule) and with nvcc.
#pragma once

#include "ozaki2_tables.h"

// 2**e mod m, evaluated by the compiler (the residue kernel's word weights).
__host__ __device__ constexpr unsigned pow2mod(int e, unsigned m) {
  unsigned r = 1u % m;
  for (int i = 0; i < e; ++i) r = (r * 2u) % m;
  return r;
}

// The CRT kernels' output row of chunk row `row` (B batches of mc rows, the chunk's rows
// r0.. of each batch's m_full rows); b gets its batch.
__device__ __forceinline__ long long crt_output_row(long long row, int mc, int m_full, int r0,
                                                   int& b) {
  b = static_cast<int>(row / mc);
  return static_cast<long long>(b) * m_full + r0 + (row - static_cast<long long>(b) * mc);
}

// Symmetric representative in [-(m/2), (m-1)/2] of u in [0, m]: Python's symmetric_mod.
template <int M>
__device__ __forceinline__ int symmetric(int u) {
  return u > (M - 1) / 2 ? u - M : u;
}

// Modulus l of the moduli (kModuli) or, GAUSS, of the Gaussian moduli (complex products: planes
// u = re + iota im and v = re - iota im, products U and V, Re = (U + V) / 2 and
// Im = (U - V) / (2 iota) mod m); the inverses as residues in [0, m): 1/2 = (m + 1) / 2 (m odd)
// and 1/(2 iota) = -iota / 2 (iota**2 = -1).
template <bool GAUSS>
__host__ __device__ constexpr int modulus_of(int l) {
  return GAUSS ? kGaussianModuli[l] : kModuli[l];
}
__host__ __device__ constexpr int gaussian_inv2(int l) { return (kGaussianModuli[l] + 1) / 2; }
__host__ __device__ constexpr int gaussian_inv2iota(int l) {
  return (kGaussianModuli[l] - kGaussianIota[l]) * gaussian_inv2(l) % kGaussianModuli[l];
}
