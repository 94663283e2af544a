// The tile GEMMs on real AMX tiles. The only translation unit compiled with
// -mamx-tile -mamx-int8 -mamx-bf16 (CMakeLists.txt), so no other code can contain a tile
// instruction; these functions run only after status(true).available (amx_module.cpp).
#include "gemm.hpp"
#include "kernel.hpp"
#include "tile_ops_amx.hpp"

namespace emulinalg::amx {

bool gemm_s8s8s32_amx(const std::int8_t* a, const std::int8_t* b, std::int32_t* c,
                      std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    return gemm<Int8Traits, AmxTileOps>(a, b, c, m, n, k, threads);
}

bool gemm_bf16bf16f32_amx(const std::uint16_t* a, const std::uint16_t* b, float* c,
                          std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    return gemm<Bf16Traits, AmxTileOps>(a, b, c, m, n, k, threads);
}

bool gemm_s8_mod_tiles_amx(const TileSource& a, const TileSource& b, int modulus,
                           std::int8_t* out, std::int64_t ldo, std::int64_t m, std::int64_t n,
                           std::int64_t ktiles, int threads, std::int64_t kc) {
    return gemm_s8_mod_tiles<AmxTileOps>(a, b, modulus, out, ldo, m, n, ktiles, threads, kc);
}

bool gemm_bf16_slices_amx(const std::uint16_t* a, int na, const std::uint16_t* b, int nb,
                          const std::int32_t* pairs, int count, bool widen, void* c,
                          std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    return gemm_bf16_slices<AmxTileOps>(a, na, b, nb, pairs, count, widen, c, m, n, k,
                                        threads);
}

bool gemm_bf16_slice_tiles_amx(const TileSource* sa, const TileSource* sb,
                               const std::int32_t* pairs, int count, bool widen, void* c,
                               std::int64_t m, std::int64_t n, std::int64_t ktiles, int threads) {
    return gemm_bf16_slice_tiles<AmxTileOps>(sa, sb, pairs, count, widen, c, m, n, ktiles,
                                             threads);
}

}  // namespace emulinalg::amx
