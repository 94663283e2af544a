// Scheme II reconstruction from INT8 residues: the CRT stage for the fused GEMM
// (emulinalg._cuda, src_cuda/), whose epilogue already reduced every product modulo m_l into
// its symmetric residue W_l in [-(m_l / 2), (m_l - 1) / 2] and stored it as int8.
//
// The same integers as ozaki2_crt.cu (X = sum_l W_l weight_l, q = rint of the float64 ratio
// sum in numpy's order without FMA, Y = X - qP, one correct rounding of Y 2**off), so the output
// is bit-identical to the INT32 path; reading n bytes per entry instead of 4n is the point.
// Differently computed, for instruction throughput:
//   - X in float64 FMAs on balanced radix-2**42 digits of the weights (emu_wdig_f64,
//     crt_f64_words(n) of them: 3 for 11..16 moduli): every partial sum is an integer below
//     2**53, so exact (emulinalg.backends.cuda checks the bound per n), and the float64 w_l is
//     shared with the quotient's w_l * ratio_l. qP is subtracted in the same digits.
//   - Y's two's complement 64-bit words from the digits (one carry pass), then its top 64 bits
//     rounded to odd (the rest as a sticky bit), converted by cvt.rn (RNE from >= 62 bits, so
//     correct) and scaled by 2**off in the exponent field. Results outside the normal range
//     (subnormal, overflow), and double-double outputs, go through ozaki2_crt.cu's integer path
//     and finish() instead, entry by entry (crt_s8_exact: the previous kernel's code).
//   - Four columns per thread (kCols): one 32-bit load per plane, vector stores.
//
// Layout: res holds (NP, NMOD, B, mc, ldr) int8 (the real product, Re and Im, the 3M products,
// or with GAUSS the Gaussian moduli's U and V, NP = 2;
// moduli; batch; rows of this chunk; columns, ldr >= n apart); entry (b, i, j) of the chunk is
// output row r0 + i of batch b. mu is (B, m_full), nu is (B, n), the outputs (B, m_full, n).
// Any ldr and alignment work, but only ldr % kCols == 0 with a kCols-byte aligned res (the
// fused GEMM's 16-byte rows) takes the float64 path.
//
// Built together with ozaki2_crt.cu (its helpers and __constant__ tables): the include below is
// inlined for NVRTC (emulinalg.backends.cuda.source) and resolved by nvcc for the standalone
// check.
#include "ozaki2_crt.cu"

// Filled by the backend with ozaki2_crt.cu's tables (emulinalg/backends/cuda/__init__.py:
// crt_f64_table_arrays): the weights' float64 digits [l][i] and P's.
__constant__ double emu_wdig_f64[kMaxModuli * kF64DigitStride];
__constant__ double emu_pdig_f64[kF64DigitStride];

namespace {

// Columns per thread: 4 (one 32-bit word per plane) or 8 (one 64-bit word); emulinalg's
// fused.CRT_COLUMNS sizes the grid for it. A macro so that tools/device/crt_bench.py can time
// the other.
#ifndef EMU_CRT_S8_COLS
#define EMU_CRT_S8_COLS 4
#endif
constexpr int kCols = EMU_CRT_S8_COLS;
static_assert(kCols == 4 || kCols == 8, "EMU_CRT_S8_COLS: 4 or 8");
constexpr int kWords = kCols / 4;  // 32-bit words of residues per plane

// ---- the integer path (ozaki2_crt.cu's arithmetic): double-double outputs and the entries whose
// result is outside the normal range

// Adds W_l * weight_l to the words and W_l * ratio_l to the quotient estimate, l < NMOD; src
// points at this entry in the part's first plane.
template <int NMOD, int NW>
__device__ __forceinline__ void accumulate_s8(const signed char* __restrict__ src, long long plane,
                                              long long (&acc)[NW], double& qf) {
#pragma unroll
  for (int l = 0; l < NMOD; ++l) {
    const int w = __ldg(src + l * plane);
#pragma unroll
    for (int i = 0; i < NW; ++i) acc[i] = mad_wide(acc[i], w, emu_wdig[l * kDigitStride + i]);
    // numpy's quotient + w * ratio: two roundings, never fused into an FMA
    qf = __dadd_rn(qf, __dmul_rn(static_cast<double>(w), emu_ratio[l]));
  }
}

// Modulus L's terms of both parts (symmetric residues w): W_p weight_L into the words, numpy's
// quotient + W_p ratio_L (two roundings, never an FMA).
template <int L, int NW>
__device__ __forceinline__ void add_parts_s8(const int (&w)[2], long long (&acc)[2][NW],
                                             double (&qf)[2]) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
#pragma unroll
    for (int i = 0; i < NW; ++i)
      acc[p][i] = mad_wide(acc[p][i], w[p], emu_wdig[L * kDigitStride + i]);
    qf[p] = __dadd_rn(qf[p], __dmul_rn(static_cast<double>(w[p]), emu_ratio[L]));
  }
}

// The 3M products' residues W1, W2, W3 (planes 0, NMOD, 2 NMOD from src) of moduli L..NMOD-1
// into Re = W1 - W2 and Im = W3 - W1 - W2, mod m_l, as ozaki2_crt.cu's accumulate combines its
// INT32 sums (the same classes mod m_l, so the same symmetric residues and the same bits).
template <int L, int NMOD, int NW>
__device__ __forceinline__ void accumulate_s8_3m(const signed char* __restrict__ src,
                                                 long long plane, long long (&acc)[2][NW],
                                                 double (&qf)[2]) {
  if constexpr (L < NMOD) {
    constexpr int m = kModuli[L];
    const int u0 = mod_pos<m>(__ldg(src + L * plane));
    const int u1 = mod_pos<m>(__ldg(src + (NMOD + L) * plane));
    const int u2 = mod_pos<m>(__ldg(src + (2 * NMOD + L) * plane));
    int re = u0 - u1;  // T1 - T2
    re += re < 0 ? m : 0;
    int im = u2 - u0 - u1 + 2 * m;  // T3 - T1 - T2, in [2, 3m)
    im -= im >= m ? m : 0;
    im -= im >= m ? m : 0;
    add_parts_s8<L, NW>({symmetric<m>(re), symmetric<m>(im)}, acc, qf);
    accumulate_s8_3m<L + 1, NMOD, NW>(src, plane, acc, qf);
  }
}

// The Gaussian moduli's residues U, V (planes L, NMOD + L from src) of moduli L..NMOD-1 into
// Re = (U + V) / 2 and Im = (U - V) / (2 iota), mod m_l, as ozaki2_crt.cu's accumulate.
template <int L, int NMOD, int NW>
__device__ __forceinline__ void accumulate_s8_uv(const signed char* __restrict__ src,
                                                 long long plane, long long (&acc)[2][NW],
                                                 double (&qf)[2]) {
  if constexpr (L < NMOD) {
    constexpr int m = kGaussianModuli[L];
    const int u0 = mod_pos<m>(__ldg(src + L * plane));
    const int u1 = mod_pos<m>(__ldg(src + (NMOD + L) * plane));
    add_parts_s8<L, NW>({symmetric<m>((u0 + u1) * gaussian_inv2(L) % m),
                         symmetric<m>((u0 - u1 + m) * gaussian_inv2iota(L) % m)},
                        acc, qf);
    accumulate_s8_uv<L + 1, NMOD, NW>(src, plane, acc, qf);
  }
}

// One entry, written by finish(): part p (NP = 3 or GAUSS: both parts) of the entry at src in
// part 0's first plane.
template <int NMOD, int NW, int NP, bool GAUSS>
__device__ __forceinline__ void crt_s8_exact(const signed char* __restrict__ src, long long plane,
                                             int p, int off, int kind, void* out0, void* out1,
                                             void* out2, void* out3, long long idx) {
  if constexpr (NP == 3 || GAUSS) {
    long long acc[2][NW];
    double qf[2] = {0.0, 0.0};
#pragma unroll
    for (int i = 0; i < NW; ++i) acc[0][i] = acc[1][i] = 0;
    if constexpr (GAUSS)
      accumulate_s8_uv<0, NMOD, NW>(src, plane, acc, qf);
    else
      accumulate_s8_3m<0, NMOD, NW>(src, plane, acc, qf);
    finish<NW>(acc[0], qf[0], off, kind, out0, out1, idx);
    finish<NW>(acc[1], qf[1], off, kind, out2, out3, idx);
  } else {
    long long acc[NW];
    double qf = 0.0;
#pragma unroll
    for (int i = 0; i < NW; ++i) acc[i] = 0;
    accumulate_s8<NMOD, NW>(src + p * NMOD * plane, plane, acc, qf);
    finish<NW>(acc, qf, off, kind, p == 0 ? out0 : out2, p == 0 ? out1 : out3, idx);
  }
}

// ---- the float64 path

// Byte t of x, sign-extended (one prmt).
__device__ __forceinline__ int sbyte(unsigned x, int t) {
#ifdef __CUDA_ARCH__
  int r;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(x), "r"(0x8880 + 0x1111 * t));
  return r;
#else
  return static_cast<signed char>(x >> (8 * t));
#endif
}

// Byte t of x as a float64 (cvt.s8 reads the low byte: no separate sign extension).
__device__ __forceinline__ double sbyte_f64(unsigned x, int t) {
#ifdef __CUDA_ARCH__
  double d;
  asm("cvt.rn.f64.s8 %0, %1;" : "=d"(d) : "r"(x >> (8 * t)));
  return d;
#else
  return static_cast<signed char>(x >> (8 * t));
#endif
}

// Term l of one entry: w weight_l into the digits, numpy's qf + w ratio_l (two roundings, never
// an FMA; the first term alone: 0 + x differs from x only in a zero's sign, which rint ignores).
template <int KW>
__device__ __forceinline__ void add_term(int l, double w, double (&acc)[KW], double& qf) {
  const double r = __dmul_rn(w, emu_ratio[l]);
  qf = l == 0 ? r : __dadd_rn(qf, r);
#pragma unroll
  for (int i = 0; i < KW; ++i) {
    const double d = emu_wdig_f64[l * kF64DigitStride + i];
    acc[i] = l == 0 ? __dmul_rn(w, d) : __fma_rn(w, d, acc[i]);
  }
}

// Real parts: the residues of the kCols entries packed 4 to a word, kWords per modulus.
template <int NMOD, int KW>
__device__ __forceinline__ void accumulate_f64(const unsigned (&raw)[NMOD][kWords],
                                               double (&acc)[kCols][KW], double (&qf)[kCols]) {
#pragma unroll
  for (int l = 0; l < NMOD; ++l) {
#pragma unroll
    for (int t = 0; t < kCols; ++t)
      add_term<KW>(l, sbyte_f64(raw[l][t / 4], t % 4), acc[t], qf[t]);
  }
}

// The residue words of kCols entries of one plane (kCols-byte aligned; they reach past n only
// within the row, ldr % kCols == 0).
__device__ __forceinline__ void load_words(const signed char* __restrict__ src,
                                           unsigned (&raw)[kWords]) {
  if (kWords == 1) {
    raw[0] = __ldg(reinterpret_cast<const unsigned*>(src));
  } else {
    const unsigned long long v = __ldg(reinterpret_cast<const unsigned long long*>(src));
    raw[0] = static_cast<unsigned>(v);
    raw[kWords - 1] = static_cast<unsigned>(v >> 32);
  }
}

// floor(u / M) = __umulhi(u, kSymMul<M>) for u < 1024 (checked below).
template <int M>
constexpr unsigned kSymMul = static_cast<unsigned>(((1ull << 32) + M - 1) / M);

template <int M>
__host__ __device__ constexpr bool sym_mul_exact() {
  for (unsigned long long u = 0; u < 1024; ++u)
    if (((u * kSymMul<M>) >> 32) != u / M) return false;
  return true;
}

// symmetric(x mod M) for |x| <= 383 (differences of int8 residues), without a division.
template <int M>
__device__ __forceinline__ int symmetric_small(int x) {
  constexpr int K = (383 - M / 2 + M - 1) / M;  // x + M/2 + K M >= 0
  static_assert(383 + M / 2 + K * M < 1024 && sym_mul_exact<M>(),
                "symmetric_small: modulus out of range");
  const unsigned u = static_cast<unsigned>(x + M / 2 + K * M);  // in [0, 1024)
  const int k = static_cast<int>(__umulhi(u, kSymMul<M>));     // floor((x + M/2) / M) + K
  return x + K * M - k * M;
}

// symmetric(x mod M) for |x| < 2**15, without a division: floor(u / M) = __umulhi(u,
// kSymMul<M>) for every u < 2**24 (kSymMul<M> M = 2**32 + e with e < M, so u kSymMul<M> / 2**32
// exceeds u / M by u e / (M 2**32) < 1 / M).
template <int M>
__device__ __forceinline__ int symmetric_mid(int x) {
  constexpr int K = ((1 << 15) + M - 1) / M;                   // K M >= 2**15
  const unsigned u = static_cast<unsigned>(x + M / 2 + K * M);  // in (0, 2**17)
  const int k = static_cast<int>(__umulhi(u, kSymMul<M>));     // floor((x + M/2) / M) + K
  return x + K * M - k * M;
}

// The Gaussian moduli: U's and V's residue words of modulus L (planes L, NMOD + L from src) into
// the Re and Im terms, as accumulate_s8_uv (the same symmetric residues from any int8 residues):
// Re = (U + V) / 2, halving an even representative; Im = symmetric(U - V) c with c the
// symmetric residue of 1 / (2 iota) (|product| <= 128 * 120).
template <int L, int NMOD, int KW>
__device__ __forceinline__ void accumulate_f64_uv(const signed char* __restrict__ src,
                                                  long long plane, double (&acc)[2][kCols][KW],
                                                  double (&qf)[2][kCols]) {
  if constexpr (L < NMOD) {
    constexpr int m = kGaussianModuli[L];
    constexpr int c = gaussian_inv2iota(L) > (m - 1) / 2 ? gaussian_inv2iota(L) - m
                                                         : gaussian_inv2iota(L);
    unsigned raw[2][kWords];
#pragma unroll
    for (int p = 0; p < 2; ++p) load_words(src + (p * NMOD + L) * plane, raw[p]);
#pragma unroll
    for (int t = 0; t < kCols; ++t) {
      const int w1 = sbyte(raw[0][t / 4], t % 4), w2 = sbyte(raw[1][t / 4], t % 4);
      const int s = w1 + w2;  // in [-256, 254]; m odd: s + m is even where s is odd
      add_term<KW>(L, static_cast<double>(symmetric_small<m>((s + (s & 1) * m) >> 1)), acc[0][t],
                   qf[0][t]);
      add_term<KW>(L, static_cast<double>(symmetric_mid<m>(symmetric_small<m>(w1 - w2) * c)),
                   acc[1][t], qf[1][t]);
    }
    accumulate_f64_uv<L + 1, NMOD, KW>(src, plane, acc, qf);
  }
}

// 3M: the three products' residue words of modulus L (planes L, NMOD + L, 2 NMOD + L from src)
// into the Re and Im terms, as accumulate_s8_3m (any int8 residues; the same symmetric
// residues). Loaded here, modulus by modulus, to keep fewer words live.
template <int L, int NMOD, int KW>
__device__ __forceinline__ void accumulate_f64_3m(const signed char* __restrict__ src,
                                                  long long plane, double (&acc)[2][kCols][KW],
                                                  double (&qf)[2][kCols]) {
  if constexpr (L < NMOD) {
    constexpr int m = kModuli[L];
    unsigned raw[3][kWords];
#pragma unroll
    for (int p = 0; p < 3; ++p) load_words(src + (p * NMOD + L) * plane, raw[p]);
#pragma unroll
    for (int t = 0; t < kCols; ++t) {
      const int w1 = sbyte(raw[0][t / 4], t % 4), w2 = sbyte(raw[1][t / 4], t % 4),
                w3 = sbyte(raw[2][t / 4], t % 4);
      add_term<KW>(L, static_cast<double>(symmetric_small<m>(w1 - w2)), acc[0][t], qf[0][t]);
      add_term<KW>(L, static_cast<double>(symmetric_small<m>(w3 - w1 - w2)), acc[1][t],
                   qf[1][t]);
    }
    accumulate_f64_3m<L + 1, NMOD, KW>(src, plane, acc, qf);
  }
}

// Y = X - qP from the digits, rounded to float64 (F32: float32) bits times 2**off when the
// result is a normal number or zero; false (bits unset) otherwise. NW: ozaki2_crt.cu's 32-bit
// word count, which holds Y (|Y| < P).
template <int NW, int KW, bool F32>
__device__ __forceinline__ bool round_fast(const double (&acc)[KW], double qf, int off,
                                           unsigned long long& bits) {
  constexpr int R = kCrtF64Bits;
  constexpr int N64 = (NW + 1) / 2;  // 64-bit words of Y
  const double q = rint(qf);         // as __double2int_rn: RNE, |q| <= 20 * 128
  long long a[KW];
#pragma unroll
  for (int i = 0; i < KW; ++i) a[i] = __double2ll_rn(__fma_rn(-q, emu_pdig_f64[i], acc[i]));
#pragma unroll
  for (int i = 0; i + 1 < KW; ++i) {  // digits below the top into [0, 2**R)
    a[i + 1] += a[i] >> R;
    a[i] &= (1ll << R) - 1;
  }
  // Y's 64-bit words (two's complement, modulo 2**(64 N64), which holds Y): disjoint bit fields
  unsigned long long W[N64];
#pragma unroll
  for (int j = 0; j < N64; ++j) {
    W[j] = 0;
#pragma unroll
    for (int i = 0; i < KW; ++i) {
      const int d = R * i - 64 * j;  // digit i's bit 0 in word j
      if (d >= 64 || (i + 1 < KW && d + R <= 0)) continue;
      if (d >= 0)
        W[j] |= static_cast<unsigned long long>(a[i]) << d;
      else if (i + 1 < KW)
        W[j] |= static_cast<unsigned long long>(a[i]) >> (-d);
      else  // the top digit, signed
        W[j] |= static_cast<unsigned long long>(a[i] >> (-d < 63 ? -d : 63));
    }
  }
  // (hi, lo): the lowest two words above which Y is only sign; base: lo's bit 0 in Y
  long long hi = static_cast<long long>(W[N64 - 1]);
  unsigned long long lo = N64 >= 2 ? W[N64 - 2] : 0;
  int base = 64 * (N64 - 2);
  bool sticky = false, down = true;
#pragma unroll
  for (int j = N64 - 3; j >= 0; --j) {
    down = down && hi == (static_cast<long long>(lo) >> 63);
    if (down) {
      hi = static_cast<long long>(lo);
      lo = W[j];
      base -= 64;
    } else {
      sticky |= W[j] != 0;
    }
  }
  // T = floor(Y / 2**sh) rounded to odd, |T| in [2**62, 2**63]: hi's top bit moved to bit 62
  const int s = __clzll(hi ^ (hi >> 63)) - 1;  // in [0, 63]
  sticky |= (lo << s) != 0;
  long long T = static_cast<long long>((static_cast<unsigned long long>(hi) << s) |
                                       ((lo >> 1) >> (63 - s)) | (sticky ? 1 : 0));
  int sh = base + 64 - s;
  if (N64 == 1 || hi == (static_cast<long long>(lo) >> 63)) {  // Y fits in 64 bits: exact
    T = N64 == 1 ? hi : static_cast<long long>(lo);
    sh = 0;
  }
  const int k = sh + off;
  if (F32) {
    const unsigned b = __float_as_uint(__ll2float_rn(T));
    const int e = static_cast<int>((b >> 23) & 0xff);  // 0 only for Y = 0
    bits = e == 0 ? 0u : b + (static_cast<unsigned>(k) << 23);
    return e == 0 || static_cast<unsigned>(e + k - 1) < 254u;
  }
  const unsigned long long b =
      static_cast<unsigned long long>(__double_as_longlong(__ll2double_rn(T)));
  const int e = static_cast<int>((b >> 52) & 0x7ff);
  bits = e == 0 ? 0ull : b + (static_cast<unsigned long long>(static_cast<long long>(k)) << 52);
  return e == 0 || static_cast<unsigned>(e + k - 1) < 2046u;
}

// The rounded entries of one part (ok: those round_fast gave, within the row): 16-byte vector
// stores where all kCols are there and aligned.
template <bool F32>
__device__ __forceinline__ void store_fast(void* out, long long idx0,
                                           const unsigned long long (&bits)[kCols], unsigned ok) {
  if (F32) {
    float* o = static_cast<float*>(out) + idx0;
    if (ok == (1u << kCols) - 1 && (reinterpret_cast<unsigned long long>(o) & 15) == 0) {
#pragma unroll
      for (int t = 0; t < kCols; t += 4) {
        float4 v;
        v.x = __uint_as_float(static_cast<unsigned>(bits[t]));
        v.y = __uint_as_float(static_cast<unsigned>(bits[t + 1]));
        v.z = __uint_as_float(static_cast<unsigned>(bits[t + 2]));
        v.w = __uint_as_float(static_cast<unsigned>(bits[t + 3]));
        *reinterpret_cast<float4*>(o + t) = v;
      }
      return;
    }
#pragma unroll
    for (int t = 0; t < kCols; ++t)
      if (ok >> t & 1) o[t] = __uint_as_float(static_cast<unsigned>(bits[t]));
    return;
  }
  double* o = static_cast<double*>(out) + idx0;
  if (ok == (1u << kCols) - 1 && (reinterpret_cast<unsigned long long>(o) & 15) == 0) {
#pragma unroll
    for (int t = 0; t < kCols; t += 2) {
      double2 v;
      v.x = __longlong_as_double(static_cast<long long>(bits[t]));
      v.y = __longlong_as_double(static_cast<long long>(bits[t + 1]));
      *reinterpret_cast<double2*>(o + t) = v;
    }
    return;
  }
#pragma unroll
  for (int t = 0; t < kCols; ++t)
    if (ok >> t & 1) o[t] = __longlong_as_double(static_cast<long long>(bits[t]));
}

// Rounds and stores the kCols entries of one part; returns the mask of those left to the
// integer path.
template <int NW, int KW, bool F32>
__device__ __forceinline__ unsigned finish_fast(const double (&acc)[kCols][KW],
                                                const double (&qf)[kCols], const int (&off)[kCols],
                                                unsigned valid, void* out, long long idx0) {
  unsigned long long bits[kCols];
  unsigned ok = 0;
#pragma unroll
  for (int t = 0; t < kCols; ++t)
    ok |= round_fast<NW, KW, F32>(acc[t], qf[t], off[t], bits[t]) << t;
  ok &= valid;
  store_fast<F32>(out, idx0, bits, ok);
  return valid & ~ok;
}

// kCols entries of every part by the float64 path; returns the mask of entries (bit
// p * kCols + t; NP = 3 or GAUSS: t, both parts) left to the integer path.
template <int NMOD, int NW, int NP, bool GAUSS, bool F32>
__device__ __forceinline__ unsigned crt_s8_fast(const signed char* __restrict__ src,
                                                long long plane, const int (&off)[kCols],
                                                unsigned valid,
                                                void* out0, void* out2, long long idx0) {
  constexpr int KW = kCrtF64Words[NMOD];
  if constexpr (NP == 3 || GAUSS) {
    double acc[2][kCols][KW], qf[2][kCols];
    if constexpr (GAUSS)
      accumulate_f64_uv<0, NMOD, KW>(src, plane, acc, qf);
    else
      accumulate_f64_3m<0, NMOD, KW>(src, plane, acc, qf);
    const unsigned s0 = finish_fast<NW, KW, F32>(acc[0], qf[0], off, valid, out0, idx0);
    const unsigned s1 = finish_fast<NW, KW, F32>(acc[1], qf[1], off, valid, out2, idx0);
    return s0 | s1;
  } else {
    unsigned slow = 0;
#pragma unroll 1
    for (int p = 0; p < NP; ++p) {  // one part at a time: one set of accumulators live
      unsigned raw[NMOD][kWords];
#pragma unroll
      for (int l = 0; l < NMOD; ++l) load_words(src + (p * NMOD + l) * plane, raw[l]);
      double acc[kCols][KW], qf[kCols];
      accumulate_f64<NMOD, KW>(raw, acc, qf);
      slow |= finish_fast<NW, KW, F32>(acc, qf, off, valid, p == 0 ? out0 : out2, idx0)
              << (p * kCols);
    }
    return slow;
  }
}

}  // namespace

// Blocks of 256 threads per SM the register count must allow: 64 registers for four real
// columns of up to three digits, 80 with four, 128 for 3M's two parts (a macro for
// tools/device/crt_bench.py's variants).
template <int NMOD, int NP, bool GAUSS>
#ifdef EMU_CRT_S8_MIN_BLOCKS
constexpr int kMinBlocks = EMU_CRT_S8_MIN_BLOCKS;
#else
constexpr int kMinBlocks = NP == 3 || GAUSS || kCols == 8 ? 2 : kCrtF64Words[NMOD] <= 3 ? 4 : 3;
#endif

// NP: the planes' parts, 1 (real), 2 (Re and Im residues; with GAUSS the Gaussian moduli's U
// and V, combined here into the two output parts, with their tables) or 3 (the 3M products T1,
// T2, T3, combined here). Each thread takes kCols consecutive columns
// (emulinalg/backends/cuda/fused.py sizes the grid; any grid gives the same result).
template <int NMOD, int NW, int NP, bool GAUSS = false>
__global__ void __launch_bounds__(256, kMinBlocks<NMOD, NP, GAUSS>)
    ozaki2_crt_s8(const signed char* __restrict__ res, long long plane, int B, int mc, int n,
                  int ldr, int m_full, int r0, const int* __restrict__ mu,
                  const int* __restrict__ nu, int kind, void* out0, void* out1, void* out2,
                  void* out3) {
  const bool vec = ((reinterpret_cast<unsigned long long>(res) |
                     static_cast<unsigned long long>(ldr | plane)) & (kCols - 1)) == 0;
  const long long rows = static_cast<long long>(B) * mc;
  for (long long row = blockIdx.y * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<long long>(gridDim.y) * blockDim.y) {
    int b;
    const long long orow = crt_output_row(row, mc, m_full, r0, b);
    const int mui = mu[orow];
    for (int j0 = (blockIdx.x * blockDim.x + threadIdx.x) * kCols; j0 < n;
         j0 += gridDim.x * blockDim.x * kCols) {
      const int cnt = min(kCols, n - j0);
      const unsigned valid = (1u << cnt) - 1;
      int off[kCols];
#pragma unroll
      for (int t = 0; t < kCols; ++t)
        off[t] = t < cnt ? -(mui + nu[static_cast<long long>(b) * n + j0 + t]) : 0;
      const signed char* src = res + row * ldr + j0;
      const long long idx0 = orow * n + j0;
      constexpr bool kGauss = GAUSS && NP == 2;
      unsigned slow;  // entries for the integer path (bit p * kCols + t; NP = 3, GAUSS: t)
      if (vec && kind == kFloat64)
        slow = crt_s8_fast<NMOD, NW, NP, kGauss, false>(src, plane, off, valid, out0, out2, idx0);
      else if (vec && kind == kFloat32)
        slow = crt_s8_fast<NMOD, NW, NP, kGauss, true>(src, plane, off, valid, out0, out2, idx0);
      else  // double-double, or rows not aligned for the word loads: all by the integer path
        slow = NP == 2 && !kGauss ? valid | valid << kCols : valid;
#pragma unroll 1
      for (; slow != 0; slow &= slow - 1) {
        const int e = __ffs(static_cast<int>(slow)) - 1, t = e % kCols;
        // off[t] again: indexing off by a run-time t would put it in local memory
        const int o = -(mui + nu[static_cast<long long>(b) * n + j0 + t]);
        crt_s8_exact<NMOD, NW, NP, kGauss>(src + t, plane, e / kCols, o, kind, out0, out1, out2,
                                           out3, idx0 + t);
      }
    }
  }
}

#ifndef __CUDACC_RTC__
// Standalone nvcc build (register/spill check); the backend instantiates what it needs.
#define EMU_CRT_S8_INSTANCE(NMOD, NW, NP)                                                     \
  template __global__ void ozaki2_crt_s8<NMOD, NW, NP>(                                       \
      const signed char*, long long, int, int, int, int, int, int, const int*, const int*,    \
      int, void*, void*, void*, void*);
EMU_CRT_S8_INSTANCE(18, 5, 1)
EMU_CRT_S8_INSTANCE(20, 5, 2)
EMU_CRT_S8_INSTANCE(8, 3, 1)
EMU_CRT_S8_INSTANCE(16, 4, 3)
template __global__ void ozaki2_crt_s8<16, 4, 2, true>(const signed char*, long long, int, int,
                                                       int, int, int, int, const int*,
                                                       const int*, int, void*, void*, void*,
                                                       void*);
#endif
