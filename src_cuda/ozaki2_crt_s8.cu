// Scheme II reconstruction from INT8 residues: the CRT stage for the fused GEMM
// (emulinalg._cuda, src_cuda/), whose epilogue already reduced every product modulo m_l into
// its symmetric residue W_l in [-(m_l / 2), (m_l - 1) / 2] and stored it as int8.
//
// Same arithmetic as ozaki2_crt.cu from there on (X = sum_l W_l weight_l in balanced 32-bit
// digits, q from the float64 ratio sum, Y = X - qP, one correct rounding; its finish() is
// reused), so the output is bit-identical to the INT32 path. Reading n bytes per entry instead
// of 4n is the point.
//
// Layout: res holds (NP, NMOD, B, mc, ldr) int8 (the real product, Re and Im, or the 3M products;
// moduli; batch; rows of this chunk; columns, ldr >= n apart); entry (b, i, j) of the chunk is
// output row r0 + i of batch b. mu is (B, m_full), nu is (B, n), the outputs (B, m_full, n).
//
// Built together with ozaki2_crt.cu (its helpers and __constant__ tables): the include below is
// inlined for NVRTC (emulinalg.backends.cuda.source) and resolved by nvcc for the standalone
// check.
#include "ozaki2_crt.cu"

namespace {

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
    const int w[2] = {symmetric<m>(re), symmetric<m>(im)};
#pragma unroll
    for (int p = 0; p < 2; ++p) {
#pragma unroll
      for (int i = 0; i < NW; ++i)
        acc[p][i] = mad_wide(acc[p][i], w[p], emu_wdig[L * kDigitStride + i]);
      qf[p] = __dadd_rn(qf[p], __dmul_rn(static_cast<double>(w[p]), emu_ratio[L]));
    }
    accumulate_s8_3m<L + 1, NMOD, NW>(src, plane, acc, qf);
  }
}

}  // namespace

// NP: the planes' parts, 1 (real), 2 (Re and Im residues) or 3 (the 3M products T1, T2, T3,
// combined here into the two output parts).
template <int NMOD, int NW, int NP>
__global__ void __launch_bounds__(256)
    ozaki2_crt_s8(const signed char* __restrict__ res, long long plane, int B, int mc, int n,
                  int ldr, int m_full, int r0, const int* __restrict__ mu,
                  const int* __restrict__ nu, int kind, void* out0, void* out1, void* out2,
                  void* out3) {
  const long long rows = static_cast<long long>(B) * mc;
  for (long long row = blockIdx.y * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<long long>(gridDim.y) * blockDim.y) {
    int b;
    const long long orow = crt_output_row(row, mc, m_full, r0, b);
    const int mui = mu[orow];
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
      const int off = -(mui + nu[static_cast<long long>(b) * n + j]);
      const long long idx = orow * n + j;
      if constexpr (NP == 3) {
        long long acc[2][NW];
        double qf[2] = {0.0, 0.0};
#pragma unroll
        for (int i = 0; i < NW; ++i) acc[0][i] = acc[1][i] = 0;
        accumulate_s8_3m<0, NMOD, NW>(res + row * ldr + j, plane, acc, qf);
        finish<NW>(acc[0], qf[0], off, kind, out0, out1, idx);
        finish<NW>(acc[1], qf[1], off, kind, out2, out3, idx);
        continue;
      }
#pragma unroll 1
      for (int p = 0; p < NP; ++p) {  // one part at a time: one set of accumulators live
        long long acc[NW];
        double qf = 0.0;
#pragma unroll
        for (int i = 0; i < NW; ++i) acc[i] = 0;
        accumulate_s8<NMOD, NW>(res + p * NMOD * plane + row * ldr + j, plane, acc, qf);
        finish<NW>(acc, qf, off, kind, p == 0 ? out0 : out2, p == 0 ? out1 : out3, idx);
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
#endif
