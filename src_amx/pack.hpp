// Packing of the GEMM operands into tile-major panels, zero padded to whole tiles.
//
// Every 16-row x 64-byte tile is stored contiguously (1 KiB, loaded with stride 64: compact
// loads are faster than strided ones), and the tiles of one 16-row block of A (16-column block
// of B) follow each other along K, so the K loop streams through memory.
//
// A (m x k, row-major) -> tiles (ib, kt): row r holds A[16 ib + r][KT kt ... KT kt + KT).
// B (k x n, row-major) -> VNNI tiles (jb, kt): row r holds, for each of 16 columns
//   c = 0..15, the G consecutive K values B[KT kt + G r + g][16 jb + c], g = 0..G-1,
// where G = 4 / sizeof(T) values fill one dword (4 int8 for TDPBSSD, 2 bf16 for TDPBF16PS) and
// KT = 64 / sizeof(T) = 16 G is the K depth of one tile. This is the layout the SDM's pseudo-code
// reads as B.row[k].dword[n]. Padding (rows of A beyond m, columns of B beyond n, K beyond k)
// is zero, which adds nothing to integer sums and only +0 to BF16 ones.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "tile_config.hpp"

namespace emulinalg::amx {

struct AlignedFree {
    void operator()(std::uint8_t* p) const { ::operator delete(p, std::align_val_t(64)); }
};
using AlignedBytes = std::unique_ptr<std::uint8_t[], AlignedFree>;

inline AlignedBytes aligned_bytes(std::size_t n) {
    return AlignedBytes(static_cast<std::uint8_t*>(::operator new(n, std::align_val_t(64))));
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A panel of `blocks` x `ktiles` tiles: blocks are 16-row blocks of A or 16-column blocks of B.
struct Panel {
    AlignedBytes bytes;
    std::int64_t blocks = 0, ktiles = 0;

    const std::uint8_t* tile(std::int64_t block, std::int64_t kt) const {
        return bytes.get() + (block * ktiles + kt) * kTileSize;
    }
    std::uint8_t* tile(std::int64_t block, std::int64_t kt) {
        return bytes.get() + (block * ktiles + kt) * kTileSize;
    }
};

template <class T>
constexpr std::int64_t k_per_tile() {
    return kTileBytes / sizeof(T);
}

// A panel of `blocks` x `ktiles` tiles, sized (at least one tile) but not filled.
inline Panel new_panel(std::int64_t blocks, std::int64_t ktiles) {
    Panel p;
    p.blocks = blocks;
    p.ktiles = ktiles;
    p.bytes = aligned_bytes(static_cast<std::size_t>(std::max<std::int64_t>(1, blocks * ktiles)) *
                            kTileSize);
    return p;
}

// Pack A (m x k, row stride lda elements) into `blocks` 16-row blocks (blocks * 16 >= m).
template <class T>
Panel pack_a(const T* a, std::int64_t m, std::int64_t k, std::int64_t lda, std::int64_t blocks,
             int threads) {
    constexpr std::int64_t KT = k_per_tile<T>();
    Panel p = new_panel(blocks, ceil_div(k, KT));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t ib = 0; ib < blocks; ++ib) {
        for (int r = 0; r < kTileRows; ++r) {
            const std::int64_t i = ib * kTileRows + r;
            for (std::int64_t kt = 0; kt < p.ktiles; ++kt) {
                auto* dst = p.tile(ib, kt) + r * kTileBytes;
                const std::int64_t k0 = kt * KT;
                const std::int64_t len = i < m ? std::min(KT, k - k0) : 0;
                if (len > 0) std::memcpy(dst, a + i * lda + k0, len * sizeof(T));
                std::memset(dst + len * sizeof(T), 0, kTileBytes - len * sizeof(T));
            }
        }
    }
    return p;
}

// Pack B (k x n, row stride ldb elements) into `blocks` 16-column VNNI blocks (blocks*16 >= n).
template <class T>
Panel pack_b_vnni(const T* b, std::int64_t k, std::int64_t n, std::int64_t ldb,
                  std::int64_t blocks, int threads) {
    constexpr std::int64_t KT = k_per_tile<T>();
    constexpr int G = 4 / sizeof(T);
    static_assert(G * sizeof(T) == 4 && KT == kTileRows * G, "VNNI groups fill one dword");
    Panel p = new_panel(blocks, ceil_div(k, KT));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t jb = 0; jb < blocks; ++jb) {
        const std::int64_t j0 = jb * kTileRows;  // 16 columns per block
        const std::int64_t cols = std::max<std::int64_t>(0, std::min<std::int64_t>(16, n - j0));
        for (std::int64_t kt = 0; kt < p.ktiles; ++kt) {
            T* dst = reinterpret_cast<T*>(p.tile(jb, kt));
            std::memset(dst, 0, kTileSize);
            for (int r = 0; r < kTileRows; ++r) {
                for (int g = 0; g < G; ++g) {
                    const std::int64_t kk = kt * KT + std::int64_t(r) * G + g;
                    if (kk >= k) break;
                    const T* src = b + kk * ldb + j0;
                    for (std::int64_t c = 0; c < cols; ++c) dst[(r * 16 + c) * G + g] = src[c];
                }
            }
        }
    }
    return p;
}

}  // namespace emulinalg::amx
