// Scheme II residues: one pass over a float64 operand writes its int8 residues for every
// modulus, in the layout the INT8 GEMM reads.
//
// The operand, the planes and the rounding: ozaki2_residues.cuh. ozaki2_residues_mma.cu writes
// the same planes on the INT8 tensor cores, faster at every measured count, and is the one the
// backend runs (products.py's RESIDUE_KERNEL); this one stays as its bit-for-bit twin.
//
// Exactness: |X| mod 2**96 (ozaki2_residues.cuh) fits six 16-bit words w_i, and X mod m =
// (sum_i w_i * (2**(16 i) mod m)) mod m with the sum below 2**27: one 32-bit reduction per
// modulus.
//
// Blocks of 256 threads transpose a 32 x 32 tile of doubles through shared memory, so both the
// reads (along whichever axis is contiguous in memory) and the writes (4 residues = one 32-bit
// word per thread and plane, 8 threads per 32-byte row segment) are coalesced.
#include "ozaki2_residues.cuh"

namespace {

constexpr int kTile = 32;
constexpr int kThreads = 256;

struct Words {
  unsigned w[6];  // |X| in 16-bit words, least significant first
  bool neg;
};

// |X| as words, X = x * 2**shift rounded to nearest, ties to even (NEAR) or toward zero, and the
// sign of x (magnitude_bits).
template <bool NEAR>
__device__ __forceinline__ Words element_words(double x, int shift) {
  const Magnitude a = magnitude_bits<NEAR>(x, shift);
  Words r;
  const unsigned l0 = static_cast<unsigned>(a.lo), l1 = static_cast<unsigned>(a.lo >> 32);
  const unsigned h0 = static_cast<unsigned>(a.hi);
  r.w[0] = l0 & 0xffffu;
  r.w[1] = l0 >> 16;
  r.w[2] = l1 & 0xffffu;
  r.w[3] = l1 >> 16;
  r.w[4] = h0 & 0xffffu;
  r.w[5] = h0 >> 16;
  r.neg = (static_cast<unsigned long long>(__double_as_longlong(x)) >> 63) != 0;
  return r;
}

// Symmetric residue of the signed integer given by its words.
template <int M>
__device__ __forceinline__ int residue_of(const Words& x) {
  constexpr unsigned c1 = pow2mod(16, M), c2 = pow2mod(32, M), c3 = pow2mod(48, M);
  constexpr unsigned c4 = pow2mod(64, M), c5 = pow2mod(80, M);
  const unsigned s = x.w[0] + x.w[1] * c1 + x.w[2] * c2 + x.w[3] * c3 + x.w[4] * c4 + x.w[5] * c5;
  const int u = static_cast<int>(s % static_cast<unsigned>(M));
  return symmetric<M>(x.neg ? M - u : u);  // M - 0 = M maps to 0
}

// Symmetric residue of the sum of two symmetric residues (3M's re + im planes).
template <int M>
__device__ __forceinline__ int residue_sum(int a, int b) {
  int t = a + b;  // in [-2(M/2), 2((M-1)/2)]: one correction lands in range
  if (t > (M - 1) / 2) t -= M;
  if (t < -(M / 2)) t += M;
  return t;
}

__device__ __forceinline__ unsigned pack4(int a, int b, int c, int d) {
  return (static_cast<unsigned>(a) & 0xffu) | ((static_cast<unsigned>(b) & 0xffu) << 8) |
         ((static_cast<unsigned>(c) & 0xffu) << 16) | (static_cast<unsigned>(d) << 24);
}

// Symmetric residue of a + c b for symmetric residues a, b and |c| < M (the Gaussian planes:
// |a + c b| < 2**16).
template <int M>
__device__ __forceinline__ int residue_lin(int a, int b, int c) {
  int r = (a + c * b) % M;
  r += r < 0 ? M : 0;
  return symmetric<M>(r);
}

// Residues of the 4 entries for moduli L..NMOD-1, one packed word per plane (GAUSS: the planes
// u = re + iota im and v = re - iota im).
template <int L, int NMOD, bool CPLX, bool GAUSS>
__device__ __forceinline__ void store_residues(const Words (&wr)[4], const Words (&wi)[4],
                                               unsigned* __restrict__ planes, long long plane,
                                               long long at) {
  if constexpr (L < NMOD) {
    constexpr int m = modulus_of<GAUSS>(L);
    int xr[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) xr[j] = residue_of<m>(wr[j]);
    if constexpr (GAUSS) {
      constexpr int iota = kGaussianIota[L];
      int xu[4], xv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int xi = residue_of<m>(wi[j]);
        xu[j] = residue_lin<m>(xr[j], xi, iota);
        xv[j] = residue_lin<m>(xr[j], xi, -iota);
      }
      planes[(L * plane + at) >> 2] = pack4(xu[0], xu[1], xu[2], xu[3]);
      planes[((NMOD + L) * plane + at) >> 2] = pack4(xv[0], xv[1], xv[2], xv[3]);
    } else {
      planes[(L * plane + at) >> 2] = pack4(xr[0], xr[1], xr[2], xr[3]);
    }
    if constexpr (CPLX && !GAUSS) {
      int xi[4], xs[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        xi[j] = residue_of<m>(wi[j]);
        xs[j] = residue_sum<m>(xr[j], xi[j]);
      }
      planes[((NMOD + L) * plane + at) >> 2] = pack4(xi[0], xi[1], xi[2], xi[3]);
      planes[((2 * NMOD + L) * plane + at) >> 2] = pack4(xs[0], xs[1], xs[2], xs[3]);
    }
    store_residues<L + 1, NMOD, CPLX, GAUSS>(wr, wi, planes, plane, at);
  }
}

}  // namespace

template <int NMOD, bool CPLX, bool NEAR, typename In = double, bool GAUSS = false>
__global__ void __launch_bounds__(kThreads, CPLX ? 2 : 3)
    ozaki2_residues(const In* __restrict__ re, const In* __restrict__ im, long long sb,
                    long long sr, long long sc, int B, int R, int C, int Rpad, int Cp,
                    int rows_contiguous, const int* __restrict__ shift, long long shift_sb,
                    unsigned* __restrict__ planes) {
  __shared__ double tre[kTile][kTile + 1];  // +1: conflict-free column access
  __shared__ double tim[CPLX ? kTile : 1][kTile + 1];
  __shared__ int tsh[kTile];
  const int t = threadIdx.x;
  const long long plane = static_cast<long long>(B) * Rpad * Cp;  // bytes per plane
  const int c0 = blockIdx.x * kTile;
  for (int b = blockIdx.z; b < B; b += gridDim.z) {
    for (int r0 = blockIdx.y * kTile; r0 < Rpad; r0 += gridDim.y * kTile) {
      __syncthreads();  // the previous tile has been read
      // Load: consecutive threads walk the axis that is contiguous in memory.
#pragma unroll
      for (int i = 0; i < kTile * kTile / kThreads; ++i) {
        const int a = t & (kTile - 1), z = (t >> 5) + (kThreads / kTile) * i;
        const int rr = rows_contiguous ? a : z, cc = rows_contiguous ? z : a;
        const int r = r0 + rr, c = c0 + cc;
        double x = 0.0, y = 0.0;
        if (r < R && c < C) {
          const long long o = b * sb + r * sr + c * sc;
          x = static_cast<double>(re[o]);  // a float32 operand: the same value
          if constexpr (CPLX) y = static_cast<double>(im[o]);
        }
        tre[rr][cc] = x;
        if constexpr (CPLX) tim[rr][cc] = y;
      }
      if (t < kTile) tsh[t] = r0 + t < R ? shift[b * shift_sb + r0 + t] : 0;
      __syncthreads();
      // Residues: thread -> row t / 8, columns 4 (t % 8) .. 4 (t % 8) + 3.
      const int rr = t >> 3, cc = 4 * (t & 7);
      const int r = r0 + rr, c = c0 + cc;
      if (r >= Rpad || c >= Cp) continue;
      Words wr[4], wi[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wr[j] = element_words<NEAR>(tre[rr][cc + j], tsh[rr]);
        if constexpr (CPLX) wi[j] = element_words<NEAR>(tim[rr][cc + j], tsh[rr]);
      }
      const long long at = (static_cast<long long>(b) * Rpad + r) * Cp + c;  // byte offset
      store_residues<0, NMOD, CPLX, GAUSS && CPLX>(wr, wi, planes, plane, at);
    }
  }
}

#ifndef __CUDACC_RTC__
// Standalone nvcc build (register/spill check); the backend instantiates what it needs.
OZAKI2_RESIDUES_INSTANCE(ozaki2_residues, 18, false, true);
OZAKI2_RESIDUES_INSTANCE(ozaki2_residues, 20, true, true);
OZAKI2_RESIDUES_INSTANCE(ozaki2_residues, 18, false, false);
OZAKI2_RESIDUES_GAUSS_INSTANCE(ozaki2_residues, 16, true);
#endif
