// Shared by the Scheme II kernels (ozaki2_residues.cu, ozaki2_crt.cu): the moduli.
//
// The moduli are compile-time constants so that `x % m` becomes a multiply-high sequence
// instead of a division: the kernels walk them by template recursion (step<L + 1>), never with a
// runtime index (and without lambdas, which NVRTC would compile as host code). The table must
// equal emulinalg._moduli.MODULI (a CPU test parses it). No host headers: the same text compiles
// with NVRTC (cupy.RawModule) and with nvcc.
#pragma once

constexpr int kModuli[20] = {256, 255, 253, 251, 247, 241, 239, 233, 229, 227,
                             223, 217, 211, 199, 197, 193, 191, 181, 179, 173};

// 2**e mod m, evaluated by the compiler (the residue kernel's word weights).
__host__ __device__ constexpr unsigned pow2mod(int e, unsigned m) {
  unsigned r = 1u % m;
  for (int i = 0; i < e; ++i) r = (r * 2u) % m;
  return r;
}

// Symmetric representative in [-(m/2), (m-1)/2] of u in [0, m]: Python's symmetric_mod.
template <int M>
__device__ __forceinline__ int symmetric(int u) {
  return u > (M - 1) / 2 ? u - M : u;
}
