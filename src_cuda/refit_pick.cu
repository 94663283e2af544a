// The refit's choice of entries (emulinalg/backends/cupy/refit.py: refit_pick), the same
// entries as emulinalg.algorithm.refit.cancelled_entries: per output entry and measure (the
// modulus; for complex results each part too) the ratio q of the computed magnitude to the
// line bound, in the generic code's float64 operation order (no FMA), then
//
//   refit_low     per measure the smallest positive q (atomicMin of the bits: q >= 0, so the
//                 bits order as the values), one atomic per block and measure
//   refit_select  per measure the flat indices of the entries with q == 0, and of those with
//                 0 < q <= thr (thr = low 2**REFIT_SPREAD_BITS) with their q, appended through
//                 atomic counters (the host sorts them), and a histogram of the candidates'
//                 log2(q / low) in kNarrowBins bins per bit: where a measure has more
//                 candidates than the buffer holds (a complex result's modulus rarely
//                 cancels, so many entries lie within the spread), the host narrows thr to a
//                 bin edge that still holds the REFIT_ENTRIES smallest and runs it again
//                 (refit.narrowed_thresholds); more zeros than the buffer holds, or a
//                 narrowed count still above it, send the choice back to the generic code.
//                 Where skip points at a nonzero word the launch returns at once (the
//                 narrowed pass of a pick left on the device, needed only after an overflow)
//
// Parts are (B, m, n) contiguous (T float or double); the line factors a1, a2 (B m) and
// b1, b2 (B n) are refit.line_factors'; ``exclude`` (uint8, or null) marks entries taken from
// the native product (q = inf).

namespace {

constexpr int kThreads = 256;
constexpr int kNarrowBins = 8;   // bins per bit of q / low: refit.NARROW_BINS_PER_BIT
constexpr int kHistBins = 64;    // REFIT_SPREAD_BITS * kNarrowBins
#define EMUL_INF __longlong_as_double(0x7ff0000000000000LL)

__device__ __forceinline__ double part_ratio(double p, double a1, double b1, double a2, double b2) {
    // ((|p| a1) b1) (a2 b2), each product rounded: refit.cancel_ratios
    return __dmul_rn(__dmul_rn(__dmul_rn(fabs(p), a1), b1), __dmul_rn(a2, b2));
}

// Entries per thread and step: their loads are issued together (one entry of 4-8 bytes per
// thread in flight leaves the memory system far below its rate).
constexpr int kPer = 4;

// A grid-stride walk over groups of kPer consecutive flat indices i = (b m + r) n + j of
// (B, m, n) entries that keeps (b, r, j) of a group's first entry without a 64-bit division
// per step: each step adds the stride's own quotient and remainder.
struct Walk {
  long long i, b, r, total, stride, dr;
  int j, dj, m, n;
  __device__ Walk(long long total_, int m_, int n_)
      : i((blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x) * kPer), total(total_),
        stride(static_cast<long long>(gridDim.x) * kThreads * kPer), m(m_), n(n_) {
    const long long row = i / n;
    j = static_cast<int>(i - row * n);
    b = row / m;
    r = row - b * m;
    dr = stride / n;
    dj = static_cast<int>(stride - dr * n);
  }
  __device__ bool more() const { return i < total; }
  __device__ void next() {
    i += stride;
    j += dj;
    r += dr;
    if (j >= n) {
      j -= n;
      ++r;
    }
    if (r >= m) {  // into a later matrix of the batch
      b += r / m;
      r %= m;
    }
  }
  // The lines (row of A: b m + r, column of B: b n + j, batch-flattened) of entry i + u.
  __device__ void lines(int u, long long& row, long long& col) const {
    long long bb = b, rr = r;
    int jj = j + u;
    while (jj >= n) {  // at most kPer - 1 rows on (n < kPer)
      jj -= n;
      ++rr;
    }
    if (rr >= m) {
      bb += rr / m;
      rr %= m;
    }
    row = bb * m + rr;
    col = bb * n + jj;
  }
};

// The ratios q[u][w] of the group's entries i + u (inf beyond total), per measure w.
template <typename T, bool Cplx>
__device__ __forceinline__ void ratios(const T* re, const T* im, const double* a1,
                                       const double* a2, const double* b1, const double* b2,
                                       const unsigned char* exclude, const Walk& w,
                                       double (&q)[kPer][3]) {
    T x[kPer], y[kPer];
    bool ex[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {  // the loads first, all of them
        const long long i = w.i + u;
        const bool in = i < w.total;
        x[u] = in ? re[i] : T(0);
        y[u] = (Cplx && in) ? im[i] : T(0);
        ex[u] = !in || (exclude != nullptr && exclude[i] != 0);
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
        long long row, col;
        w.lines(u, row, col);
        if (w.i + u >= w.total) row = col = 0;  // a line that exists; the entry is excluded
        const double f1 = a1[row], f2 = a2[row], g1 = b1[col], g2 = b2[col];
        const double v0 = part_ratio(static_cast<double>(x[u]), f1, g1, f2, g2);
        if (!Cplx) {
            q[u][0] = (!ex[u] && v0 >= 0) ? v0 : EMUL_INF;  // nan -> inf
            continue;
        }
        const double v1 = part_ratio(static_cast<double>(y[u]), f1, g1, f2, g2);
        const double mod = __dsqrt_rn(__dadd_rn(__dmul_rn(v0, v0), __dmul_rn(v1, v1)));
        q[u][0] = (!ex[u] && mod >= 0) ? mod : EMUL_INF;
        const double w0 = v0 > 0 ? v0 : EMUL_INF, w1 = v1 > 0 ? v1 : EMUL_INF;  // a zero part
        q[u][1] = (!ex[u] && w0 >= 0) ? w0 : EMUL_INF;
        q[u][2] = (!ex[u] && w1 >= 0) ? w1 : EMUL_INF;
    }
}

}  // namespace

template <typename T, bool Cplx>
__global__ void __launch_bounds__(kThreads)
    refit_low(const T* re, const T* im, const double* a1, const double* a2, const double* b1,
              const double* b2, const unsigned char* exclude, long long total, int m, int n,
              unsigned long long* low) {
    constexpr int W = Cplx ? 3 : 1;
    double best[W];
    for (int w = 0; w < W; ++w) best[w] = EMUL_INF;
    double q[kPer][3];
    for (Walk it(total, m, n); it.more(); it.next()) {
        ratios<T, Cplx>(re, im, a1, a2, b1, b2, exclude, it, q);
#pragma unroll
        for (int u = 0; u < kPer; ++u)
            for (int w = 0; w < W; ++w)
                if (q[u][w] > 0 && q[u][w] < best[w]) best[w] = q[u][w];
    }
    __shared__ double part[W][kThreads / 32];
    for (int w = 0; w < W; ++w) {
        double v = best[w];
        for (int off = 16; off > 0; off >>= 1) v = fmin(v, __shfl_down_sync(0xffffffffu, v, off));
        if ((threadIdx.x & 31) == 0) part[w][threadIdx.x >> 5] = v;
    }
    __syncthreads();
    if (threadIdx.x < W) {
        double v = EMUL_INF;
        for (int k = 0; k < kThreads / 32; ++k) v = fmin(v, part[threadIdx.x][k]);
        if (v < EMUL_INF) atomicMin(low + threadIdx.x, static_cast<unsigned long long>(__double_as_longlong(v)));
    }
}

template <typename T, bool Cplx>
__global__ void __launch_bounds__(kThreads)
    refit_select(const T* re, const T* im, const double* a1, const double* a2, const double* b1,
                 const double* b2, const unsigned char* exclude, long long total, int m, int n,
                 const double* thr, const double* low, int cap, unsigned long long* counts,
                 long long* zero_idx, long long* cand_idx, double* cand_q,
                 unsigned long long* hist, const unsigned long long* skip) {
    if (skip != nullptr && *skip) return;  // the whole grid: no barrier is reached
    constexpr int W = Cplx ? 3 : 1;
    __shared__ unsigned int bins[W * kHistBins];  // this block's histogram, added once at the end
    for (int k = threadIdx.x; k < W * kHistBins; k += kThreads) bins[k] = 0;
    __syncthreads();
    double q[kPer][3];
    for (Walk it(total, m, n); it.more(); it.next()) {
        ratios<T, Cplx>(re, im, a1, a2, b1, b2, exclude, it, q);
        for (int u = 0; u < kPer; ++u) {
            for (int w = 0; w < W; ++w) {
                const double v = q[u][w];
                if (v == 0) {
                    unsigned long long s = atomicAdd(counts + 2 * w, 1ull);
                    if (s < static_cast<unsigned long long>(cap)) zero_idx[w * cap + s] = it.i + u;
                } else if (v <= thr[w]) {
                    unsigned long long s = atomicAdd(counts + 2 * w + 1, 1ull);
                    if (s < static_cast<unsigned long long>(cap)) {
                        cand_idx[w * cap + s] = it.i + u;
                        cand_q[w * cap + s] = v;
                    }
                    int b = static_cast<int>(floor(log2(v / low[w]) * kNarrowBins));
                    b = b < 0 ? 0 : (b >= kHistBins ? kHistBins - 1 : b);
                    atomicAdd(bins + w * kHistBins + b, 1u);
                }
            }
        }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < W * kHistBins; k += kThreads)
        if (bins[k]) atomicAdd(hist + k, static_cast<unsigned long long>(bins[k]));
}
