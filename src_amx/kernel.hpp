// The tile GEMM, written once as a template over
//   Traits: the element type and tile dot product (Int8Traits: TDPBSSD, int8 -> int32;
//           Bf16Traits: TDPBF16PS, bf16 -> fp32), and
//   Ops:    the tile operations (AmxTileOps: the real instructions; EmulatedTileOps: a scalar
//           model of them),
// so that the emulated instantiation, which runs everywhere, exercises exactly the packing,
// padding, blocking and indexing of the AMX one.
//
// gemm<Traits, Ops>(a, b, c, m, n, k, threads): C (m x n) = A (m x k) B (k x n), all
// row-major and contiguous. Steps: pack A and B (pack.hpp, B in VNNI layout, once per call);
// pad m and n to the 32 x 32 register block (a padded C buffer unless both are multiples of
// 32); parallel loop over m_block x n_block tasks (blocking.hpp), each configuring its thread's
// tiles once; copy the valid part of C out.
//
// Exactness (INT8): TDPBSSD accumulates in int32 modulo 2^32, so C is exact when every partial
// sum stays in int32. For int8 inputs |a b| <= 128 * 128 = 2^14, so k <= kMaxKS8 = 2^17 - 1
// guarantees |C| <= (2^17 - 1) 2^14 < 2^31; callers block K beyond that (backends/amx.py).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blocking.hpp"
#include "pack.hpp"
#include "tile_config.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace emulinalg::amx {

constexpr std::int64_t kMaxKS8 = (std::int64_t(1) << 17) - 1;

struct Int8Traits {
    using In = std::int8_t;
    using Acc = std::int32_t;
    template <int C, int A, int B, class Ops>
    static void dot(Ops& ops) {
        ops.template dpbssd<C, A, B>();
    }
};

struct Bf16Traits {
    using In = std::uint16_t;  // bf16 bit patterns
    using Acc = float;
    template <int C, int A, int B, class Ops>
    static void dot(Ops& ops) {
        ops.template dpbf16ps<C, A, B>();
    }
};

// Tile registers of the 2 x 2 block: C_ij in tmm(2i+j), A_i in tmm(4+i), B_j in tmm(6+j).
enum : int { kC00 = 0, kC01 = 1, kC10 = 2, kC11 = 3, kA0 = 4, kA1 = 5, kB0 = 6, kB1 = 7 };

// C[32 x 32] (+)= A[32 x K block] B[K block x 32] for one register block. `c` points at the
// block's top-left entry in a C buffer with row stride ldc elements; `first` starts the sums
// from zero instead of reloading the previous K block's partial sums.
template <class Traits, class Ops>
inline void register_block(Ops& ops, const Panel& pa, const Panel& pb, std::int64_t ib,
                           std::int64_t jb, std::int64_t kt0, std::int64_t kt1,
                           typename Traits::Acc* c, std::int64_t ldc, bool first) {
    using Acc = typename Traits::Acc;
    const std::int64_t stride = ldc * static_cast<std::int64_t>(sizeof(Acc));
    Acc* c10 = c + 16 * ldc;
    if (first) {
        ops.template zero<kC00>();
        ops.template zero<kC01>();
        ops.template zero<kC10>();
        ops.template zero<kC11>();
    } else {
        ops.template load<kC00>(c, stride);
        ops.template load<kC01>(c + 16, stride);
        ops.template load<kC10>(c10, stride);
        ops.template load<kC11>(c10 + 16, stride);
    }
    for (std::int64_t kt = kt0; kt < kt1; ++kt) {
        // Interleaved so each dot product's operands were loaded one step earlier.
        ops.template load<kA0>(pa.tile(ib, kt), kTileBytes);
        ops.template load<kB0>(pb.tile(jb, kt), kTileBytes);
        Traits::template dot<kC00, kA0, kB0>(ops);
        ops.template load<kB1>(pb.tile(jb + 1, kt), kTileBytes);
        Traits::template dot<kC01, kA0, kB1>(ops);
        ops.template load<kA1>(pa.tile(ib + 1, kt), kTileBytes);
        Traits::template dot<kC10, kA1, kB0>(ops);
        Traits::template dot<kC11, kA1, kB1>(ops);
    }
    ops.template store<kC00>(c, stride);
    ops.template store<kC01>(c + 16, stride);
    ops.template store<kC10>(c10, stride);
    ops.template store<kC11>(c10 + 16, stride);
}

// C (mp x np, row stride ldc) = packed A x packed B; mp, np multiples of 32. Returns ops.ok()
// of every thread (false only for the emulation's shape checks).
template <class Traits, class Ops>
bool gemm_packed(const Panel& pa, const Panel& pb, typename Traits::Acc* c, std::int64_t ldc,
                 std::int64_t mp, std::int64_t np, int threads) {
    const Blocking bl = choose_blocking(mp, np, threads);
    const std::int64_t task_rows = ceil_div(mp, bl.m_block);
    const std::int64_t task_cols = ceil_div(np, bl.n_block);
    const std::int64_t tasks = task_rows * task_cols;
    const std::int64_t ktiles = pa.ktiles;
    const TileConfig cfg = full_tile_config();
    bool all_ok = true;
#pragma omp parallel num_threads(threads) reduction(&& : all_ok)
    {
        Ops ops;  // per thread: its own tile configuration (and, emulated, its own tiles)
        ops.configure(cfg);
#pragma omp for schedule(dynamic, 1)
        for (std::int64_t t = 0; t < tasks; ++t) {
            const std::int64_t i0 = (t / task_cols) * bl.m_block;
            const std::int64_t j0 = (t % task_cols) * bl.n_block;
            const std::int64_t i1 = std::min(mp, i0 + bl.m_block);
            const std::int64_t j1 = std::min(np, j0 + bl.n_block);
            for (std::int64_t kt0 = 0; kt0 < ktiles; kt0 += bl.k_tiles) {
                const std::int64_t kt1 = std::min(ktiles, kt0 + bl.k_tiles);
                for (std::int64_t i = i0; i < i1; i += kRegRows) {
                    for (std::int64_t j = j0; j < j1; j += kRegCols) {
                        register_block<Traits>(ops, pa, pb, i / 16, j / 16, kt0, kt1,
                                               c + i * ldc + j, ldc, kt0 == 0);
                    }
                }
            }
        }
        all_ok = ops.ok();
        ops.release();
    }
    return all_ok;
}

inline int resolve_threads(int threads) {
#ifdef _OPENMP
    return threads > 0 ? threads : omp_get_max_threads();
#else
    (void)threads;
    return 1;
#endif
}

// C (m x n) = A (m x k) B (k x n), contiguous row-major. Returns false if the emulation's shape
// checks failed (a bug in this file, never expected).
template <class Traits, class Ops>
bool gemm(const typename Traits::In* a, const typename Traits::In* b, typename Traits::Acc* c,
          std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    using Acc = typename Traits::Acc;
    threads = resolve_threads(threads);
    if (m == 0 || n == 0) return true;
    if (k == 0) {
        std::fill(c, c + m * n, Acc(0));
        return true;
    }
    const std::int64_t mp = ceil_div(m, kRegRows) * kRegRows;
    const std::int64_t np = ceil_div(n, kRegCols) * kRegCols;
    const Panel pa = pack_a(a, m, k, k, mp / 16, threads);
    const Panel pb = pack_b_vnni(b, k, n, n, np / 16, threads);
    if (mp == m && np == n) return gemm_packed<Traits, Ops>(pa, pb, c, n, mp, np, threads);
    std::vector<Acc> padded(static_cast<std::size_t>(mp * np));
    const bool ok = gemm_packed<Traits, Ops>(pa, pb, padded.data(), np, mp, np, threads);
    for (std::int64_t i = 0; i < m; ++i) {
        std::memcpy(c + i * n, padded.data() + i * np, n * sizeof(Acc));
    }
    return ok;
}

}  // namespace emulinalg::amx
