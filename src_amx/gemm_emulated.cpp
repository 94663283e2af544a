// The tile GEMMs on the scalar tile model (tile_ops_emulated.hpp): no AMX instruction, runs on
// any CPU. Slow (a few GMAC/s); it exists to test the kernel's packing and blocking logic.
#include "gemm.hpp"
#include "kernel.hpp"
#include "tile_ops_emulated.hpp"

namespace emulinalg::amx {

bool gemm_s8s8s32_emulated(const std::int8_t* a, const std::int8_t* b, std::int32_t* c,
                           std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    return gemm<Int8Traits, EmulatedTileOps>(a, b, c, m, n, k, threads);
}

bool gemm_bf16bf16f32_emulated(const std::uint16_t* a, const std::uint16_t* b, float* c,
                               std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    return gemm<Bf16Traits, EmulatedTileOps>(a, b, c, m, n, k, threads);
}

bool gemm_s8_mod_tiles_emulated(const TileSource& a, const TileSource& b, int modulus,
                                std::int8_t* out, std::int64_t ldo, std::int64_t m,
                                std::int64_t n, std::int64_t ktiles, int threads,
                                std::int64_t kc) {
    return gemm_s8_mod_tiles<EmulatedTileOps>(a, b, modulus, out, ldo, m, n, ktiles, threads,
                                              kc);
}

bool gemm_bf16_slices_emulated(const std::uint16_t* a, int na, const std::uint16_t* b, int nb,
                               const std::int32_t* pairs, int count, bool widen, void* c,
                               std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    return gemm_bf16_slices<EmulatedTileOps>(a, na, b, nb, pairs, count, widen, c, m, n, k,
                                             threads);
}

bool gemm_bf16_slice_tiles_emulated(const TileSource* sa, const TileSource* sb,
                                    const std::int32_t* pairs, int count, bool widen, void* c,
                                    std::int64_t m, std::int64_t n, std::int64_t ktiles,
                                    int threads) {
    return gemm_bf16_slice_tiles<EmulatedTileOps>(sa, sb, pairs, count, widen, c, m, n, ktiles,
                                                  threads);
}

}  // namespace emulinalg::amx
