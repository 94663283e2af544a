// The C++ interface between the CUTLASS GEMM instances (gemm_s8_inst.cu, one translation unit
// per tile configuration and epilogue, compiled by nvcc) and the Python module (module.cpp,
// plain C++): no CUDA or CUTLASS headers here.
#pragma once

#include <cstdint>
#include <string>

namespace emu {

// Epilogues of the INT8 TN GEMM C_l = A_l B_l^T.
enum GemmS8Epilogue : int {
  kEpilogueS32 = 0,  // C_l = the INT32 accumulator (what cuBLAS's INT8 GEMM returns)
  kEpilogueMod = 1,  // C_l = symmetric(acc mod m_l) as INT8: Ozaki Scheme II's fused reduction
};

// Tile configurations (gemm_s8_configs.cuh), one translation unit each and per epilogue
// (CMakeLists.txt compiles gemm_s8_inst.cu once for every pair: keep the count in step).
constexpr int kGemmS8Configs = 3;

// A batched INT8 "TN" product: for l < batch, C_l (m x n) = A_l (m x k, rows lda apart) times
// B_l^T (B_l: n x k, rows ldb apart), all row-major, matrices stride_* elements apart. Raw
// device pointers; k, lda, ldb and the strides multiples of 16, ldc * sizeof(C) and
// stride_c * sizeof(C) of 16 bytes, pointers 16-byte aligned (TMA).
struct GemmS8Problem {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int m = 0, n = 0, k = 0, batch = 1;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // kEpilogueMod: device int32 moduli, matrix l reduced by moduli[l * moduli_stride]; each in
  // [2, 256] so that the symmetric residue fits int8.
  const int* moduli = nullptr;
  std::int64_t moduli_stride = 1;
  void* stream = nullptr;  // cudaStream_t
  int swizzle = 1;         // tile scheduler's max swizzle (1, 2, 4, 8)
  int raster = 0;          // 0: heuristic, 1: along M, 2: along N
};

struct GemmS8Info {
  std::string name;  // e.g. "cooperative 256x128x128 cluster 2x1"
  int tile_m = 0, tile_n = 0, tile_k = 0, cluster_m = 0, cluster_n = 0;
  int stages = 0, threads = 0, smem_bytes = 0;
  // from cudaFuncGetAttributes on the current device (-1 where that failed)
  int num_regs = -1, local_bytes = -1;
};

// Per instance: run returns "" on success, else the reason (nothing was launched, or the
// launch failed); info fills the static facts and, where a device is present, the attributes.
#define EMU_GEMM_S8_DECLARE(CFG, EPI)                                   \
  std::string gemm_s8_run_##CFG##_##EPI(const GemmS8Problem& problem); \
  GemmS8Info gemm_s8_info_##CFG##_##EPI();

EMU_GEMM_S8_DECLARE(0, 0)
EMU_GEMM_S8_DECLARE(0, 1)
EMU_GEMM_S8_DECLARE(1, 0)
EMU_GEMM_S8_DECLARE(1, 1)
EMU_GEMM_S8_DECLARE(2, 0)
EMU_GEMM_S8_DECLARE(2, 1)

}  // namespace emu
