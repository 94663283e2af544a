// Blocking of the tile GEMM: the tuning knobs (run-time settable, for sweeps on the AMX host),
// their defaults, and the plan one call resolves them to. research/accuracy-and-cost.md §6.2 has
// the bandwidth figures the defaults are reasoned from; docs/benchmarks/tools/amx_gemm_sweep.py
// measures them.
//
// Register block (fixed by the ISA): 2 x 2 C tiles (32 x 32 outputs) from 2 A and 2 B tiles per
// K step, 4 tile loads per 4 dot products. One operand of the block must come from L1, else
// every dot product waits for a whole tile from L2 (L2 delivers about 0.75 tile per 16-cycle
// TDP interval, L1 about 2). Hence, in a thread's region of C:
//
//   for jc  (nc columns: a B panel, nc x kc chunk, lives in L2)
//    for ic (mc rows: the mc x nc C block lives in L2 across the K chunks)
//     for pc (kc K tiles per chunk: C tiles stored after a chunk, reloaded for the next)
//      order 0: for i (32-row A strip, 2 x kc tiles, stays in L1) for j: register block
//      order 1: for j (32-col B pair, 2 x kc tiles, stays in L1)  for i: register block
//
// (nest=1 swaps the ic and pc loops: each B panel chunk then serves all the region's rows, and
// C streams from L3 between chunks, which only pays with a large kc. stream=1 loads the
// streamed operand with TILELOADDT1, so that it need not evict the L1-resident one: per block
// the L1 sees 2 kc KiB of each operand plus 4 KiB of C, which exceeds 48 KiB from kc = 12.)
//
// Per register block and chunk: 2 kc loads from L1, 2 kc from L2, and 4 + 4 C tile loads/stores
// (L2). kc = 8 keeps the L1 operand at 16 KiB (L1D is 48 KiB on Sapphire Rapids); mc x nc x 4
// bytes of C (512 KiB) plus the B panel (256 KiB) fit the 2 MiB L2. From L3/DRAM, A is read
// once per nc columns and B once per mc rows: 2 mc nc / (mc + nc) operations per byte.
//
// Threads: a static 2-D grid over the register blocks of C (near-square regions, each thread
// loads its tile configuration once), or dynamic scheduling over mc x nc tasks.
//
// Accumulation order: every C entry sums its K tiles in ascending order, starting from zero,
// whatever the blocking (a C tile stored and reloaded keeps its exact value), so BF16 results
// do not depend on these knobs and the scalar tile model reproduces the AMX kernel bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

namespace emulinalg::amx {

constexpr std::int64_t kRegRows = 32;  // 2 C tiles of 16 rows
constexpr std::int64_t kRegCols = 32;  // 2 C tiles of 16 columns

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The knobs. 0 in mc / nc / kc means "the default"; a kc of at least the K tiles of a call
// keeps C in the tiles for the whole K (one chunk).
struct Tuning {
    std::int64_t mc = 0;  // rows of the C block kept in L2 (multiple of 32)
    std::int64_t nc = 0;  // columns of the B panel kept in L2 (multiple of 32)
    std::int64_t kc = 0;  // K tiles per chunk (64 int8 / 32 bf16 of K each)
    int order = 0;        // 0: j innermost (A strip L1-resident); 1: i innermost (B pair)
    int sched = 2;        // order of the 4 tile loads and 4 dot products of a K step: 0, 1, 2,
                          // 3 (software pipelined: the next step's loads among this step's)
    int prefetch = 1;     // bit 0: next L1 operand into L2, spread over the inner loop;
                          // bit 1: next register block's streamed tiles into L1
    int partition = 1;    // 0: static 2-D thread grid; 1: dynamic over mc x nc tasks
    int pack_a = 1;       // 0: tile-load A from the row-major input when no padding is needed
    int nest = -1;        // 0: jc, ic, pc (C block in L2); 1: jc, pc, ic (B panel reused by
                          // all the region's rows, C streamed: wants a large kc); -1: the
                          // kernel's default (kDefaultNest; the INT8 GEMMs' kInt8Nest)
    int stream = 0;       // 1: load the streamed operand with TILELOADDT1 (no L1 reuse hint)
    int widen = 1;        // widened slice products: 0 adds each FP32 block to C after its dot
                          // products; 1 adds it one row per K step of the next block's (the
                          // vector work overlaps the tile unit's); same additions, same order
    int panels = 1;       // Scheme II's residue panels (ozaki2_pack): 1 chunked pairs, 0 plain
                          // (pack.hpp's TileSource); same products
};

// Defaults: the best of the sweep on the 16-core AMX host, 16 threads, N = 8192
// (docs/benchmarks/xeon-amx-16c/amx_sweep_2026-11-30.jsonl: INT8 14.7 Top/s, BF16 7.0 TFLOP/s,
// 44 % / 50 % of the register ceiling; the old kernel reached 8.1 / 4.8).
constexpr std::int64_t kDefaultMc = 256;
constexpr std::int64_t kDefaultNc = 2048;
constexpr std::int64_t kDefaultKc = 64;
constexpr int kDefaultNest = 1;
// The INT8 GEMMs (Scheme II's mod GEMMs, gemm_s8_mod_tiles, with K in one chunk up to 128
// tiles; the plain s8s8s32 GEMM of the bound operands): a 128 x 512 C block with the C-block
// nest. Round-robin against the defaults above on two AMX hosts (amx_scheme2_breakdown.py
// --rounds, docs/benchmarks/xeon-amx-16c/NOTES.md, 2026-12-03 third session): faster in every
// round on both, for both kinds. The BF16 GEMMs keep the defaults above (not measured).
constexpr std::int64_t kInt8Mc = 128;
constexpr std::int64_t kInt8Nc = 512;
constexpr int kInt8Nest = 0;
// K tiles per chunk of chunked panels (pack.hpp's panel_source): the mod GEMMs' K chunk when
// they keep A's strip in L1 (emulinalg/backends/amx.py's CHUNK_KC is this).
constexpr std::int64_t kPanelChunk = 8;
// The mod GEMMs in K chunks on chunked-pair panels (kc = kPanelChunk, A's strip of a chunk in
// L1, each chunk's B panel in L2 for all the C block's rows, the C block's int32 partial sums,
// 512 KiB, in L2 too): a taller, narrower C block (docs/benchmarks/ci-cpu/README.md, 2026-12-07).
constexpr std::int64_t kInt8ChunkMc = 512;
constexpr std::int64_t kInt8ChunkNc = 256;
// INT8 GEMMs of more K tiles than this take the chunked panels (32: K = 2048; up to it a plain
// panel's strip of a register block nearly fits L1 and K in one chunk measured faster;
// emulinalg/backends/amx.py's CHUNKED_MIN_K is this in elements).
constexpr std::int64_t kChunkedMinTiles = 32;

// t with its unset C block and nest taken from the INT8 GEMMs' defaults.
inline Tuning int8_defaults(Tuning t) {
    if (t.mc == 0) t.mc = kInt8Mc;
    if (t.nc == 0) t.nc = kInt8Nc;
    if (t.nest < 0) t.nest = kInt8Nest;
    return t;
}

// t with its unset C block the one for K in chunks (kInt8ChunkMc x kInt8ChunkNc).
inline Tuning chunked_block(Tuning t) {
    if (t.mc == 0) t.mc = kInt8ChunkMc;
    if (t.nc == 0) t.nc = kInt8ChunkNc;
    return t;
}

// What a plain INT8 GEMM (gemm_s8s8s32, the statistics' bound GEMM) of `ktiles` K tiles runs
// with: with long K and no K chunk set, the mod GEMMs' form (chunked panels, K chunks of
// kPanelChunk tiles, the C block's partial sums in each thread's buffer, C written once:
// `chunked` true; nest 0 and A packed then, whatever was set), else t with the INT8 defaults.
inline Tuning int8_gemm_tuning(Tuning t, std::int64_t ktiles, bool& chunked) {
    chunked = t.panels == 1 && t.kc == 0 && ktiles > kChunkedMinTiles;
    if (chunked) {
        t.kc = kPanelChunk;
        t.nest = 0;
        t.pack_a = 1;
        t = chunked_block(t);
    }
    return int8_defaults(t);
}

// "" when t is valid, else what is wrong.
inline std::string validate(const Tuning& t) {
    if (t.mc < 0 || t.mc % kRegRows != 0 || t.mc > (1 << 20)) {
        return "mc must be 0 (default) or a positive multiple of 32";
    }
    if (t.nc < 0 || t.nc % kRegCols != 0 || t.nc > (1 << 20)) {
        return "nc must be 0 (default) or a positive multiple of 32";
    }
    if (t.kc < 0 || t.kc > (1 << 20)) return "kc must be 0 (default) or a positive tile count";
    if (t.order < 0 || t.order > 1) return "order must be 0 (j innermost) or 1 (i innermost)";
    if (t.sched < 0 || t.sched > 3) return "sched must be 0, 1, 2 or 3";
    if (t.prefetch < 0 || t.prefetch > 3) return "prefetch must be 0..3 (bit mask)";
    if (t.partition < 0 || t.partition > 1) return "partition must be 0 (static) or 1 (dynamic)";
    if (t.pack_a < 0 || t.pack_a > 1) return "pack_a must be 0 or 1";
    if (t.nest < -1 || t.nest > 1)
        return "nest must be 0 (jc, ic, pc), 1 (jc, pc, ic) or -1 (the kernel's default)";
    if (t.stream < 0 || t.stream > 1) return "stream must be 0 or 1";
    if (t.widen < 0 || t.widen > 1) return "widen must be 0 or 1";
    if (t.panels < 0 || t.panels > 1) return "panels must be 0 (plain) or 1 (chunked pairs)";
    return "";
}

// Sets one knob by name; "" on success, else what is wrong (unknown key). Not validated.
inline std::string set_knob(Tuning& t, const std::string& key, long long v) {
    if (key == "mc") t.mc = v;
    else if (key == "nc") t.nc = v;
    else if (key == "kc") t.kc = v;
    else if (key == "order") t.order = static_cast<int>(v);
    else if (key == "sched") t.sched = static_cast<int>(v);
    else if (key == "prefetch" || key == "pf") t.prefetch = static_cast<int>(v);
    else if (key == "partition") t.partition = static_cast<int>(v);
    else if (key == "pack_a") t.pack_a = static_cast<int>(v);
    else if (key == "nest") t.nest = static_cast<int>(v);
    else if (key == "stream") t.stream = static_cast<int>(v);
    else if (key == "widen") t.widen = static_cast<int>(v);
    else if (key == "panels") t.panels = static_cast<int>(v);
    else return "unknown blocking key '" + key + "' (mc, nc, kc, order, sched, prefetch, "
                "partition, pack_a, nest, stream, widen, panels)";
    return "";
}

// Parses "mc=256,nc=512,kc=8,order=0,..." on top of t ("default" resets to the defaults).
// "" on success (t updated), else what is wrong (t unchanged).
inline std::string parse_tuning(const std::string& spec, Tuning& t) {
    Tuning r = t;
    std::size_t pos = 0;
    while (pos <= spec.size()) {
        std::size_t end = spec.find_first_of(", ", pos);
        if (end == std::string::npos) end = spec.size();
        const std::string item = spec.substr(pos, end - pos);
        pos = end + 1;
        if (item.empty()) continue;
        if (item == "default") {
            r = Tuning{};
            continue;
        }
        const std::size_t eq = item.find('=');
        if (eq == std::string::npos) return "blocking item '" + item + "' is not key=value";
        const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
        char* stop = nullptr;
        const long long v = std::strtoll(val.c_str(), &stop, 10);
        if (val.empty() || *stop != '\0') return "blocking value '" + val + "' is not an integer";
        const std::string err = set_knob(r, key, v);
        if (!err.empty()) return err;
    }
    const std::string err = validate(r);
    if (!err.empty()) return err;
    t = r;
    return "";
}

inline std::string format_tuning(const Tuning& t) {
    return "mc=" + std::to_string(t.mc) + ",nc=" + std::to_string(t.nc) +
           ",kc=" + std::to_string(t.kc) + ",order=" + std::to_string(t.order) +
           ",sched=" + std::to_string(t.sched) + ",prefetch=" + std::to_string(t.prefetch) +
           ",partition=" + std::to_string(t.partition) + ",pack_a=" + std::to_string(t.pack_a) +
           ",nest=" + std::to_string(t.nest) + ",stream=" + std::to_string(t.stream) +
           ",widen=" + std::to_string(t.widen) + ",panels=" + std::to_string(t.panels);
}

// The process-wide knobs (emulinalg._amx.set_blocking, EMULINALG_AMX_BLOCKING). Each GEMM call
// takes a copy when it starts.
inline std::mutex& tuning_mutex() {
    static std::mutex m;
    return m;
}
inline Tuning& tuning_storage() {
    static Tuning t;
    return t;
}
inline Tuning current_tuning() {
    std::lock_guard<std::mutex> lock(tuning_mutex());
    return tuning_storage();
}
inline void set_current_tuning(const Tuning& t) {
    std::lock_guard<std::mutex> lock(tuning_mutex());
    tuning_storage() = t;
}

// What one call runs: the knobs resolved for its sizes and thread count. Sizes in register
// blocks (32 rows / 32 columns) and K tiles.
struct Plan {
    std::int64_t rows = 0, cols = 0, ktiles = 0;  // register blocks of C; K tiles
    std::int64_t mcr = 0, ncr = 0, kc = 0;        // C block (register blocks), K chunk (tiles)
    int order = 0, sched = 0, prefetch = 0, partition = 0, nest = 0, stream = 0, widen = 1;
    bool local_c = false;  // C's partial sums in each thread's C block, C written once (INT8)
    int grid_rows = 1, grid_cols = 1;  // static partition: threads = grid_rows x grid_cols
    int team = 1;                      // threads started
    std::int64_t tasks = 1;            // dynamic partition: mc x nc tasks
};

// Static 2-D grid for `threads` over rows x cols register blocks: the smallest largest region
// (balanced splits), then the smallest rows + cols per region (least operand traffic), then the
// fewest threads. Some threads stay idle when the product has fewer blocks than threads.
inline void choose_grid(std::int64_t rows, std::int64_t cols, int threads, int& gr, int& gc) {
    gr = gc = 1;
    std::int64_t best_work = -1, best_sum = 0;
    for (std::int64_t r = 1; r <= threads && r <= rows; ++r) {
        const std::int64_t c = std::min<std::int64_t>(cols, threads / r);
        const std::int64_t h = ceil_div(rows, r), w = ceil_div(cols, c);
        const std::int64_t work = h * w, sum = h + w;
        if (best_work < 0 || work < best_work || (work == best_work && sum < best_sum)) {
            best_work = work;
            best_sum = sum;
            gr = static_cast<int>(r);
            gc = static_cast<int>(c);
        }
    }
}

// [begin, end) of part `p` of `parts` balanced parts of `n`.
inline std::int64_t split_point(std::int64_t n, int parts, int p) { return n * p / parts; }

inline Plan make_plan(const Tuning& t, std::int64_t mp, std::int64_t np, std::int64_t ktiles,
                      int threads) {
    Plan p;
    p.rows = mp / kRegRows;
    p.cols = np / kRegCols;
    p.ktiles = ktiles;
    p.mcr = std::max<std::int64_t>(1, (t.mc ? t.mc : kDefaultMc) / kRegRows);
    p.ncr = std::max<std::int64_t>(1, (t.nc ? t.nc : kDefaultNc) / kRegCols);
    p.kc = std::min<std::int64_t>(std::max<std::int64_t>(1, ktiles), t.kc ? t.kc : kDefaultKc);
    p.order = t.order;
    p.sched = t.sched;
    p.prefetch = t.prefetch;
    p.partition = t.partition;
    p.nest = t.nest < 0 ? kDefaultNest : t.nest;
    p.stream = t.stream;
    p.widen = t.widen;
    threads = std::max(1, threads);
    if (p.partition == 0) {
        choose_grid(p.rows, p.cols, threads, p.grid_rows, p.grid_cols);
        p.team = p.grid_rows * p.grid_cols;
    } else {
        // Smaller tasks when there are too few to keep every thread busy.
        auto count = [&] { return ceil_div(p.rows, p.mcr) * ceil_div(p.cols, p.ncr); };
        while (count() < 2 * threads && (p.mcr > 1 || p.ncr > 1)) {
            if (p.mcr >= p.ncr && p.mcr > 1) p.mcr = (p.mcr + 1) / 2;
            else p.ncr = (p.ncr + 1) / 2;
        }
        p.tasks = count();
        p.team = static_cast<int>(std::min<std::int64_t>(threads, p.tasks));
    }
    return p;
}

}  // namespace emulinalg::amx
