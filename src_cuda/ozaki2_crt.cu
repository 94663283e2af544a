// Scheme II reconstruction: INT32 modular products -> exact CRT integer -> correctly rounded
// float, one thread per output entry, reading each product once.
//
// Same arithmetic as emulinalg.algorithm's products.product, crt.reconstruct and
// rounding.unscale, so the output is bit-identical to the numpy reference:
//   W_l = symmetric(T_l mod m_l)             (3M: Re = T1 - T2, Im = T3 - T1 - T2, mod m_l;
//                                             Gaussian moduli: Re = (U + V)/2,
//                                             Im = (U - V)/(2 iota), mod m_l)
//   X   = sum_l W_l * weight_l               exact, in NW int64 accumulators of 32-bit digits
//   q   = rint(sum_l W_l * ratio_l)          float64, in order, no FMA (as numpy does)
//   Y   = X - q P                            exact; |Y| <= P/4 makes q the exact quotient
//   out = RNE(Y * 2**-(mu_i + nu_j))         float64 or float32, gradual underflow, inf beyond
// and for "dd" also lo = RNE(exact - hi), 0 where hi is inf (zeros signed as rounding.unscale_dd).
//
// The weights and P are balanced int32 digits (|d| < 2**31), so each term W_l * d is one
// mul.wide.s32 and the int64 sums stay below 2**45: no carries until the end.
//
// Layout: prod holds (nkb, P, NMOD, B, mc, n_p) INT32 (K-blocks, 3M products T1/T2/T3, the
// Gaussian moduli's U/V (GAUSS) or the real product, moduli, batch, rows of this chunk, padded
// columns); entry (b, i, j) of the chunk is output row r0 + i of batch b. mu is (B, m_full), nu is (B, n), the outputs (B, m_full, n).
#include "ozaki2_common.cuh"

// Filled by the backend for this module's number of moduli (emulinalg/backends/cuda/__init__.py:
// crt_tables): weight digits [l][i], P's digits, float64 weight / P.
__constant__ int emu_wdig[kMaxModuli * kDigitStride];
__constant__ int emu_pdig[kDigitStride];
__constant__ double emu_ratio[kMaxModuli];

namespace {

enum OutKind { kFloat64 = 0, kFloat32 = 1, kDoubleDouble = 2 };

// a + b * c for int32 b, c: one mad.wide.s32 (IMAD.WIDE). Written out because the compiler
// otherwise keeps the sign-extended operands and emits a full 64-bit multiply (three IMADs).
__device__ __forceinline__ long long mad_wide(long long a, int b, int c) {
#ifdef __CUDA_ARCH__
  long long r;
  asm("mad.wide.s32 %0, %1, %2, %3;" : "=l"(r) : "r"(b), "r"(c), "l"(a));
  return r;
#else
  return a + static_cast<long long>(b) * c;
#endif
}

template <int M>
__device__ __forceinline__ int mod_pos(int t) {  // t mod M in [0, M)
  const int r = t % M;
  return r < 0 ? r + M : r;
}

// Words 0..NW-2 into [0, 2**32), the carries into the (signed) top word.
template <int NW>
__device__ __forceinline__ void carry(long long (&a)[NW]) {
#pragma unroll
  for (int i = 0; i < NW - 1; ++i) {
    const long long c = a[i] >> 32;  // arithmetic: floor division
    a[i] &= 0xffffffffll;
    a[i + 1] += c;
  }
}

// Sign and magnitude words of the integer sum_i a[i] 2**(32 i).
template <int NW>
__device__ __forceinline__ bool signed_magnitude(long long (&a)[NW], unsigned (&v)[NW]) {
  carry(a);
  const bool neg = a[NW - 1] < 0;
  if (neg) {
#pragma unroll
    for (int i = 0; i < NW; ++i) a[i] = -a[i];
    carry(a);
  }
#pragma unroll
  for (int i = 0; i < NW; ++i) v[i] = static_cast<unsigned>(a[i]);
  return neg;
}

struct Rounded {
  unsigned long long bits;  // the float's bits without the sign
  unsigned long long keep;  // kept significand: |rounded| = keep * 2**(s + off)
  int s;
  bool inf;
};

// RNE of V * 2**off (V >= 0 given by its words) to a format with MANT significand bits, smallest
// subnormal 2**EMIN and largest exponent EMAX. The top 64 bits of V and a sticky bit for the rest
// carry all the information rounding needs.
template <int MANT, int EMIN, int EMAX, int NW>
__device__ __forceinline__ Rounded round_words(const unsigned (&v)[NW], int off) {
  int bl = 0;
#pragma unroll
  for (int i = 0; i < NW; ++i)
    if (v[i] != 0) bl = 32 * i + 32 - __clz(static_cast<int>(v[i]));
  Rounded r;
  r.inf = false;
  if (bl == 0) {
    r.bits = 0;
    r.keep = 0;
    r.s = EMIN - off;
    return r;
  }
  const int sh = bl - 64;  // T = floor(V / 2**sh) has its top bit at 63
  unsigned long long T = 0;
  bool sticky = false;
#pragma unroll
  for (int i = 0; i < NW; ++i) {
    const int d = 32 * i - sh;
    if (d >= 64) {
      // above the top bit: v[i] == 0
    } else if (d >= 0) {
      T |= static_cast<unsigned long long>(v[i]) << d;
    } else if (d > -32) {
      T |= v[i] >> (-d);
      sticky |= (v[i] & ((1u << (-d)) - 1u)) != 0;
    } else {
      sticky |= v[i] != 0;
    }
  }
  const int e_res = bl - 1 + off;  // V * 2**off in [2**e_res, 2**(e_res + 1))
  const int q = min(max(e_res - EMIN + 1, 0), MANT);  // significand bits at that exponent
  unsigned long long keep;
  int e;
  if (q > 0) {
    const int drop = 64 - q;
    keep = T >> drop;
    const unsigned long long rem = T & ((1ull << drop) - 1), half = 1ull << (drop - 1);
    keep += (rem > half || (rem == half && (sticky || (keep & 1)))) ? 1 : 0;
    e = e_res - q + 1;
  } else {  // below the smallest subnormal: rounds up to it only from above its half
    keep = (e_res == EMIN - 1 && (T != (1ull << 63) || sticky)) ? 1 : 0;
    e = EMIN;
  }
  r.keep = keep;
  r.s = e - off;
  r.inf = e_res > EMAX;
  // A carry of keep into 2**MANT moves into the exponent field by itself (up to inf).
  r.bits = r.inf ? (MANT == 53 ? 0x7ff0000000000000ull : 0x7f800000ull)
                 : (static_cast<unsigned long long>(e - EMIN) << (MANT - 1)) + keep;
  return r;
}

// Word i (bits [32 i, 32 i + 32)) of x * 2**s, s >= 0.
__device__ __forceinline__ unsigned word_of_shifted(unsigned long long x, int s, int i) {
  const int d = 32 * i - s;
  if (d >= 64 || d <= -32) return 0;
  return static_cast<unsigned>(d >= 0 ? x >> d : x << (-d));
}

// Y = X - qP, rounded and stored at idx.
template <int NW>
__device__ __forceinline__ void finish(long long (&acc)[NW], double qf, int off, int kind,
                                       void* out_hi, void* out_lo, long long idx) {
  const int q = __double2int_rn(qf);  // |q| <= 20 * 128: exact, round half even as numpy
#pragma unroll
  for (int i = 0; i < NW; ++i) acc[i] = mad_wide(acc[i], -q, emu_pdig[i]);  // |q| <= 2560
  unsigned v[NW];
  const bool neg = signed_magnitude(acc, v);
  if (kind == kFloat32) {
    const Rounded r = round_words<24, -149, 127>(v, off);
    const unsigned bits = static_cast<unsigned>(r.bits) | (neg ? 0x80000000u : 0u);
    static_cast<float*>(out_hi)[idx] = __uint_as_float(bits);
    return;
  }
  const Rounded r = round_words<53, -1074, 1023>(v, off);
  static_cast<double*>(out_hi)[idx] =
      __longlong_as_double(static_cast<long long>(r.bits | (neg ? 1ull << 63 : 0ull)));
  if (kind != kDoubleDouble) return;
  // lo = RN(R * 2**off) for R = V - keep * 2**s, signed like rounding.unscale_dd: +0 where no bit
  // was dropped (s < 0) or hi is inf; otherwise sign(Y) * sign(R), so R = 0 of a negative Y
  // gives -0.
  double lo = 0.0;
  if (!r.inf && r.s >= 0) {
    long long ra[NW];
#pragma unroll
    for (int i = 0; i < NW; ++i)
      ra[i] = static_cast<long long>(v[i]) - static_cast<long long>(word_of_shifted(r.keep, r.s, i));
    unsigned rv[NW];
    const bool rneg = signed_magnitude(ra, rv);
    const Rounded l = round_words<53, -1074, 1023>(rv, off);
    lo = __longlong_as_double(static_cast<long long>(l.bits | (neg != rneg ? 1ull << 63 : 0ull)));
  }
  static_cast<double*>(out_lo)[idx] = lo;
}

// Moduli per burst of loads: each thread first loads the products of G moduli (first K-block),
// then reduces them, so G independent loads (3G for complex) are in flight per thread instead of
// one load latency per modulus. Real: all moduli at once; complex: 6 (registers).
template <int NMOD, bool CPLX>
constexpr int kGroup = CPLX ? 6 : NMOD;
// Products per modulus: real 1, 3M 3, the Gaussian moduli's 2.
template <bool CPLX, bool GAUSS>
constexpr int kProducts = CPLX ? (GAUSS ? 2 : 3) : 1;

// Adds the terms of moduli L..LEND-1: W_l * weight_l to the words, W_l * ratio_l to the
// quotient estimate. raw[p * G + (L - L0)]: product p of modulus L (first K-block), loaded by
// accumulate_group; src points at this entry in the first plane of the first K-block (further
// K-blocks are read here, when KB: nkb > 1).
template <int L, int LEND, int L0, int G, int NMOD, int NW, bool CPLX, bool GAUSS, bool KB>
__device__ __forceinline__ void accumulate(const int (&raw)[kProducts<CPLX, GAUSS> * G],
                                           const int* __restrict__ src, long long plane,
                                           long long kb_stride, int nkb,
                                           long long (&acc)[CPLX ? 2 : 1][NW],
                                           double (&qf)[CPLX ? 2 : 1]) {
  if constexpr (L < LEND) {
    constexpr int m = modulus_of<GAUSS>(L);
    constexpr int NP = CPLX ? 2 : 1;  // output parts
    constexpr int NT = kProducts<CPLX, GAUSS>;
    int u[NT];
#pragma unroll
    for (int p = 0; p < NT; ++p) {
      u[p] = mod_pos<m>(raw[p * G + (L - L0)]);
      if constexpr (KB) {
        const int* at = src + (p * NMOD + L) * plane;
        for (int kb = 1; kb < nkb; ++kb) {  // K-blocks: add the reduced partial products
          const int s = u[p] + mod_pos<m>(__ldg(at + kb * kb_stride));
          u[p] = s >= m ? s - m : s;
        }
      }
    }
    int w[NP];
    if constexpr (GAUSS) {  // u in [0, m): sums below 2**17
      w[0] = symmetric<m>((u[0] + u[1]) * gaussian_inv2(L) % m);
      w[1] = symmetric<m>((u[0] - u[1] + m) * gaussian_inv2iota(L) % m);
    } else if constexpr (CPLX) {
      int re = u[0] - u[1];  // T1 - T2
      re += re < 0 ? m : 0;
      int im = u[2] - u[0] - u[1] + 2 * m;  // T3 - T1 - T2, in [2, 3m)
      im -= im >= m ? m : 0;
      im -= im >= m ? m : 0;
      w[0] = symmetric<m>(re);
      w[1] = symmetric<m>(im);
    } else {
      w[0] = symmetric<m>(u[0]);
    }
#pragma unroll
    for (int p = 0; p < NP; ++p) {
#pragma unroll
      for (int i = 0; i < NW; ++i)
        acc[p][i] = mad_wide(acc[p][i], w[p], emu_wdig[L * kDigitStride + i]);
      // numpy's quotient + w * ratio: two roundings, never fused into an FMA
      qf[p] = __dadd_rn(qf[p], __dmul_rn(static_cast<double>(w[p]), emu_ratio[L]));
    }
    accumulate<L + 1, LEND, L0, G, NMOD, NW, CPLX, GAUSS, KB>(raw, src, plane, kb_stride, nkb, acc,
                                                            qf);
  }
}

// Moduli L0..NMOD-1 in groups of G: one burst of loads, then the group's terms (in modulus
// order, as before: the same operations in the same order).
template <int L0, int G, int NMOD, int NW, bool CPLX, bool GAUSS, bool KB>
__device__ __forceinline__ void accumulate_group(const int* __restrict__ src, long long plane,
                                                 long long kb_stride, int nkb,
                                                 long long (&acc)[CPLX ? 2 : 1][NW],
                                                 double (&qf)[CPLX ? 2 : 1]) {
  if constexpr (L0 < NMOD) {
    constexpr int NT = kProducts<CPLX, GAUSS>;
    constexpr int LEND = L0 + G < NMOD ? L0 + G : NMOD;
    int raw[NT * G];
#pragma unroll
    for (int p = 0; p < NT; ++p) {
#pragma unroll
      for (int g = 0; g < LEND - L0; ++g) raw[p * G + g] = __ldg(src + (p * NMOD + L0 + g) * plane);
    }
    accumulate<L0, LEND, L0, G, NMOD, NW, CPLX, GAUSS, KB>(raw, src, plane, kb_stride, nkb, acc,
                                                         qf);
    accumulate_group<LEND, G, NMOD, NW, CPLX, GAUSS, KB>(src, plane, kb_stride, nkb, acc, qf);
  }
}

}  // namespace

// GAUSS (complex): the products are the Gaussian moduli's U and V, and the tables theirs.
template <int NMOD, int NW, bool CPLX, bool GAUSS = false>
__global__ void __launch_bounds__(256)
    ozaki2_crt(const int* __restrict__ prod, long long kb_stride, int nkb, long long plane, int B,
               int mc, int n, int n_p, int m_full, int r0, const int* __restrict__ mu,
               const int* __restrict__ nu, int kind, void* out0, void* out1, void* out2,
               void* out3) {
  constexpr int NP = CPLX ? 2 : 1;  // output parts
  const long long rows = static_cast<long long>(B) * mc;
  for (long long row = blockIdx.y * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<long long>(gridDim.y) * blockDim.y) {
    int b;
    const long long orow = crt_output_row(row, mc, m_full, r0, b);
    const int mui = mu[orow];
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
      const long long at = row * n_p + j;
      const int off = -(mui + nu[static_cast<long long>(b) * n + j]);
      long long acc[NP][NW];
      double qf[NP];
#pragma unroll
      for (int p = 0; p < NP; ++p) {
        qf[p] = 0.0;
#pragma unroll
        for (int i = 0; i < NW; ++i) acc[p][i] = 0;
      }
      constexpr int G = kGroup<NMOD, CPLX>;
      if (nkb == 1)  // the usual case, without the K-block loops
        accumulate_group<0, G, NMOD, NW, CPLX, GAUSS && CPLX, false>(prod + at, plane, kb_stride,
                                                                     nkb, acc, qf);
      else
        accumulate_group<0, G, NMOD, NW, CPLX, GAUSS && CPLX, true>(prod + at, plane, kb_stride,
                                                                    nkb, acc, qf);
      const long long idx = orow * n + j;
      finish<NW>(acc[0], qf[0], off, kind, out0, out1, idx);
      if constexpr (CPLX) finish<NW>(acc[1], qf[1], off, kind, out2, out3, idx);
    }
  }
}

#ifndef __CUDACC_RTC__
// Standalone nvcc build (register/spill check); the backend instantiates what it needs.
#define EMU_CRT_INSTANCE(NMOD, NW, CPLX)                                                      \
  template __global__ void ozaki2_crt<NMOD, NW, CPLX>(                                        \
      const int*, long long, int, long long, int, int, int, int, int, int, const int*,        \
      const int*, int, void*, void*, void*, void*);
EMU_CRT_INSTANCE(18, 5, false)
EMU_CRT_INSTANCE(20, 5, true)
EMU_CRT_INSTANCE(8, 3, false)
template __global__ void ozaki2_crt<16, 4, true, true>(const int*, long long, int, long long, int,
                                                       int, int, int, int, int, const int*,
                                                       const int*, int, void*, void*, void*,
                                                       void*);
#endif
