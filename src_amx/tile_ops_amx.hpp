// The TileOps interface (see tile_ops_emulated.hpp) on real AMX tiles, through the compiler
// intrinsics _tile_loadconfig, _tile_release, _tile_zero, _tile_loadd, _tile_stream_loadd,
// _tile_stored, _tile_dpbssd and _tile_dpbf16ps (<immintrin.h>; GCC >= 11, Clang >= 12).
//
// Include only from translation units compiled with -mamx-tile -mamx-int8 -mamx-bf16, and run
// only after tile_config.hpp's status() said AMX is available (CPUID, XCR0, Linux permission):
// any tile instruction elsewhere raises SIGILL.
//
// The intrinsics take tile numbers as literal constants (GCC pastes them into the assembler
// text), so the template parameters are mapped to literals with `if constexpr` below.
#pragma once

#if !defined(__AMX_TILE__) || !defined(__AMX_INT8__) || !defined(__AMX_BF16__)
#error "tile_ops_amx.hpp needs -mamx-tile -mamx-int8 -mamx-bf16"
#endif

#include <immintrin.h>

#include <cstdint>

#include "tile_config.hpp"
#include "widen.hpp"

// `if constexpr` chain turning template parameter T (0..7) into the literal the macro needs.
#define EMULINALG_TILE_DISPATCH(T, STMT)             \
    if constexpr ((T) == 0) { STMT(0); }             \
    else if constexpr ((T) == 1) { STMT(1); }        \
    else if constexpr ((T) == 2) { STMT(2); }        \
    else if constexpr ((T) == 3) { STMT(3); }        \
    else if constexpr ((T) == 4) { STMT(4); }        \
    else if constexpr ((T) == 5) { STMT(5); }        \
    else if constexpr ((T) == 6) { STMT(6); }        \
    else { static_assert((T) == 7, "tile index must be 0..7"); STMT(7); }

namespace emulinalg::amx {

class AmxTileOps {
public:
    void configure(const TileConfig& cfg) {
        // The tile loads' inline assembly declares no memory input: make the operands packed
        // before this point visible to them.
        __asm__ volatile("" ::: "memory");
        _tile_loadconfig(&cfg);
    }
    void release() { _tile_release(); }
    bool ok() const { return true; }
    // GCC's tile-load asm declares no memory input: ordinary stores the next loads must see
    // (a scratch block just filled) need this compiler barrier in between. (The tile-store asm
    // clobbers memory, so reads after a store are ordered already.)
    // int8 out = int32 scratch block mod m, symmetric (widen.hpp)
    static void mod_reduce(const std::int32_t* s, std::int64_t rows, std::int64_t cols, int m,
                           std::int8_t* out, std::int64_t ldo) {
        mod_reduce_avx512(s, rows, cols, m, out, ldo);
    }
    // C (float64) += a 32 x 32 FP32 scratch block (widen.hpp)
    static void widen_add(double* c, std::int64_t ldc, const float* s, std::int64_t rows,
                          std::int64_t cols, bool assign) {
        widen_add_avx512(c, ldc, s, rows, cols, assign);
    }
    void fence() { __asm__ volatile("" ::: "memory"); }

    template <int T>
    void zero() {
#define EMULINALG_ZERO(t) _tile_zero(t)
        EMULINALG_TILE_DISPATCH(T, EMULINALG_ZERO)
#undef EMULINALG_ZERO
    }

    template <int T>
    void load(const void* base, std::int64_t stride) {
#define EMULINALG_LOAD(t) _tile_loadd(t, base, stride)
        EMULINALG_TILE_DISPATCH(T, EMULINALG_LOAD)
#undef EMULINALG_LOAD
    }

    // TILELOADDT1: the same load with a hint that the data is not reused from L1 (for the
    // streamed operand, so that it does not evict the L1-resident one).
    template <int T>
    void load_stream(const void* base, std::int64_t stride) {
#define EMULINALG_LOADT1(t) _tile_stream_loadd(t, base, stride)
        EMULINALG_TILE_DISPATCH(T, EMULINALG_LOADT1)
#undef EMULINALG_LOADT1
    }

    template <int T>
    void store(void* base, std::int64_t stride) const {
#define EMULINALG_STORE(t) _tile_stored(t, base, stride)
        EMULINALG_TILE_DISPATCH(T, EMULINALG_STORE)
#undef EMULINALG_STORE
    }

    // The kernels use the 2x2 register block C{0,1,2,3} += A{4,5} x B{6,7} only.
    template <int C, int A, int B>
    void dpbssd() {
        if constexpr (C == 0 && A == 4 && B == 6) { _tile_dpbssd(0, 4, 6); }
        else if constexpr (C == 1 && A == 4 && B == 7) { _tile_dpbssd(1, 4, 7); }
        else if constexpr (C == 2 && A == 5 && B == 6) { _tile_dpbssd(2, 5, 6); }
        else {
            static_assert(C == 3 && A == 5 && B == 7, "unsupported tile triple");
            _tile_dpbssd(3, 5, 7);
        }
    }

    template <int C, int A, int B>
    void dpbf16ps() {
        if constexpr (C == 0 && A == 4 && B == 6) { _tile_dpbf16ps(0, 4, 6); }
        else if constexpr (C == 1 && A == 4 && B == 7) { _tile_dpbf16ps(1, 4, 7); }
        else if constexpr (C == 2 && A == 5 && B == 6) { _tile_dpbf16ps(2, 5, 6); }
        else {
            static_assert(C == 3 && A == 5 && B == 7, "unsupported tile triple");
            _tile_dpbf16ps(3, 5, 7);
        }
    }
};

}  // namespace emulinalg::amx

#undef EMULINALG_TILE_DISPATCH
