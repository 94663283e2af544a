// Register-only AMX ceiling: back-to-back TDPBSSD / TDPBF16PS on resident tiles (no memory
// traffic), per thread count, to separate the host's tile throughput from the GEMM kernels'
// blocking. Four independent accumulators (tiles 4..7) from two A and two B tiles, the same
// dependence pattern as a 2x2 register block.
//
//   g++ -O2 -fopenmp -mamx-tile -mamx-int8 -mamx-bf16 docs/benchmarks/tools/amx_peak.cpp -o amx_peak
//   ./amx_peak 1 2 4 8 16      # thread counts; prints one JSON line each
//   AMX_FEED=1 ./amx_peak 8 16  # also the fed rates (run_fed): B tiles from a per-thread ring of
//                               # 8 KiB (L1), 1 MiB (L2) or 32 MiB (L3 / DRAM), A tiles from a
//                               # 4 KiB ring, three load schedules: what the caches let a GEMM
//                               # reach (the 2026-12-03c records: 32 KiB B + 16 KiB A rings)
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace {

constexpr int ARCH_REQ_XCOMP_PERM = 0x1023;
constexpr int XFEATURE_XTILEDATA = 18;

struct alignas(64) Config {
    std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
    std::uint16_t colsb[16] = {};
    std::uint8_t rows[16] = {};
};

void configure() {
    Config c;
    for (int t = 0; t < 8; ++t) {
        c.colsb[t] = 64;
        c.rows[t] = 16;
    }
    _tile_loadconfig(&c);
}

template <bool Bf16>
double run(int threads, long iters) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
        configure();
        alignas(64) static thread_local std::uint8_t buf[16 * 64];
        std::memset(buf, 1, sizeof buf);
        _tile_loadd(0, buf, 64);
        _tile_loadd(1, buf, 64);
        _tile_loadd(2, buf, 64);
        _tile_loadd(3, buf, 64);
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        for (long i = 0; i < iters; ++i) {
            if constexpr (Bf16) {
                _tile_dpbf16ps(4, 0, 2);
                _tile_dpbf16ps(5, 0, 3);
                _tile_dpbf16ps(6, 1, 2);
                _tile_dpbf16ps(7, 1, 3);
            } else {
                _tile_dpbssd(4, 0, 2);
                _tile_dpbssd(5, 0, 3);
                _tile_dpbssd(6, 1, 2);
                _tile_dpbssd(7, 1, 3);
            }
        }
        _tile_stored(4, buf, 64);
        _tile_release();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // One TDPBSSD: 16 x 16 x 64 multiply-adds (2 ops each); TDPBF16PS: 16 x 16 x 32.
    double ops = 2.0 * 16 * 16 * (Bf16 ? 32 : 64) * 4.0 * iters * threads;
    return ops / s;
}

// INT8 2x2 register blocks fed from memory: each K step loads two A tiles from a 4 KiB ring
// (L1) and two B tiles from a per-thread ring of ring_bytes, 4 tile loads per 4 TDPBSSD as in a
// GEMM. Sched 0: the 4 loads, then the 4 dot products; 1: each load just before its first use
// (the GEMM kernel's sched 0); 2: software pipelined, the next step's tiles loaded as soon as
// this step's last reader of the register has issued. The rings are made before the clock
// starts.
template <int Sched>
double run_fed(int threads, long iters, long ring_bytes) {
    std::chrono::steady_clock::time_point t0, t1;
#pragma omp parallel num_threads(threads)
    {
        configure();
        const long tiles = ring_bytes / 1024, atiles = 4;
        auto* ring = static_cast<std::uint8_t*>(std::aligned_alloc(4096, ring_bytes));
        auto* a = static_cast<std::uint8_t*>(std::aligned_alloc(4096, atiles * 1024));
        std::memset(ring, 1, ring_bytes);
        std::memset(a, 1, atiles * 1024);
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
#pragma omp barrier
#pragma omp master
        t0 = std::chrono::steady_clock::now();
        long t = 0, u = 0;
        auto next = [&] {
            t = t + 2 < tiles ? t + 2 : 0;
            u = u + 2 < atiles ? u + 2 : 0;
        };
        if constexpr (Sched == 2) {
            _tile_loadd(0, a, 64);
            _tile_loadd(2, ring, 64);
            _tile_loadd(1, a + 1024, 64);
            _tile_loadd(3, ring + 1024, 64);
        }
        for (long i = 0; i < iters; ++i) {
            if constexpr (Sched == 0) {
                _tile_loadd(0, a + u * 1024, 64);
                _tile_loadd(2, ring + t * 1024, 64);
                _tile_loadd(1, a + (u + 1) * 1024, 64);
                _tile_loadd(3, ring + (t + 1) * 1024, 64);
                _tile_dpbssd(4, 0, 2);
                _tile_dpbssd(5, 0, 3);
                _tile_dpbssd(6, 1, 2);
                _tile_dpbssd(7, 1, 3);
                next();
            } else if constexpr (Sched == 1) {
                _tile_loadd(0, a + u * 1024, 64);
                _tile_loadd(2, ring + t * 1024, 64);
                _tile_dpbssd(4, 0, 2);
                _tile_loadd(3, ring + (t + 1) * 1024, 64);
                _tile_dpbssd(5, 0, 3);
                _tile_loadd(1, a + (u + 1) * 1024, 64);
                _tile_dpbssd(6, 1, 2);
                _tile_dpbssd(7, 1, 3);
                next();
            } else {
                next();
                _tile_dpbssd(4, 0, 2);
                _tile_dpbssd(5, 0, 3);
                _tile_loadd(0, a + u * 1024, 64);
                _tile_dpbssd(6, 1, 2);
                _tile_loadd(2, ring + t * 1024, 64);
                _tile_dpbssd(7, 1, 3);
                _tile_loadd(1, a + (u + 1) * 1024, 64);
                _tile_loadd(3, ring + (t + 1) * 1024, 64);
            }
        }
#pragma omp barrier
#pragma omp master
        t1 = std::chrono::steady_clock::now();
        _tile_stored(4, a, 64);
        _tile_release();
        std::free(ring);
        std::free(a);
    }
    double s = std::chrono::duration<double>(t1 - t0).count();
    return 2.0 * 16 * 16 * 64 * 4.0 * iters * threads / s;
}

}  // namespace

int main(int argc, char** argv) {
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        std::fprintf(stderr, "arch_prctl(ARCH_REQ_XCOMP_PERM) failed: no AMX tile data\n");
        return 1;
    }
    const long iters = 2000000;
    run<false>(1, iters / 10);  // warm-up (frequency ramp)
    for (int a = 1; a < argc; ++a) {
        int t = std::atoi(argv[a]);
        double i8 = run<false>(t, iters);
        double bf = run<true>(t, iters);
        std::printf("{\"bench\": \"amx_peak\", \"threads\": %d, \"int8_tops\": %.3f, "
                    "\"bf16_tflops\": %.3f, \"int8_tops_per_thread\": %.3f}\n",
                    t, i8 / 1e12, bf / 1e12, i8 / 1e12 / t);
        std::fflush(stdout);
        if (std::getenv("AMX_FEED") == nullptr) continue;
        for (long ring : {8L << 10, 1L << 20, 32L << 20}) {
            const double r[3] = {run_fed<0>(t, iters / 4, ring), run_fed<1>(t, iters / 4, ring),
                                 run_fed<2>(t, iters / 4, ring)};
            std::printf("{\"bench\": \"amx_fed\", \"threads\": %d, \"ring_bytes\": %ld, "
                        "\"int8_tops_sched\": [%.3f, %.3f, %.3f]}\n",
                        t, ring, r[0] / 1e12, r[1] / 1e12, r[2] / 1e12);
            std::fflush(stdout);
        }
    }
    return 0;
}
