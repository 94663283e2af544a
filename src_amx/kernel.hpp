// The tile GEMM, written once as a template over
//   Traits: the element type and tile dot product (Int8Traits: TDPBSSD, int8 -> int32;
//           Bf16Traits: TDPBF16PS, bf16 -> fp32), and
//   Ops:    the tile operations (AmxTileOps: the real instructions; EmulatedTileOps: a scalar
//           model of them),
// so that the emulated instantiation, which runs everywhere, exercises exactly the packing,
// padding, blocking, partitioning and indexing of the AMX one.
//
// gemm<Traits, Ops>(a, b, c, m, n, k, threads): C (m x n) = A (m x k) B (k x n), all
// row-major and contiguous. Steps: pack B into VNNI tiles and A into tiles (pack.hpp, in
// parallel, once per call; A is tile-loaded straight from the input instead when pack_a=0 and
// no padding is needed); resolve the blocking (blocking.hpp: the loop nest and its knobs);
// start one team in which each thread configures its tiles once and computes its region of C
// (static 2-D grid) or its mc x nc tasks (dynamic). Register blocks that stick out of C (m or n
// not multiples of 32) go through a 32 x 32 scratch block, so C needs no padded copy.
//
// Exactness (INT8): TDPBSSD accumulates in int32 modulo 2^32, so C is exact when every partial
// sum stays in int32. For int8 inputs |a b| <= 128 * 128 = 2^14, so k <= kMaxKS8 = 2^17 - 1
// guarantees |C| <= (2^17 - 1) 2^14 < 2^31; callers block K beyond that
// (emulinalg/backends/amx.py).
// BF16: every C entry accumulates its K tiles in ascending order from zero (blocking.hpp), so
// the result is independent of the blocking and threads, and equal to the tile model's.
//
// Several slice products in one pass (gemm_bf16_slices, the BF16 schedules of Cui & Liu,
// arXiv:2609.04663): A and B come as stacks of BF16 slices and a list of pairs
// (i, j). Fused: every pair's A_i B_j goes into the same FP32 tiles, per K tile in the list's
// order (= one GEMM over the pairs' slices interleaved along K, tile by tile). Widened: each
// pair's FP32 partial sum over kWidenTiles K tiles is stored and added to an FP64 C, in the
// order (K chunk, pair); with the fixed-point slices of emulinalg.algorithm.bf16 each such FP32
// sum is exact (at most 1024 products of at most 2**14 units), so the FP64 result is blocking-
// and thread-independent and equals the generic float64 code's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "blocking.hpp"
#include "pack.hpp"
#include "tile_config.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace emulinalg::amx {

constexpr std::int64_t kMaxKS8 = (std::int64_t(1) << 17) - 1;

// K tiles (32 bf16 each) per FP32 partial sum of a widened slice product: 1024 products of
// 8-bit signed digits (|d| <= 128, so |d d'| <= 2**14) sum to at most 2**24 units, exact in FP32.
constexpr std::int64_t kWidenTiles = 32;

// The slice products of one gemm_bf16_slices call.
struct SliceProducts {
    const TileSource* a = nullptr;  // A's slices (packed panels)
    const TileSource* b = nullptr;  // B's slices
    const std::int32_t* pairs = nullptr;   // count pairs (i, j): A slice i times B slice j
    int count = 0;  // C's type picks the mode: Acc (fused) or double (widened, see above)
};

// Scheme II's epilogue (gemm_s8_mod_tiles): every C block's int32 sum over all of K, reduced
// modulo `modulus` into int8 `out` (row stride ldo) instead of stored; C itself only carries
// the partial sums between K chunks.
struct ModEpilogue {
    std::int8_t* out = nullptr;
    std::int64_t ldo = 0;
    int modulus = 0;
};

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

// Software prefetch (PREFETCHT0 / PREFETCHT1: x86-64 baseline, harmless on the tile model).
constexpr int kToL1 = 3, kToL2 = 2;  // __builtin_prefetch locality of prefetcht0 / prefetcht1

// The 16 rows of a tile into cache.
template <int Locality>
inline void prefetch_tile(const std::uint8_t* t, std::int64_t row_stride) {
    for (int r = 0; r < kTileRows; ++r) __builtin_prefetch(t + r * row_stride, 0, Locality);
}

// The K steps kt0..kt1-1 of one register block: C{00,01,10,11} += A{0,1} x B{0,1}, tiles
// (ia, ia + 1) of A and (jb, jb + 1) of B. Sched orders the 4 loads and 4 dot products of a step
// (the dot products write different C tiles, so the order never changes a result). Stream: 0,
// or which operand (1 = A, 2 = B) is loaded with TILELOADDT1 (not kept in L1). pf (or null):
// the operand whose tiles (pf_block, pf_block + 1) from kt0 on are prefetched into L1, one K
// step per K step (the next register block's streamed tiles).
// (One run: K tiles [kt0, kt1) lie kt_stride apart in every operand; k_steps splits.)
template <class Traits, int Sched, int Stream, class Ops>
inline void k_run(Ops& ops, const TileSource& a, const TileSource& b, std::int64_t ia,
                  std::int64_t jb, std::int64_t kt0, std::int64_t kt1, const TileSource* pf,
                  std::int64_t pf_block) {
    const std::int64_t sa = a.row_stride, sb = b.row_stride;
    const std::uint8_t* a0 = a.tile(ia, kt0);
    const std::uint8_t* a1 = a.tile(ia + 1, kt0);
    const std::uint8_t* b0 = b.tile(jb, kt0);
    const std::uint8_t* b1 = b.tile(jb + 1, kt0);
    const std::uint8_t* p0 = pf ? pf->tile(pf_block, kt0) : nullptr;
    const std::uint8_t* p1 = pf ? pf->tile(pf_block + 1, kt0) : nullptr;
    auto load_a = [&](auto tile, const std::uint8_t* src) {
        constexpr int T = decltype(tile)::value;
        if constexpr (Stream == 1) ops.template load_stream<T>(src, sa);
        else ops.template load<T>(src, sa);
    };
    auto load_b = [&](auto tile, const std::uint8_t* src) {
        constexpr int T = decltype(tile)::value;
        if constexpr (Stream == 2) ops.template load_stream<T>(src, sb);
        else ops.template load<T>(src, sb);
    };
    using TA0 = std::integral_constant<int, kA0>;
    using TA1 = std::integral_constant<int, kA1>;
    using TB0 = std::integral_constant<int, kB0>;
    using TB1 = std::integral_constant<int, kB1>;
    for (std::int64_t kt = kt0; kt < kt1; ++kt) {
        if constexpr (Sched == 0) {  // each dot product's operands loaded one step earlier
            load_a(TA0{}, a0);
            load_b(TB0{}, b0);
            Traits::template dot<kC00, kA0, kB0>(ops);
            load_b(TB1{}, b1);
            Traits::template dot<kC01, kA0, kB1>(ops);
            load_a(TA1{}, a1);
            Traits::template dot<kC10, kA1, kB0>(ops);
            Traits::template dot<kC11, kA1, kB1>(ops);
        } else if constexpr (Sched == 1) {  // all loads, then all dot products
            load_a(TA0{}, a0);
            load_a(TA1{}, a1);
            load_b(TB0{}, b0);
            load_b(TB1{}, b1);
            Traits::template dot<kC00, kA0, kB0>(ops);
            Traits::template dot<kC01, kA0, kB1>(ops);
            Traits::template dot<kC10, kA1, kB0>(ops);
            Traits::template dot<kC11, kA1, kB1>(ops);
        } else if constexpr (Sched == 3) {  // software pipelined: the next step's tiles
            // loaded as soon as this step's last reader of their register has issued
            if (kt == kt0) {
                load_a(TA0{}, a0);
                load_b(TB0{}, b0);
                load_a(TA1{}, a1);
                load_b(TB1{}, b1);
            }
            const bool more = kt + 1 < kt1;
            Traits::template dot<kC00, kA0, kB0>(ops);
            Traits::template dot<kC01, kA0, kB1>(ops);
            if (more) load_a(TA0{}, a0 + a.kt_stride);
            Traits::template dot<kC10, kA1, kB0>(ops);
            if (more) load_b(TB0{}, b0 + b.kt_stride);
            Traits::template dot<kC11, kA1, kB1>(ops);
            if (more) {
                load_a(TA1{}, a1 + a.kt_stride);
                load_b(TB1{}, b1 + b.kt_stride);
            }
        } else {  // schedule 0 with A and B swapped (B-major)
            load_b(TB0{}, b0);
            load_a(TA0{}, a0);
            Traits::template dot<kC00, kA0, kB0>(ops);
            load_a(TA1{}, a1);
            Traits::template dot<kC10, kA1, kB0>(ops);
            load_b(TB1{}, b1);
            Traits::template dot<kC01, kA0, kB1>(ops);
            Traits::template dot<kC11, kA1, kB1>(ops);
        }
        if (p0 != nullptr) {
            prefetch_tile<kToL1>(p0, pf->row_stride);
            prefetch_tile<kToL1>(p1, pf->row_stride);
            p0 += pf->kt_stride;
            p1 += pf->kt_stride;
        }
        a0 += a.kt_stride;
        a1 += a.kt_stride;
        b0 += b.kt_stride;
        b1 += b.kt_stride;
    }
}

template <class Traits, int Sched, int Stream, class Ops>
inline void k_steps(Ops& ops, const TileSource& a, const TileSource& b, std::int64_t ia,
                    std::int64_t jb, std::int64_t kt0, std::int64_t kt1, const TileSource* pf,
                    std::int64_t pf_block) {
    for (std::int64_t kt = kt0; kt < kt1;) {  // runs that end where a chunk of a layout ends
        std::int64_t n = b.run(kt, a.run(kt, kt1 - kt));
        if (pf != nullptr) n = pf->run(kt, n);
        k_run<Traits, Sched, Stream>(ops, a, b, ia, jb, kt, kt + n, pf, pf_block);
        kt += n;
    }
}

template <class Traits, int Stream, class Ops>
inline void k_steps_sched(int sched, Ops& ops, const TileSource& a, const TileSource& b,
                          std::int64_t ia, std::int64_t jb, std::int64_t kt0, std::int64_t kt1,
                          const TileSource* pf, std::int64_t pf_block) {
    switch (sched) {
        case 0: k_steps<Traits, 0, Stream>(ops, a, b, ia, jb, kt0, kt1, pf, pf_block); break;
        case 1: k_steps<Traits, 1, Stream>(ops, a, b, ia, jb, kt0, kt1, pf, pf_block); break;
        case 3: k_steps<Traits, 3, Stream>(ops, a, b, ia, jb, kt0, kt1, pf, pf_block); break;
        default: k_steps<Traits, 2, Stream>(ops, a, b, ia, jb, kt0, kt1, pf, pf_block); break;
    }
}

// Fused slice products over K tiles [kt0, kt1): per K tile, every pair's 4 dot products into
// the same C tiles, in the list's order; a slice's tiles are reloaded only when the pair's
// slice changes (consecutive pairs sharing A_i or B_j reuse the loaded tiles).
template <class Traits, class Ops>
inline void k_steps_products(Ops& ops, const SliceProducts& sp, std::int64_t ia,
                             std::int64_t jb, std::int64_t kt0, std::int64_t kt1) {
    for (std::int64_t kt = kt0; kt < kt1; ++kt) {
        int loaded_a = -1, loaded_b = -1;
        for (int q = 0; q < sp.count; ++q) {
            const int si = sp.pairs[2 * q], sj = sp.pairs[2 * q + 1];
            if (si != loaded_a) {
                const TileSource& a = sp.a[si];
                ops.template load<kA0>(a.tile(ia, kt), a.row_stride);
                ops.template load<kA1>(a.tile(ia + 1, kt), a.row_stride);
                loaded_a = si;
            }
            if (sj != loaded_b) {
                const TileSource& b = sp.b[sj];
                ops.template load<kB0>(b.tile(jb, kt), b.row_stride);
                ops.template load<kB1>(b.tile(jb + 1, kt), b.row_stride);
                loaded_b = sj;
            }
            Traits::template dot<kC00, kA0, kB0>(ops);
            Traits::template dot<kC01, kA0, kB1>(ops);
            Traits::template dot<kC10, kA1, kB0>(ops);
            Traits::template dot<kC11, kA1, kB1>(ops);
        }
    }
}

// One thread's share of a product: its tile configuration (loaded once, in the constructor)
// and the loop nest of blocking.hpp over rectangles of register blocks.
// Out: C's element type (Acc, or double for widened slice products).
template <class Traits, class Ops, class Out = typename Traits::Acc>
class Worker {
public:
    using Acc = typename Traits::Acc;

    Worker(const TileSource& a, const TileSource& b, Out* c, std::int64_t m, std::int64_t n,
           const Plan& plan, const SliceProducts* sp = nullptr, const ModEpilogue* mod = nullptr)
        : a_(a), b_(b), c_(c), m_(m), n_(n), plan_(plan), sp_(sp), mod_(mod) {
        ops_.configure(full_tile_config());
        if (local_partials(plan, mod != nullptr)) {
            // a C block never holds more register blocks than C itself
            ldl_ = std::min(plan.ncr, plan.cols) * kRegCols;
            const std::int64_t rows = std::min(plan.mcr, plan.rows) * kRegRows;
            local_ = static_cast<Acc*>(
                std::aligned_alloc(64, static_cast<std::size_t>(rows * ldl_) * sizeof(Acc)));
            local_failed_ = local_ == nullptr;
        }
    }
    ~Worker() {
        ops_.release();
        std::free(local_);
    }
    // A mod-epilogue GEMM whose K chunks finish one mc x nc block of C before the next (nest
    // 0) keeps that block's int32 partial sums in a buffer of its own thread (mc x nc, 256 KiB
    // for 256 x 256: it stays in L2), not in an m x n buffer in memory.
    static bool local_partials(const Plan& p, bool mod) {
        return (mod || p.local_c) && p.nest == 0 && p.kc < p.ktiles;
    }
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;
    bool ok() const { return ops_.ok() && !local_failed_; }

    // Register-block rows [r0, r1) x columns [c0, c1) of C, all of K.
    void region(std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
        const Plan& p = plan_;
        if (local_failed_) return;  // no memory for the partial sums: ok() reports it
        for (std::int64_t jc = c0; jc < c1; jc += p.ncr) {
            const std::int64_t jce = std::min(c1, jc + p.ncr);
            if (p.nest == 0) {
                for (std::int64_t ic = r0; ic < r1; ic += p.mcr) {
                    lr0_ = ic;  // the local partial sums' block origin
                    lc0_ = jc;
                    for (std::int64_t pc = 0; pc < p.ktiles; pc += p.kc) {
                        chunk(ic, std::min(r1, ic + p.mcr), jc, jce, pc);
                    }
                }
            } else {
                for (std::int64_t pc = 0; pc < p.ktiles; pc += p.kc) {
                    for (std::int64_t ic = r0; ic < r1; ic += p.mcr) {
                        chunk(ic, std::min(r1, ic + p.mcr), jc, jce, pc);
                    }
                }
            }
        }
    }

private:
    void chunk(std::int64_t ic, std::int64_t ice, std::int64_t jc, std::int64_t jce,
               std::int64_t pc) {
        const std::int64_t pce = std::min(plan_.ktiles, pc + plan_.kc);
        if (plan_.order == 0) {
            chunk<0>(ic, ice, jc, jce, pc, pce);
        } else {
            chunk<1>(ic, ice, jc, jce, pc, pce);
        }
    }

    // One K chunk [pc, pce) of the C block [ic, ice) x [jc, jce). Order 0: per 32-row strip i
    // (its A tiles stay in L1), all j; order 1: per 32-column strip j (B tiles in L1), all i.
    template <int Order>
    void chunk(std::int64_t ic, std::int64_t ice, std::int64_t jc, std::int64_t jce,
               std::int64_t pc, std::int64_t pce) {
        const Plan& p = plan_;
        const bool first = pc == 0;
        // outer strips o in [o0, o1) (L1-resident operand), inner blocks q in [q0, q1)
        const std::int64_t o0 = Order == 0 ? ic : jc, o1 = Order == 0 ? ice : jce;
        const std::int64_t q0 = Order == 0 ? jc : ic, q1 = Order == 0 ? jce : ice;
        const TileSource& outer = Order == 0 ? a_ : b_;  // the operand reused from L1
        const TileSource& inner = Order == 0 ? b_ : a_;  // the operand streamed from L2
        const std::int64_t nq = q1 - q0;
        for (std::int64_t o = o0; o < o1; ++o) {
            // The next strip of the outer operand: the next o of this chunk, else the first
            // of the next chunk, else none (the next block starts cold, as it would anyway).
            std::int64_t next_o = -1, next_k0 = pc, next_k1 = pce;
            if (p.prefetch & 1) {
                if (o + 1 < o1) {
                    next_o = o + 1;
                } else if (pce < p.ktiles) {
                    next_o = o0;
                    next_k0 = pce;
                    next_k1 = std::min(p.ktiles, pce + p.kc);
                }
            }
            const std::int64_t lines = next_o >= 0 ? 2 * kTileRows * (next_k1 - next_k0) : 0;
            for (std::int64_t q = q0; q < q1; ++q) {
                if (lines > 0) {  // this block's share of the next strip, into L2
                    prefetch_lines(outer, 2 * next_o, next_k0, next_k1 - next_k0,
                                   lines * (q - q0) / nq, lines * (q - q0 + 1) / nq);
                }
                const bool pf_next = (p.prefetch & 2) && q + 1 < q1;
                const std::int64_t i = Order == 0 ? o : q, j = Order == 0 ? q : o;
                block(i, j, pc, pce, first, pf_next ? &inner : nullptr, 2 * (q + 1));
            }
        }
    }

    // Lines [l0, l1) of the 2 x nk tiles (blocks blk, blk + 1; K tiles k0..k0+nk-1) into L2.
    static void prefetch_lines(const TileSource& s, std::int64_t blk, std::int64_t k0,
                               std::int64_t nk, std::int64_t l0, std::int64_t l1) {
        const std::int64_t per_block = nk * kTileRows;
        for (std::int64_t l = l0; l < l1; ++l) {
            const std::int64_t bi = l / per_block, rem = l % per_block;
            const std::uint8_t* t = s.tile(blk + bi, k0 + rem / kTileRows);
            __builtin_prefetch(t + (rem % kTileRows) * s.row_stride, 0, kToL2);
        }
    }

    // Register block (i, j) over K tiles [kt0, kt1): C rows 32 i.., columns 32 j...
    void block(std::int64_t i, std::int64_t j, std::int64_t kt0, std::int64_t kt1, bool first,
               const TileSource* pf, std::int64_t pf_block) {
        if constexpr (std::is_same_v<Out, Acc>) {
            acc_block(i, j, kt0, kt1, first, pf, pf_block);
        } else {
            widen_block(i, j, kt0, kt1, first);
        }
    }

    // C (Acc) += the block's products over [kt0, kt1), through the C tiles.
    void acc_block(std::int64_t i, std::int64_t j, std::int64_t kt0, std::int64_t kt1,
                   bool first, const TileSource* pf, std::int64_t pf_block) {
        const std::int64_t row0 = i * kRegRows, col0 = j * kRegCols;
        const std::int64_t rows = std::min<std::int64_t>(kRegRows, m_ - row0);
        const std::int64_t cols = std::min<std::int64_t>(kRegCols, n_ - col0);
        // local partial sums: whole 32 x 32 blocks, edges included (the buffer is padded)
        const bool edge = local_ == nullptr && (rows < kRegRows || cols < kRegCols);
        // no C at all (c_ null): a mod-epilogue GEMM with K in one chunk, whose only chunk
        // never loads or stores C
        const bool own = local_ == nullptr && (edge || c_ == nullptr);
        // the four C tiles: c, c01, c10, c11. Local partial sums: a register block's tiles one
        // after the other (4 KiB, rows 64 bytes apart: each tile load and store one contiguous
        // run), the C block's register blocks row by row.
        Acc *c, *c01, *c10, *c11;
        std::int64_t stride;
        if (local_ != nullptr) {
            constexpr std::int64_t tile = kTileRows * kTileRows;  // int32 / fp32 entries
            c = local_ + ((i - lr0_) * (ldl_ / kRegCols) + (j - lc0_)) * 4 * tile;
            c01 = c + tile, c10 = c + 2 * tile, c11 = c + 3 * tile;
            stride = kTileBytes;
        } else {
            const std::int64_t ldc = own ? kRegCols : n_;
            c = own ? scratch_ : c_ + row0 * n_ + col0;
            c01 = c + 16, c10 = c + 16 * ldc, c11 = c10 + 16;
            stride = ldc * static_cast<std::int64_t>(sizeof(Acc));
        }
        if (first) {
            ops_.template zero<kC00>();
            ops_.template zero<kC01>();
            ops_.template zero<kC10>();
            ops_.template zero<kC11>();
        } else {
            if (edge) {
                scratch_in(row0, col0, rows, cols);
                ops_.fence();  // the tile loads below must see the scratch just written
            }
            ops_.template load<kC00>(c, stride);
            ops_.template load<kC01>(c01, stride);
            ops_.template load<kC10>(c10, stride);
            ops_.template load<kC11>(c11, stride);
        }
        const int sched = plan_.sched;
        if (sp_ != nullptr) {
            k_steps_products<Traits>(ops_, *sp_, 2 * i, 2 * j, kt0, kt1);
        } else if (!plan_.stream) {
            k_steps_sched<Traits, 0>(sched, ops_, a_, b_, 2 * i, 2 * j, kt0, kt1, pf, pf_block);
        } else if (plan_.order == 0) {  // B streams past the L1-resident A strip
            k_steps_sched<Traits, 2>(sched, ops_, a_, b_, 2 * i, 2 * j, kt0, kt1, pf, pf_block);
        } else {
            k_steps_sched<Traits, 1>(sched, ops_, a_, b_, 2 * i, 2 * j, kt0, kt1, pf, pf_block);
        }
        if constexpr (std::is_same_v<Acc, std::int32_t>) {
            if (mod_ != nullptr && kt1 == plan_.ktiles) {  // the block's last K chunk: reduce
                constexpr std::int64_t ss = kRegCols * static_cast<std::int64_t>(sizeof(Acc));
                ops_.template store<kC00>(scratch_, ss);
                ops_.template store<kC01>(scratch_ + 16, ss);
                ops_.template store<kC10>(scratch_ + 16 * kRegCols, ss);
                ops_.template store<kC11>(scratch_ + 16 * kRegCols + 16, ss);
                ops_.fence();  // the vector reads below must see the stores
                Ops::mod_reduce(scratch_, rows, cols, mod_->modulus,
                                mod_->out + row0 * mod_->ldo + col0, mod_->ldo);
                return;
            }
        }
        if (local_ != nullptr && kt1 == plan_.ktiles && mod_ == nullptr) {
            // the block's last K chunk of a GEMM with local partial sums: into C itself
            const bool part = rows < kRegRows || cols < kRegCols;
            Acc* d = part ? scratch_ : c_ + row0 * n_ + col0;
            const std::int64_t ld = part ? kRegCols : n_;
            const std::int64_t s = ld * static_cast<std::int64_t>(sizeof(Acc));
            ops_.template store<kC00>(d, s);
            ops_.template store<kC01>(d + 16, s);
            ops_.template store<kC10>(d + 16 * ld, s);
            ops_.template store<kC11>(d + 16 * ld + 16, s);
            if (part) {
                ops_.fence();  // the copy below must see the stores
                scratch_out(row0, col0, rows, cols);
            }
            return;
        }
        ops_.template store<kC00>(c, stride);
        ops_.template store<kC01>(c01, stride);
        ops_.template store<kC10>(c10, stride);
        ops_.template store<kC11>(c11, stride);
        if (edge) scratch_out(row0, col0, rows, cols);
    }

    // Widened slice products: per K chunk of kWidenTiles (chunks start at multiples of it: the
    // plan's kc is one) and per pair, the FP32 tile sum is stored, widened and added to C. With
    // plan.widen = 1 a stored block is added one row per K step of the next block's dot
    // products (two scratch blocks), so the vector work overlaps the tile unit's; C still gets
    // the blocks in the same order.
    void widen_block(std::int64_t i, std::int64_t j, std::int64_t kt0, std::int64_t kt1,
                     bool first) {
        const std::int64_t row0 = i * kRegRows, col0 = j * kRegCols;
        const std::int64_t rows = std::min<std::int64_t>(kRegRows, m_ - row0);
        const std::int64_t cols = std::min<std::int64_t>(kRegCols, n_ - col0);
        constexpr std::int64_t stride = kRegCols * static_cast<std::int64_t>(sizeof(Acc));
        Out* c = c_ + row0 * n_ + col0;
        const bool overlap = plan_.widen == 1;
        int pending = -1;     // scratch block still to add (0 or 1), -1: none
        bool pending_assign = false;
        std::int64_t done = 0;  // its rows added so far
        auto add_rows = [&](std::int64_t upto) {  // the pending block's rows [done, upto)
            upto = std::min(upto, rows);
            if (pending < 0 || upto <= done) return;
            Ops::widen_add(c + done * n_, n_, scratch2_[pending] + done * kRegCols, upto - done,
                           cols, pending_assign);
            done = upto;
        };
        int next = 0;
        for (std::int64_t s0 = kt0; s0 < kt1; s0 += kWidenTiles) {
            const std::int64_t s1 = std::min(kt1, s0 + kWidenTiles);
            for (int q = 0; q < sp_->count; ++q) {
                ops_.template zero<kC00>();
                ops_.template zero<kC01>();
                ops_.template zero<kC10>();
                ops_.template zero<kC11>();
                const TileSource& a = sp_->a[sp_->pairs[2 * q]];
                const TileSource& b = sp_->b[sp_->pairs[2 * q + 1]];
                if (overlap && pending >= 0) {
                    for (std::int64_t kt = s0; kt < s1; ++kt) {  // one K step, one pending row
                        k_steps<Traits, 0, 0>(ops_, a, b, 2 * i, 2 * j, kt, kt + 1, nullptr, 0);
                        add_rows(done + 1);
                    }
                } else {
                    k_steps_sched<Traits, 0>(plan_.sched, ops_, a, b, 2 * i, 2 * j, s0, s1,
                                             nullptr, 0);
                }
                add_rows(rows);  // what is left of the previous block, before this one
                Acc* sc = scratch2_[next];
                ops_.template store<kC00>(sc, stride);
                ops_.template store<kC01>(sc + 16, stride);
                ops_.template store<kC10>(sc + 16 * kRegCols, stride);
                ops_.template store<kC11>(sc + 16 * kRegCols + 16, stride);
                ops_.fence();  // the vector reads of the additions must see the stores
                // 0.0 + x for the very first block: the generic code's C = 0; C += x
                pending = next;
                pending_assign = first && s0 == kt0 && q == 0;
                done = 0;
                next ^= 1;
                if (!overlap) add_rows(rows);
            }
        }
        add_rows(rows);
    }

    void scratch_in(std::int64_t row0, std::int64_t col0, std::int64_t rows, std::int64_t cols) {
        std::fill(scratch_, scratch_ + kRegRows * kRegCols, Acc(0));
        for (std::int64_t r = 0; r < rows; ++r) {
            std::memcpy(scratch_ + r * kRegCols, c_ + (row0 + r) * n_ + col0, cols * sizeof(Acc));
        }
    }
    void scratch_out(std::int64_t row0, std::int64_t col0, std::int64_t rows, std::int64_t cols) {
        for (std::int64_t r = 0; r < rows; ++r) {
            std::memcpy(c_ + (row0 + r) * n_ + col0, scratch_ + r * kRegCols, cols * sizeof(Acc));
        }
    }

    Ops ops_;
    TileSource a_, b_;
    Out* c_;
    std::int64_t m_, n_;
    Plan plan_;
    const SliceProducts* sp_;
    const ModEpilogue* mod_;
    Acc* local_ = nullptr;                // local partial sums (local_partials), or none
    bool local_failed_ = false;           // wanted, but not allocated
    std::int64_t ldl_ = 0, lr0_ = 0, lc0_ = 0;  // its C block's columns; origin (reg. blocks)
    alignas(64) Acc scratch_[kRegRows * kRegCols];
    alignas(64) Acc scratch2_[2][kRegRows * kRegCols];  // widened slice products' blocks
};

inline int resolve_threads(int threads) {
#ifdef _OPENMP
    return threads > 0 ? threads : omp_get_max_threads();
#else
    (void)threads;
    return 1;
#endif
}

inline int thread_id() {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

inline int team_size() {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

// C (m x n, contiguous) from A's and B's tiles (A: ceil(m/16) blocks, B: ceil(n/16) blocks,
// `ktiles` K tiles each, zero padded) with `plan`. Returns every thread's ok() (false only for
// the emulation's shape checks, or a thread-local partial-sum buffer that could not be had).
template <class Traits, class Ops, class Out = typename Traits::Acc>
bool gemm_tiles(const TileSource& a, const TileSource& b, Out* c, std::int64_t m,
                std::int64_t n, const Plan& plan, const SliceProducts* sp = nullptr,
                const ModEpilogue* mod = nullptr) {
    bool all_ok = true;
#pragma omp parallel num_threads(plan.team) reduction(&& : all_ok)
    {
        Worker<Traits, Ops, Out> w(a, b, c, m, n, plan, sp, mod);
        if (plan.partition == 0) {
            // One grid region per thread (looping only if OpenMP gave fewer threads).
            for (int t = thread_id(); t < plan.team; t += team_size()) {
                const int gr = t / plan.grid_cols, gc = t % plan.grid_cols;
                w.region(split_point(plan.rows, plan.grid_rows, gr),
                         split_point(plan.rows, plan.grid_rows, gr + 1),
                         split_point(plan.cols, plan.grid_cols, gc),
                         split_point(plan.cols, plan.grid_cols, gc + 1));
            }
        } else {
            // Tasks column-panel major: threads running at the same time share B panels.
            const std::int64_t row_tasks = ceil_div(plan.rows, plan.mcr);
#pragma omp for schedule(dynamic, 1)
            for (std::int64_t t = 0; t < plan.tasks; ++t) {
                const std::int64_t r0 = (t % row_tasks) * plan.mcr;
                const std::int64_t c0 = (t / row_tasks) * plan.ncr;
                w.region(r0, std::min(plan.rows, r0 + plan.mcr), c0,
                         std::min(plan.cols, c0 + plan.ncr));
            }
        }
        all_ok = w.ok();
    }
    return all_ok;
}

// C (m x n) = A (m x k) B (k x n), contiguous row-major. Returns false if the emulation's shape
// checks failed (a bug in this file, never expected).
template <class Traits, class Ops>
bool gemm(const typename Traits::In* a, const typename Traits::In* b, typename Traits::Acc* c,
          std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    using In = typename Traits::In;
    using Acc = typename Traits::Acc;
    constexpr std::int64_t KT = k_per_tile<In>();
    threads = resolve_threads(threads);
    if (m == 0 || n == 0) return true;
    if (k == 0) {
        std::fill(c, c + m * n, Acc(0));
        return true;
    }
    Tuning tuning = current_tuning();
    const std::int64_t mp = ceil_div(m, kRegRows) * kRegRows;
    const std::int64_t np = ceil_div(n, kRegCols) * kRegCols;
    const std::int64_t ktiles = ceil_div(k, KT);
    bool chunked = false;  // INT8 with long K: the mod GEMMs' form (blocking.hpp)
    if constexpr (std::is_same_v<In, std::int8_t>) {
        tuning = int8_gemm_tuning(tuning, ktiles, chunked);
    }
    const Panel pb = pack_b_vnni(b, k, n, n, np / 16, threads, chunked);
    Panel pa;
    TileSource as;
    if (tuning.pack_a == 0 && m % kRegRows == 0 && k % KT == 0) {
        const std::int64_t lda = k * static_cast<std::int64_t>(sizeof(In));  // bytes
        as = {reinterpret_cast<const std::uint8_t*>(a), kTileRows * lda, kTileBytes, lda};
    } else {
        pa = pack_a(a, m, k, k, mp / 16, threads, chunked);
        as = pa.source();
    }
    Plan plan = make_plan(tuning, mp, np, ktiles, threads);
    plan.local_c = chunked;
    return gemm_tiles<Traits, Ops>(as, pb.source(), c, m, n, plan);
}

// Scheme II's product for one modulus on packed int8 panels (A: ceil(m/32)*2 16-row blocks, B:
// VNNI, `ktiles` K tiles each, k <= kMaxKS8): out (m x n int8, row stride ldo) = the symmetric
// residues of A B modulo `modulus`. The int32 sums between K chunks live in a pooled buffer
// (none when K is one chunk), so no int32 product is allocated or written per call.
template <class Ops>
bool gemm_s8_mod_tiles(const TileSource& a, const TileSource& b, int modulus, std::int8_t* out,
                       std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t ktiles,
                       int threads, std::int64_t kc = 0) {
    threads = resolve_threads(threads);
    if (m == 0 || n == 0) return true;
    if (ktiles == 0) {
        for (std::int64_t i = 0; i < m; ++i) std::memset(out + i * ldo, 0, n);
        return true;
    }
    const std::int64_t mp = ceil_div(m, kRegRows) * kRegRows;
    const std::int64_t np = ceil_div(n, kRegCols) * kRegCols;
    Tuning tuning = current_tuning();
    if (kc > 0) tuning.kc = kc;  // the caller's K chunk (the amx backend's timed choice)
    // Unless kc is set, K in chunks of up to 128 tiles (K = 8192, the size measured): no int32
    // partial sums in memory up to there (18 GEMMs of 8192^3 on the AMX host: 1.71 s against
    // 1.90 s with the plain GEMM's default kc = 64); beyond, the outer operand's strip
    // (2 kc KiB) would outgrow the L2.
    if (tuning.kc == 0) tuning.kc = std::min<std::int64_t>(ktiles, 128);
    if (tuning.kc < ktiles) tuning = chunked_block(tuning);  // K in chunks
    tuning = int8_defaults(tuning);
    const Plan plan = make_plan(tuning, mp, np, ktiles, threads);
    PooledBytes partial;
    if (plan.kc < ktiles && !Worker<Int8Traits, Ops>::local_partials(plan, true))
        partial = PooledBytes(static_cast<std::size_t>(m * n) * 4);
    const ModEpilogue mod{out, ldo, modulus};
    return gemm_tiles<Int8Traits, Ops>(a, b, reinterpret_cast<std::int32_t*>(partial.get()), m,
                                       n, plan, nullptr, &mod);
}

// Slice products (see the top of this file) on packed slices: sa[i] (A's slices, ceil(m/32)*2
// 16-row blocks) and sb[j] (B's, VNNI), `ktiles` K tiles each; `count` pairs (i, j); C (m x n)
// is float (fused) or double (widened).
template <class Ops, class Out>
bool gemm_bf16_slice_tiles(const TileSource* sa, const TileSource* sb, const std::int32_t* pairs,
                           int count, Out* c, std::int64_t m, std::int64_t n,
                           std::int64_t ktiles, int threads) {
    constexpr bool widen = std::is_same_v<Out, double>;
    static_assert(widen || std::is_same_v<Out, float>, "C is float (fused) or double (widened)");
    threads = resolve_threads(threads);
    if (m == 0 || n == 0) return true;
    if (ktiles == 0 || count == 0) {
        std::fill(c, c + m * n, Out(0));
        return true;
    }
    const std::int64_t mp = ceil_div(m, kRegRows) * kRegRows;
    const std::int64_t np = ceil_div(n, kRegCols) * kRegCols;
    Plan plan = make_plan(current_tuning(), mp, np, ktiles, threads);
    if (widen) plan.kc = std::max(kWidenTiles, plan.kc / kWidenTiles * kWidenTiles);
    const SliceProducts sp{sa, sb, pairs, count};
    return gemm_tiles<Bf16Traits, Ops, Out>(sa[0], sb[0], c, m, n, plan, &sp);
}

// The same from row-major stacks a (na, m, k) and b (nb, k, n) of bf16 slices, each packed as
// gemm() packs its operands.
template <class Ops, class Out>
bool gemm_bf16_slices(const std::uint16_t* a, int na, const std::uint16_t* b, int nb,
                      const std::int32_t* pairs, int count, Out* c, std::int64_t m,
                      std::int64_t n, std::int64_t k, int threads) {
    threads = resolve_threads(threads);
    if (m == 0 || n == 0) return true;
    constexpr std::int64_t KT = k_per_tile<std::uint16_t>();
    const std::int64_t mp = ceil_div(m, kRegRows) * kRegRows;
    const std::int64_t np = ceil_div(n, kRegCols) * kRegCols;
    std::vector<Panel> pa, pb;
    std::vector<TileSource> sa, sb;
    for (int s = 0; s < na; ++s) pa.push_back(pack_a(a + s * m * k, m, k, k, mp / 16, threads));
    for (int s = 0; s < nb; ++s) {
        pb.push_back(pack_b_vnni(b + s * k * n, k, n, n, np / 16, threads));
    }
    for (const Panel& p : pa) sa.push_back(p.source());
    for (const Panel& p : pb) sb.push_back(p.source());
    return gemm_bf16_slice_tiles<Ops, Out>(sa.data(), sb.data(), pairs, count, c, m, n,
                                           ceil_div(k, KT), threads);
}

// The two entry points above with C chosen at run time (widen: double, else float), as the
// per-ISA translation units export them.
template <class Ops>
bool gemm_bf16_slice_tiles(const TileSource* sa, const TileSource* sb, const std::int32_t* pairs,
                           int count, bool widen, void* c, std::int64_t m, std::int64_t n,
                           std::int64_t ktiles, int threads) {
    if (widen)
        return gemm_bf16_slice_tiles<Ops>(sa, sb, pairs, count, static_cast<double*>(c), m, n,
                                          ktiles, threads);
    return gemm_bf16_slice_tiles<Ops>(sa, sb, pairs, count, static_cast<float*>(c), m, n,
                                      ktiles, threads);
}

template <class Ops>
bool gemm_bf16_slices(const std::uint16_t* a, int na, const std::uint16_t* b, int nb,
                      const std::int32_t* pairs, int count, bool widen, void* c, std::int64_t m,
                      std::int64_t n, std::int64_t k, int threads) {
    if (widen)
        return gemm_bf16_slices<Ops>(a, na, b, nb, pairs, count, static_cast<double*>(c), m, n,
                                     k, threads);
    return gemm_bf16_slices<Ops>(a, na, b, nb, pairs, count, static_cast<float*>(c), m, n, k,
                                 threads);
}

}  // namespace emulinalg::amx
