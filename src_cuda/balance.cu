// The complex part check's stage 0 (emulinalg.algorithm.parts.balanced) for the cupy backend:
// the operands' sides straight into the bf16 GEMM's operands, and one pass over the GEMMs' sums
// for the test and the certificate's bound (certificate.parts_lower). The generic code's float64
// operations in its order, each rounded on its own (no FMA).
//
// balance_sides: per entry of one operand (B, R, C) with element strides (sb, sr, sc), its
// line's exponent e (rows: e[b R + r]; columns: e[b C + c]) normalizes both parts,
// t = |re| 2^-e + |im| 2^-e and d = |re| 2^-e - |im| 2^-e (parts.balance_sides), written as the
// bf16 bits truncated toward zero that bf16_lower.cu writes of them (B, Rpad, Cp), zero beyond
// (R, C); nonzero[line] = 1 where the line has some t != 0 (set to 0 before the launch).
//
// balance_out: per output entry (B, m, n) from the FP32 sums of the two bf16 GEMMs (row pitch
// pitch): T's lower bound t_lo = max(c_T factor - abs_term, 0) (certificate.magnitude_lower),
// D's estimate s = c_D factor (certificate.signed_estimate), parts.balance_fine's test with
// the terms c[0..11] of parts.balance_terms (a line with no nonzero t is fine), bad = 1 where
// an entry fails it, and pl = float32(t_lo (1/2 - 2^-24)) (certificate.parts_lower), zero in
// the padding columns n .. pitch.

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
  const long long rows = static_cast<long long>(B) * Rpad;
  for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
    const int b = static_cast<int>(row / Rpad);
    const int r = static_cast<int>(row - static_cast<long long>(b) * Rpad);
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < Cp; c += gridDim.x * blockDim.x) {
      double t = 0.0, d = 0.0;
      if (r < R && c < C) {
        const long long line = rows_are_lines ? static_cast<long long>(b) * R + r
                                              : static_cast<long long>(b) * C + c;
        const int s = static_cast<int>(-e[line]);
        const long long at = b * sb + r * sr + c * sc;
        const double x = ldexp(fabs(static_cast<double>(re[at])), s);
        const double y = ldexp(fabs(static_cast<double>(im[at])), s);
        t = __dadd_rn(x, y);
        d = __dsub_rn(x, y);
        if (t != 0.0) nonzero[line] = 1;
      }
      t16[row * Cp + c] = bf16_toward_zero(t);
      d16[row * Cp + c] = bf16_toward_zero(d);
    }
  }
}

extern "C" __global__ void __launch_bounds__(256)
    balance_out(const float* __restrict__ cT, const float* __restrict__ cD, long long pitch,
                int B, int m, int n, const int* __restrict__ nz_rows,
                const int* __restrict__ nz_cols, const double* __restrict__ c, double factor,
                double abs_term, float* __restrict__ pl, unsigned* __restrict__ bad) {
  const long long rows = static_cast<long long>(B) * m;
  for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
    const int b = static_cast<int>(row / m);
    for (long long j = blockIdx.x * blockDim.x + threadIdx.x; j < pitch;
         j += static_cast<long long>(gridDim.x) * blockDim.x) {
      const long long at = row * pitch + j;
      if (j >= n) {
        pl[at] = 0.0f;
        continue;
      }
      const double lam = __dsub_rn(__dmul_rn(static_cast<double>(cT[at]), factor), abs_term);
      const double t_lo = lam > 0.0 ? lam : 0.0;
      const double s = __dmul_rn(static_cast<double>(cD[at]), factor);
      const double t_hi = __dmul_rn(
          __ddiv_rn(__dadd_rn(__ddiv_rn(__dadd_rn(t_lo, c[0]), c[1]), c[2]), c[3]), c[4]);
      const double d_hi =
          __dmul_rn(__dadd_rn(__dadd_rn(fabs(s), __dmul_rn(c[5], t_hi)), c[6]), c[7]);
      const double part_lo =
          __dmul_rn(__dsub_rn(__dmul_rn(t_lo, c[8]), __dmul_rn(d_hi, c[9])), c[10]);
      const bool empty = nz_rows[row] == 0 || nz_cols[static_cast<long long>(b) * n + j] == 0;
      if (!(empty || part_lo >= __dmul_rn(t_hi, c[11]))) *bad = 1u;
      pl[at] = __double2float_rn(__dmul_rn(t_lo, 0.5 - 0x1p-24));
    }
  }
}
