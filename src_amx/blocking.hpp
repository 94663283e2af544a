// Cache blocking of the tile GEMM: the one place for block sizes (to be tuned on the AMX
// machine from measurements; research/accuracy-and-cost.md §6.2 has the reasoning).
//
// The register block is fixed by the ISA: 2 x 2 tiles of C (32 x 32 outputs) with 2 A and 2 B
// tiles, one tile load per tile dot product. Around it, one task of the parallel loop is an
// m_block x n_block block of C, computed K block by K block: within a K block the task's
// B panel (n_block columns x k_tiles tiles, 512 KiB at the defaults) stays in L2 and each
// 32-row A strip is reused across the n_block / 32 register blocks from L1/L2. C tiles are
// stored after each K block and reloaded for the next (4 loads + 4 stores per 4 * k_tiles dot
// products).
#pragma once

#include <algorithm>
#include <cstdint>

namespace emulinalg::amx {

constexpr std::int64_t kRegRows = 32;  // 2 C tiles of 16 rows
constexpr std::int64_t kRegCols = 32;  // 2 C tiles of 16 columns

struct Blocking {
    std::int64_t m_block;  // rows of C per task (multiple of kRegRows)
    std::int64_t n_block;  // columns of C per task (multiple of kRegCols)
    std::int64_t k_tiles;  // K tiles (64 bytes of K each) per K block
};

// mp, np: padded sizes (multiples of 32); threads: workers sharing the tasks.
inline Blocking choose_blocking(std::int64_t mp, std::int64_t np, int threads) {
    Blocking b{256, 256, 32};
    // Enough tasks for dynamic scheduling to balance: shrink the row block first (the B panel
    // is the one reused from L2), down to one register block.
    const std::int64_t want = 4 * std::max(1, threads);
    auto tasks = [&] {
        return ((mp + b.m_block - 1) / b.m_block) * ((np + b.n_block - 1) / b.n_block);
    };
    while (tasks() < want && b.m_block > kRegRows) b.m_block /= 2;
    while (tasks() < want && b.n_block > kRegCols) b.n_block /= 2;
    return b;
}

}  // namespace emulinalg::amx
