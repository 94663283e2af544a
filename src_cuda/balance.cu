// The complex part check's stage 0 (emulinalg.algorithm.parts.balanced) for the cupy backend:
// the operands' sides straight into the bf16 GEMM's operands, and one pass over the GEMMs' sums
// for the test and the certificate's bound (certificate.parts_lower). The generic code's float64
// operations in its order, each rounded on its own (no FMA).
//
// balance_sides: per entry of one operand (B, R, C) with element strides (sb, sr, sc), its
// line's exponent e (rows: e[b R + r]; columns: e[b C + c]) normalizes both parts,
// t = |re| 2^-e + |im| 2^-e and d = |re| 2^-e - |im| 2^-e (parts.balance_sides), written as the
// bf16 bits truncated toward zero that bf16_lower.cu writes of them (B, Rpad, Cp), zero beyond
// (R, C); nonzero[line] = 1 where the line has some t != 0 (set to 0 before the launch). A
// complex array's parts (im one entry after re, pairs aligned) are read with one load per entry.
//
// balance_out: per output entry (B, m, n) from the FP32 sums of the two bf16 GEMMs (row pitch
// pitch): T's lower bound t_lo = max(c_T factor - abs_term, 0) (certificate.magnitude_lower),
// D's estimate s = c_D factor (certificate.signed_estimate), parts.balance_fine's test with
// the terms c[0..11] of parts.balance_terms (a line with no nonzero t is fine), bad = 1 where
// an entry fails it, and pl = float32(t_lo (1/2 - 2^-24)) (certificate.parts_lower), zero in
// the padding columns n .. pitch.

#include "exact_scale.cuh"

// Both kernels: a warp takes 128 consecutive entries of a row (kV = 4 per lane, 32 apart, so each
// load and store of the warp is contiguous), a block 8 warps; block rows walk every gridDim.y-th
// row. Any grid gives the same result (emulinalg/backends/cupy/balance.py sizes it to a few
// waves); several entries per thread, all loaded before any is used, keep loads in flight.
constexpr int kV = 4;
constexpr int kWarpSpan = 32 * kV;  // entries of a row per warp
constexpr int kBlockSpan = 8 * kWarpSpan;

__device__ __forceinline__ unsigned short bf16_toward_zero(double v) {  // as bf16_lower.cu
  return static_cast<unsigned short>(__float_as_uint(__double2float_rz(v)) >> 16);
}

template <typename In>
__global__ void __launch_bounds__(256)
    balance_sides(const In* __restrict__ re, const In* __restrict__ im, long long sb,
                  long long sr, long long sc, int B, int R, int C, int Rpad, int Cp,
                  int rows_are_lines, const long long* __restrict__ e,
                  unsigned short* __restrict__ t16, unsigned short* __restrict__ d16,
                  int* __restrict__ nonzero) {
  // a complex array's parts (im one entry after re, pairs aligned, even strides): one load each
  const bool pair = im == re + 1 && ((sb | sr | sc) & 1) == 0 &&
                    (reinterpret_cast<unsigned long long>(re) & (2 * sizeof(In) - 1)) == 0;
  const int lane = threadIdx.x & 31;
  const int c0 = blockIdx.x * kBlockSpan + (threadIdx.x >> 5) * kWarpSpan + lane;
  const long long rows = static_cast<long long>(B) * Rpad;
  int bcur = -1;
  unsigned written = 0;  // column lines: this thread's flags set for batch entry bcur
  for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
    const int b = static_cast<int>(row / Rpad);
    const int r = static_cast<int>(row - static_cast<long long>(b) * Rpad);
    if (b != bcur) bcur = b, written = 0;
    double x[kV], y[kV];
    int s[kV];
#pragma unroll
    for (int i = 0; i < kV; ++i) {  // the loads first, all of them
      const int c = c0 + 32 * i;
      x[i] = y[i] = 0.0;
      s[i] = 0;
      if (r < R && c < C) {
        const long long line = rows_are_lines ? static_cast<long long>(b) * R + r
                                              : static_cast<long long>(b) * C + c;
        s[i] = static_cast<int>(-e[line]);
        const long long at = b * sb + r * sr + c * sc;
        if (pair) {
          In u, w;
          load_pair(re + at, u, w);
          x[i] = static_cast<double>(u), y[i] = static_cast<double>(w);
        } else {
          x[i] = static_cast<double>(re[at]);
          y[i] = static_cast<double>(im[at]);
        }
      }
    }
    bool any = false;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int c = c0 + 32 * i;
      if (c >= Cp) continue;
      const double u = scale2(fabs(x[i]), s[i]), v = scale2(fabs(y[i]), s[i]);
      const double t = __dadd_rn(u, v), d = __dsub_rn(u, v);
      if (t != 0.0) {
        any = true;
        if (!rows_are_lines && !(written >> i & 1u)) {
          nonzero[static_cast<long long>(b) * C + c] = 1;
          written |= 1u << i;
        }
      }
      t16[row * Cp + c] = bf16_toward_zero(t);
      d16[row * Cp + c] = bf16_toward_zero(d);
    }
    // row lines: the block's threads share the row, one store per warp that saw a nonzero t
    if (rows_are_lines && __ballot_sync(0xffffffffu, any) != 0u && lane == 0)
      nonzero[static_cast<long long>(b) * R + r] = 1;
  }
}

extern "C" __global__ void __launch_bounds__(256)
    balance_out(const float* __restrict__ cT, const float* __restrict__ cD, long long pitch,
                int B, int m, int n, const int* __restrict__ nz_rows,
                const int* __restrict__ nz_cols, const double* __restrict__ c, double factor,
                double abs_term, float* __restrict__ pl, unsigned* __restrict__ bad) {
  double k[12];
#pragma unroll
  for (int i = 0; i < 12; ++i) k[i] = c[i];
  const int j0 = blockIdx.x * kBlockSpan + (threadIdx.x >> 5) * kWarpSpan + (threadIdx.x & 31);
  const long long rows = static_cast<long long>(B) * m;
  bool fails = false;
  for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
    const int b = static_cast<int>(row / m);
    const bool empty_row = nz_rows[row] == 0;
    float fT[kV], fD[kV];
    int nzc[kV];
#pragma unroll
    for (int i = 0; i < kV; ++i) {  // the loads first
      const long long j = j0 + 32 * i;
      fT[i] = fD[i] = 0.0f;
      nzc[i] = 0;
      if (j < n) {
        fT[i] = cT[row * pitch + j];
        fD[i] = cD[row * pitch + j];
        nzc[i] = nz_cols[static_cast<long long>(b) * n + j];
      }
    }
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const long long j = j0 + 32 * i;
      if (j >= pitch) continue;
      const long long at = row * pitch + j;
      if (j >= n) {
        pl[at] = 0.0f;
        continue;
      }
      const double lam = __dsub_rn(__dmul_rn(static_cast<double>(fT[i]), factor), abs_term);
      const double t_lo = lam > 0.0 ? lam : 0.0;
      const double s = __dmul_rn(static_cast<double>(fD[i]), factor);
      const double t_hi = __dmul_rn(
          __ddiv_rn(__dadd_rn(__ddiv_rn(__dadd_rn(t_lo, k[0]), k[1]), k[2]), k[3]), k[4]);
      const double d_hi =
          __dmul_rn(__dadd_rn(__dadd_rn(fabs(s), __dmul_rn(k[5], t_hi)), k[6]), k[7]);
      const double part_lo =
          __dmul_rn(__dsub_rn(__dmul_rn(t_lo, k[8]), __dmul_rn(d_hi, k[9])), k[10]);
      const bool empty = empty_row || nzc[i] == 0;
      fails |= !(empty || part_lo >= __dmul_rn(t_hi, k[11]));
      pl[at] = __double2float_rn(__dmul_rn(t_lo, 0.5 - 0x1p-24));
    }
  }
  if (fails) *bad = 1u;
}
