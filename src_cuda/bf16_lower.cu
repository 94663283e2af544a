// float64 -> bfloat16 truncated toward zero, for certificate lower bounds (magnitude_lower_matmul).
//
// Input: non-negative float64 (B, R, C) with element strides (sb, sr, sc). Output: bf16 bits,
// (B, Rpad, Cp) row-major, zero beyond (R, C) so the padded GEMM adds nothing. Rounding toward
// zero in both steps (float64 -> float32 with the rz conversion, then dropping the low 16 bits
// of the float32) makes every output <= its input, so a product of non-negative values can only
// get smaller. Flushing float32 subnormals to zero (cupy compiles with -ftz) keeps that true.

extern "C" __global__ void __launch_bounds__(256)
    bf16_lower(const double* __restrict__ x, long long sb, long long sr, long long sc, int B, int R,
               int C, int Rpad, int Cp, unsigned short* __restrict__ out) {
  const long long rows = static_cast<long long>(B) * Rpad;
  for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
    const int b = static_cast<int>(row / Rpad), r = static_cast<int>(row - static_cast<long long>(b) * Rpad);
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < Cp; c += gridDim.x * blockDim.x) {
      const double v = (r < R && c < C) ? x[b * sb + r * sr + c * sc] : 0.0;
      const float f = __double2float_rz(v);
      out[row * Cp + c] = static_cast<unsigned short>(__float_as_uint(f) >> 16);
    }
  }
}
