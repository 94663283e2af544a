// Memory and packing of the GEMM operands: huge-page-friendly buffers (cached between calls),
// and tile-major panels, zero padded to whole tiles.
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
//
// Both packers are parallel (OpenMP, over tiles) and write whole 64-byte lines; B's VNNI
// interleave uses SSE2 (the x86-64 baseline, so this header stays safe in every translation
// unit: it is compiled into the AMX and the non-AMX objects alike).
#pragma once

#include <emmintrin.h>  // SSE2: x86-64 baseline

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>  // sysconf: the physical memory
#endif

#include "blocking.hpp"
#include "tile_config.hpp"

namespace emulinalg::amx {

// ---- buffers -------------------------------------------------------------------------------

constexpr std::size_t kHugePage = std::size_t(2) << 20;

// At least `bytes` (rounded up to 64, or to 2 MiB from 2 MiB on), aligned to 64 bytes, or to
// 2 MiB with MADV_HUGEPAGE for the large ones (transparent huge pages: 512x fewer page faults
// and TLB misses). Release with std::free. Throws std::bad_alloc.
inline void* alloc_bytes(std::size_t bytes, std::size_t* capacity = nullptr) {
    const std::size_t align = bytes >= kHugePage ? kHugePage : 64;
    const std::size_t cap = std::max<std::size_t>(align, (bytes + align - 1) / align * align);
    void* p = nullptr;
    if (posix_memalign(&p, align, cap) != 0 || p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == kHugePage) madvise(p, cap, MADV_HUGEPAGE);  // advice only: errors ignored
#endif
    if (capacity) *capacity = cap;
    return p;
}

// The memory limit of this process's cgroup under `root` (normally /sys/fs/cgroup), given the
// text of /proc/self/cgroup: cgroup v2's memory.max or v1's memory.limit_in_bytes, at the
// process's own path and at the root (a container's namespace), the smallest set; 0 where none
// is set or readable. In a container that limit, not the host's memory, is what there is.
inline std::size_t cgroup_memory_limit(const std::string& proc_cgroup, const std::string& root) {
    const auto read_limit = [](const std::string& path) -> std::size_t {
        std::ifstream f(path);
        std::string v;
        if (!(f >> v) || v == "max") return 0;  // v2: "max" is no limit
        char* end = nullptr;
        const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
        return end != v.c_str() ? static_cast<std::size_t>(x) : 0;
    };
    std::size_t best = 0;
    const auto take = [&best](std::size_t x) {
        if (x != 0 && (best == 0 || x < best)) best = x;
    };
    std::istringstream lines(proc_cgroup);
    std::string line;
    while (std::getline(lines, line)) {  // hierarchy-ID:controller-list:cgroup-path
        const auto a = line.find(':');
        const auto b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
        const std::string path = line.substr(b + 1);
        if (controllers == ",,") {  // v2: the unified hierarchy
            take(read_limit(root + path + "/memory.max"));
            take(read_limit(root + "/memory.max"));
        } else if (controllers.find(",memory,") != std::string::npos) {  // v1
            take(read_limit(root + "/memory" + path + "/memory.limit_in_bytes"));
            take(read_limit(root + "/memory/memory.limit_in_bytes"));
        }
    }
    return best;
}

// Packed panels are cached between calls, as MKL keeps its buffers: a Scheme II product runs
// ~18 GEMMs of one size back to back, and a BF16 product's slice panels (1.5 GB for N = 8192)
// would otherwise be mapped, faulted in and zeroed by the kernel again on every call. What is
// kept is bounded twice: never more than EMULINALG_AMX_CACHE_MB MiB (default: an eighth of the
// physical memory or of the cgroup's limit where smaller, at least 256 MiB; 0 disables the
// cache), and never more than the most this
// process ever had in use at once (so the cache holds the largest call's working set, not a
// growing collection of every shape seen; the smallest buffers go first). clear_cache() gives
// it all back (as mkl_free_buffers). Thread-safe: the GEMMs run without the GIL.
class BufferPool {
public:
    static BufferPool& instance() {
        static BufferPool pool;
        return pool;
    }
    // A buffer of at least `bytes`: the smallest cached one that fits, else a new one.
    std::pair<void*, std::size_t> acquire(std::size_t bytes) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            std::size_t best = free_.size();
            for (std::size_t i = 0; i < free_.size(); ++i) {
                if (free_[i].second >= bytes &&
                    (best == free_.size() || free_[i].second < free_[best].second)) {
                    best = i;
                }
            }
            if (best != free_.size()) {
                auto b = free_[best];
                free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
                cached_ -= b.second;
                used(b.second);
                return b;
            }
        }
        std::size_t cap = 0;
        void* p = alloc_bytes(bytes, &cap);  // not touched yet: the trim below comes first
        std::lock_guard<std::mutex> lock(mu_);
        used(cap);
        // Cached plus in use stays within the peak in use: a larger call replaces the cached
        // buffers instead of adding to them.
        while (cached_ + in_use_ > peak_ && !free_.empty()) drop_smallest();
        return {p, cap};
    }
    void release(void* p, std::size_t cap) {
        if (p == nullptr) return;
        std::lock_guard<std::mutex> lock(mu_);
        in_use_ -= cap;
        const std::size_t keep = std::min(limit_, peak_);
        if (cap > keep) {
            std::free(p);
            return;
        }
        while (cached_ + cap > keep && !free_.empty()) drop_smallest();
        free_.emplace_back(p, cap);
        cached_ += cap;
    }
    // Frees the cached buffers and forgets the past peak; returns how many bytes that gave back.
    std::size_t clear() {
        std::lock_guard<std::mutex> lock(mu_);
        const std::size_t n = cached_;
        for (auto& b : free_) std::free(b.first);
        free_.clear();
        cached_ = 0;
        peak_ = in_use_;
        return n;
    }
    struct Stats {
        std::size_t cached, limit, peak, in_use;
    };
    Stats stats() {  // one consistent snapshot
        std::lock_guard<std::mutex> lock(mu_);
        return {cached_, limit_, peak_, in_use_};
    }
    void set_limit(std::size_t bytes) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            limit_ = bytes;
        }
        if (stats().cached > bytes) clear();
    }

private:
    BufferPool() {
        limit_ = default_limit();
        const char* env = std::getenv("EMULINALG_AMX_CACHE_MB");
        if (env != nullptr && *env != '\0') {
            char* end = nullptr;
            const long long mb = std::strtoll(env, &end, 10);
            if (end != env && mb >= 0) limit_ = static_cast<std::size_t>(mb) << 20;
        }
    }
    ~BufferPool() { clear(); }
    // An eighth of the physical memory or of the cgroup's limit, whichever is smaller, at least
    // 256 MiB (256 MiB where neither can be read).
    static std::size_t default_limit() {
        std::size_t bytes = std::size_t(256) << 20;
#if defined(__linux__)
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        std::size_t mem = pages > 0 && page > 0
                              ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                              : 0;
        std::ifstream f("/proc/self/cgroup");
        std::stringstream text;
        text << f.rdbuf();
        const std::size_t cg = cgroup_memory_limit(text.str(), "/sys/fs/cgroup");
        if (cg != 0 && (mem == 0 || cg < mem)) mem = cg;
        bytes = std::max(bytes, mem / 8);
#endif
        return bytes;
    }
    void used(std::size_t cap) {  // mu_ held
        in_use_ += cap;
        peak_ = std::max(peak_, in_use_);
    }
    void drop_smallest() {  // mu_ held, free_ not empty
        auto it = std::min_element(free_.begin(), free_.end(),
                                   [](auto& x, auto& y) { return x.second < y.second; });
        cached_ -= it->second;
        std::free(it->first);
        free_.erase(it);
    }
    std::mutex mu_;
    std::vector<std::pair<void*, std::size_t>> free_;
    std::size_t cached_ = 0, in_use_ = 0, peak_ = 0;
    std::size_t limit_ = 0;
};

// A pooled buffer, given back to the pool when destroyed.
class PooledBytes {
public:
    PooledBytes() = default;
    explicit PooledBytes(std::size_t bytes) {
        auto b = BufferPool::instance().acquire(bytes);
        p_ = static_cast<std::uint8_t*>(b.first);
        cap_ = b.second;
    }
    PooledBytes(PooledBytes&& o) noexcept : p_(o.p_), cap_(o.cap_) { o.p_ = nullptr; }
    PooledBytes& operator=(PooledBytes&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(cap_, o.cap_);
        return *this;
    }
    PooledBytes(const PooledBytes&) = delete;
    PooledBytes& operator=(const PooledBytes&) = delete;
    ~PooledBytes() { BufferPool::instance().release(p_, cap_); }
    std::uint8_t* get() const { return p_; }

private:
    std::uint8_t* p_ = nullptr;
    std::size_t cap_ = 0;
};

// Writes a zero to every 4 KiB page of [p, p + bytes), the threads taking page ranges: maps a
// fresh buffer's pages in parallel.
inline void touch_pages(std::uint8_t* p, std::size_t bytes) {
    const std::int64_t pages = static_cast<std::int64_t>((bytes + 4095) / 4096);
#pragma omp parallel for schedule(static)
    for (std::int64_t q = 0; q < pages; ++q) p[q * 4096] = 0;
}

// ---- tiles ---------------------------------------------------------------------------------

// Where the tiles of an operand are: tile (block, kt) has 16 rows `row_stride` bytes apart (the
// TILELOADD stride). Blocks are 16-row blocks of A or 16-column blocks of B.
// Plain (chunk = 0): it starts at base + block * block_stride + kt * kt_stride.
// Chunked pairs (chunk > 0, an even number of blocks; Scheme II's panels): K in chunks of
// `chunk` tiles (the last one shorter when ktiles is not a multiple), one after the other;
// within a chunk the pairs of blocks (2p, 2p + 1) one after the other, and within a pair the
// two blocks' tiles alternating, K tile by K tile (block_stride = one tile, kt_stride = two).
// A register block's K steps within a chunk then read one contiguous run, and the blocks of a
// C block's columns one after the other the next runs: the hardware prefetchers stream them,
// where the plain layout's 2 x kc tiles of a pair lie a whole K row of tiles apart.
struct TileSource {
    const std::uint8_t* base = nullptr;
    std::int64_t block_stride = 0, kt_stride = 0, row_stride = 0;
    std::int64_t chunk = 0, ktiles = 0, blocks = 0;  // chunked pairs only
    const std::uint8_t* tile(std::int64_t block, std::int64_t kt) const {
        if (chunk == 0) return base + block * block_stride + kt * kt_stride;
        const std::int64_t c = kt / chunk, in = kt - c * chunk;
        const std::int64_t len = std::min(chunk, ktiles - c * chunk);  // this chunk's K tiles
        return base + (c * chunk * blocks + (block >> 1) * 2 * len) * block_stride +
               in * kt_stride + (block & 1) * block_stride;
    }
    // The K tiles from kt on (at most n) that lie kt_stride apart: to the end of kt's chunk.
    std::int64_t run(std::int64_t kt, std::int64_t n) const {
        return chunk == 0 ? n : std::min(n, chunk - kt % chunk);
    }
};

// The tiles of a packed panel of `blocks` (even when chunked) x `ktiles` tiles from base, in
// the chunked-pair layout or the plain one; either takes blocks * ktiles tiles.
inline TileSource panel_source(const std::uint8_t* base, std::int64_t blocks,
                               std::int64_t ktiles, bool chunked) {
    if (!chunked) return {base, ktiles * kTileSize, kTileSize, kTileBytes};
    return {base, kTileSize, 2 * kTileSize, kTileBytes, kPanelChunk, ktiles, blocks};
}

// A packed panel of `blocks` x `ktiles` contiguous tiles.
struct Panel {
    PooledBytes bytes;
    std::int64_t blocks = 0, ktiles = 0;
    bool chunked = false;  // chunked pairs (TileSource), else plain

    std::uint8_t* tile(std::int64_t block, std::int64_t kt) const {
        return const_cast<std::uint8_t*>(source().tile(block, kt));
    }
    TileSource source() const { return panel_source(bytes.get(), blocks, ktiles, chunked); }
};

template <class T>
constexpr std::int64_t k_per_tile() {
    return kTileBytes / sizeof(T);
}

// A panel of `blocks` x `ktiles` tiles, sized (at least one tile) but not filled.
inline Panel new_panel(std::int64_t blocks, std::int64_t ktiles, bool chunked = false) {
    Panel p;
    p.blocks = blocks;
    p.ktiles = ktiles;
    p.chunked = chunked;
    p.bytes = PooledBytes(static_cast<std::size_t>(std::max<std::int64_t>(1, blocks * ktiles)) *
                          kTileSize);
    return p;
}

// Pack A (m x k, row stride lda elements) into `blocks` 16-row blocks (blocks * 16 >= m).
template <class T>
Panel pack_a(const T* a, std::int64_t m, std::int64_t k, std::int64_t lda, std::int64_t blocks,
             int threads, bool chunked = false) {
    constexpr std::int64_t KT = k_per_tile<T>();
    Panel p = new_panel(blocks, ceil_div(k, KT), chunked);
    const std::int64_t ktiles = p.ktiles;
#pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
    for (std::int64_t ib = 0; ib < blocks; ++ib) {
        for (std::int64_t kt = 0; kt < ktiles; ++kt) {
            std::uint8_t* dst = p.tile(ib, kt);
            const std::int64_t k0 = kt * KT;
            const std::int64_t klen = std::min(KT, k - k0);
            for (int r = 0; r < kTileRows; ++r, dst += kTileBytes) {
                const std::int64_t i = ib * kTileRows + r;
                if (i < m && klen == KT) {
                    std::memcpy(dst, a + i * lda + k0, kTileBytes);
                } else {
                    const std::int64_t len = i < m ? klen : 0;
                    if (len > 0) std::memcpy(dst, a + i * lda + k0, len * sizeof(T));
                    std::memset(dst + len * sizeof(T), 0, kTileBytes - len * sizeof(T));
                }
            }
        }
    }
    return p;
}

// One VNNI tile row from G full source rows (16 columns each): SSE2 byte / word interleaves.
template <class T>
inline void vnni_row(const T* const* src, std::uint8_t* dst) {
    if constexpr (sizeof(T) == 1) {  // 4 rows of 16 int8 -> 16 x [4 int8]
        const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[0]));
        const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[1]));
        const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[2]));
        const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[3]));
        const __m128i lo01 = _mm_unpacklo_epi8(x0, x1), hi01 = _mm_unpackhi_epi8(x0, x1);
        const __m128i lo23 = _mm_unpacklo_epi8(x2, x3), hi23 = _mm_unpackhi_epi8(x2, x3);
        auto* d = reinterpret_cast<__m128i*>(dst);
        _mm_store_si128(d + 0, _mm_unpacklo_epi16(lo01, lo23));  // columns 0-3
        _mm_store_si128(d + 1, _mm_unpackhi_epi16(lo01, lo23));  // 4-7
        _mm_store_si128(d + 2, _mm_unpacklo_epi16(hi01, hi23));  // 8-11
        _mm_store_si128(d + 3, _mm_unpackhi_epi16(hi01, hi23));  // 12-15
    } else {  // 2 rows of 16 bf16 -> 16 x [2 bf16]
        const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[0]));
        const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[0]) + 1);
        const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[1]));
        const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[1]) + 1);
        auto* d = reinterpret_cast<__m128i*>(dst);
        _mm_store_si128(d + 0, _mm_unpacklo_epi16(a0, b0));  // columns 0-3
        _mm_store_si128(d + 1, _mm_unpackhi_epi16(a0, b0));  // 4-7
        _mm_store_si128(d + 2, _mm_unpacklo_epi16(a1, b1));  // 8-11
        _mm_store_si128(d + 3, _mm_unpackhi_epi16(a1, b1));  // 12-15
    }
}

// Pack B (k x n, row stride ldb elements) into `blocks` 16-column VNNI blocks (blocks*16 >= n).
template <class T>
Panel pack_b_vnni(const T* b, std::int64_t k, std::int64_t n, std::int64_t ldb,
                  std::int64_t blocks, int threads, bool chunked = false) {
    constexpr std::int64_t KT = k_per_tile<T>();
    constexpr int G = 4 / sizeof(T);
    static_assert(G * sizeof(T) == 4 && KT == kTileRows * G, "VNNI groups fill one dword");
    Panel p = new_panel(blocks, ceil_div(k, KT), chunked);
    const std::int64_t ktiles = p.ktiles;
    // kt outer: a thread's tiles read a contiguous band of B's rows; the 64 source lines of one
    // tile serve the next 3 (int8) / 1 (bf16) column blocks from L1.
#pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
    for (std::int64_t kt = 0; kt < ktiles; ++kt) {
        for (std::int64_t jb = 0; jb < blocks; ++jb) {
            std::uint8_t* dst = p.tile(jb, kt);
            const std::int64_t j0 = jb * 16;
            const std::int64_t cols = std::max<std::int64_t>(0, std::min<std::int64_t>(16, n - j0));
            const bool full_k = kt * KT + KT <= k;
            for (int r = 0; r < kTileRows; ++r, dst += kTileBytes) {
                const std::int64_t kk0 = kt * KT + std::int64_t(r) * G;
                if (cols == 16 && full_k) {
                    const T* src[G];
                    for (int g = 0; g < G; ++g) src[g] = b + (kk0 + g) * ldb + j0;
                    vnni_row<T>(src, dst);
                    continue;
                }
                T* d = reinterpret_cast<T*>(dst);
                std::memset(dst, 0, kTileBytes);
                for (int g = 0; g < G; ++g) {
                    if (kk0 + g >= k) break;
                    const T* s = b + (kk0 + g) * ldb + j0;
                    for (std::int64_t c = 0; c < cols; ++c) d[c * G + g] = s[c];
                }
            }
        }
    }
    return p;
}

}  // namespace emulinalg::amx
