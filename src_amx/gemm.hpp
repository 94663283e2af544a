// Entry points of the tile GEMMs, one per (element type, tile implementation). The emulated
// ones (gemm_emulated.cpp) are built everywhere; the AMX ones (gemm_amx.cpp, compiled with
// -mamx-tile -mamx-int8 -mamx-bf16) only where the compiler supports AMX, which the build
// announces with EMULINALG_AMX_COMPILED. Call the AMX ones only after
// tile_config.hpp's status(true).available.
//
// All: C (m x n) = A (m x k) B (k x n), contiguous row-major; threads <= 0 means OpenMP's
// default (OMP_NUM_THREADS). Return false only if the emulation's shape checks failed.
// gemm_s8s8s32_*: int8 x int8 -> int32, exact for k <= kMaxKS8 (kernel.hpp).
// gemm_s8_mod_tiles_*: Scheme II's int8 GEMM on packed panels, reduced modulo m into int8
// (kc > 0: K tiles per chunk for this call, in the place of the blocking's).
// gemm_bf16bf16f32_*: bf16 (uint16 bit patterns) x bf16 -> fp32 (TDPBF16PS rounding).
// gemm_bf16_slices_*: slice products (kernel.hpp): c is float* (fused: all pairs in FP32
// tiles) or, with widen, double* (each pair's FP32 chunk sums added in FP64);
// gemm_bf16_slice_tiles_*: the same on slices packed already (TileSources of pack.hpp).
#pragma once

#include <cstdint>

namespace emulinalg::amx {

// Whether this build has the AMX kernels (gemm_amx.cpp; EMULINALG_AMX_COMPILED is set for the
// whole module): the argument of tile_config.hpp's status().
#ifdef EMULINALG_AMX_COMPILED
constexpr bool kAmxCompiled = true;
#else
constexpr bool kAmxCompiled = false;
#endif

struct TileSource;

bool gemm_s8s8s32_emulated(const std::int8_t* a, const std::int8_t* b, std::int32_t* c,
                           std::int64_t m, std::int64_t n, std::int64_t k, int threads);
bool gemm_bf16bf16f32_emulated(const std::uint16_t* a, const std::uint16_t* b, float* c,
                               std::int64_t m, std::int64_t n, std::int64_t k, int threads);

bool gemm_s8_mod_tiles_emulated(const TileSource& a, const TileSource& b, int modulus,
                                std::int8_t* out, std::int64_t ldo, std::int64_t m,
                                std::int64_t n, std::int64_t ktiles, int threads,
                                std::int64_t kc = 0);
bool gemm_bf16_slices_emulated(const std::uint16_t* a, int na, const std::uint16_t* b, int nb,
                               const std::int32_t* pairs, int count, bool widen, void* c,
                               std::int64_t m, std::int64_t n, std::int64_t k, int threads);
bool gemm_bf16_slice_tiles_emulated(const TileSource* sa, const TileSource* sb,
                                    const std::int32_t* pairs, int count, bool widen, void* c,
                                    std::int64_t m, std::int64_t n, std::int64_t ktiles,
                                    int threads);

#ifdef EMULINALG_AMX_COMPILED
bool gemm_s8s8s32_amx(const std::int8_t* a, const std::int8_t* b, std::int32_t* c,
                      std::int64_t m, std::int64_t n, std::int64_t k, int threads);
bool gemm_bf16bf16f32_amx(const std::uint16_t* a, const std::uint16_t* b, float* c,
                          std::int64_t m, std::int64_t n, std::int64_t k, int threads);
bool gemm_s8_mod_tiles_amx(const TileSource& a, const TileSource& b, int modulus,
                           std::int8_t* out, std::int64_t ldo, std::int64_t m, std::int64_t n,
                           std::int64_t ktiles, int threads, std::int64_t kc = 0);
bool gemm_bf16_slices_amx(const std::uint16_t* a, int na, const std::uint16_t* b, int nb,
                          const std::int32_t* pairs, int count, bool widen, void* c,
                          std::int64_t m, std::int64_t n, std::int64_t k, int threads);
bool gemm_bf16_slice_tiles_amx(const TileSource* sa, const TileSource* sb,
                               const std::int32_t* pairs, int count, bool widen, void* c,
                               std::int64_t m, std::int64_t n, std::int64_t ktiles, int threads);
#endif

}  // namespace emulinalg::amx
