// Scheme II reconstruction from INT8 residues: the CRT stage for the fused GEMM
// (emulinalg._cuda, src_cuda/), whose epilogue already reduced every product modulo m_l into
// its symmetric residue W_l in [-(m_l / 2), (m_l - 1) / 2] and stored it as int8.
//
// Same arithmetic as ozaki2_crt.cu from there on (X = sum_l W_l weight_l in balanced 32-bit
// digits, q from the float64 ratio sum, Y = X - qP, one correct rounding; its finish() is
// reused), so the output is bit-identical to the INT32 path. Reading n bytes per entry instead
// of 4n is the point.
//
// Layout: res holds (NP, NMOD, B, mc, ldr) int8 (output parts: the real product, or Re and Im;
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

}  // namespace

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
#endif
