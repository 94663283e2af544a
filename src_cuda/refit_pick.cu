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
// the native product (q = inf). Both kernels walk rows 0, rstep, 2 rstep, ... of each matrix
// (refit_low: rstep > 1 for a sample of rows; total: the entries walked) in blocks of (32, 8)
// threads: thread x of block column bx takes columns 128 bx + 4 x .. + 3, whose factors stay in
// its registers, and rows y, y + 8, ... of the block row's share (grid (ceil(n / 128), any)).

namespace {

constexpr int kThreads = 256;
constexpr int kNarrowBins = 8;   // bins per bit of q / low: refit.NARROW_BINS_PER_BIT
constexpr int kHistBins = 64;    // REFIT_SPREAD_BITS * kNarrowBins
#define EMUL_INF __longlong_as_double(0x7ff0000000000000LL)

__device__ __forceinline__ double part_ratio(double p, double a1, double b1, double a2, double b2) {
    // ((|p| a1) b1) (a2 b2), each product rounded: refit.cancel_ratios
    return __dmul_rn(__dmul_rn(__dmul_rn(fabs(p), a1), b1), __dmul_rn(a2, b2));
}

constexpr int kCols = 4;  // columns per thread (blockDim.x = 32: 128 per block column)

// kCols consecutive entries from p (16-byte aligned) in 16-byte loads.
__device__ __forceinline__ void load_cols(const double* p, double (&v)[kCols]) {
    const double2 a = reinterpret_cast<const double2*>(p)[0];
    const double2 b = reinterpret_cast<const double2*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ __forceinline__ void load_cols(const float* p, float (&v)[kCols]) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}

// Calls visit(i, q) for the entries i (flat index) of the thread's columns and rows, q[w] their
// ratios per measure (inf: excluded, not finite); see above for the walk.
template <typename T, bool Cplx, class Visit>
__device__ __forceinline__ void walk(const T* __restrict__ re, const T* __restrict__ im,
                                     const double* __restrict__ a1, const double* __restrict__ a2,
                                     const double* __restrict__ b1, const double* __restrict__ b2,
                                     const unsigned char* __restrict__ exclude, int B, int m,
                                     int n, int rstep, Visit visit) {
    const int j0 = (blockIdx.x * 32 + threadIdx.x) * kCols;
    if (j0 >= n) return;
    // every row's kCols columns 16-byte aligned in both parts: vector loads
    const bool vec = n % kCols == 0 &&
                     ((reinterpret_cast<unsigned long long>(re) |
                       reinterpret_cast<unsigned long long>(Cplx ? im : re)) & 15) == 0;
    const int ms = (m + rstep - 1) / rstep;  // walked rows per matrix
    const long long rows = static_cast<long long>(B) * ms;
    long long bcur = -1;
    double g1[kCols], g2[kCols];
    for (long long s = blockIdx.y * 8LL + threadIdx.y; s < rows; s += gridDim.y * 8LL) {
        const long long b = s / ms;
        const long long R = b * m + (s - b * ms) * rstep;  // the batch-flattened row
        if (b != bcur) {  // the columns' factors of matrix b
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                const bool in = j0 + c < n;
                g1[c] = in ? b1[b * n + j0 + c] : 0.0;
                g2[c] = in ? b2[b * n + j0 + c] : 0.0;
            }
            bcur = b;
        }
        const double f1 = a1[R], f2 = a2[R];
        const long long i0 = R * n + j0;
        T x[kCols], y[kCols];
        bool ex[kCols];
        if (vec && j0 + kCols <= n) {  // the loads first, all of them: 16-byte vectors
            load_cols(re + i0, x);
            if (Cplx) load_cols(im + i0, y);
        } else {
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                const bool in = j0 + c < n;
                x[c] = in ? re[i0 + c] : T(0);
                y[c] = (Cplx && in) ? im[i0 + c] : T(0);
            }
        }
#pragma unroll
        for (int c = 0; c < kCols; ++c)
            ex[c] = j0 + c >= n || (exclude != nullptr && exclude[i0 + c] != 0);
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            if (j0 + c >= n) break;
            double q[3];
            const double v0 = part_ratio(static_cast<double>(x[c]), f1, g1[c], f2, g2[c]);
            if (!Cplx) {
                q[0] = (!ex[c] && v0 >= 0) ? v0 : EMUL_INF;  // nan -> inf
            } else {
                const double v1 = part_ratio(static_cast<double>(y[c]), f1, g1[c], f2, g2[c]);
                const double mod = __dsqrt_rn(__dadd_rn(__dmul_rn(v0, v0), __dmul_rn(v1, v1)));
                q[0] = (!ex[c] && mod >= 0) ? mod : EMUL_INF;
                const double w0 = v0 > 0 ? v0 : EMUL_INF, w1 = v1 > 0 ? v1 : EMUL_INF;  // zero part
                q[1] = (!ex[c] && w0 >= 0) ? w0 : EMUL_INF;
                q[2] = (!ex[c] && w1 >= 0) ? w1 : EMUL_INF;
            }
            visit(i0 + c, q);
        }
    }
}

}  // namespace

template <typename T, bool Cplx>
__global__ void __launch_bounds__(kThreads)
    refit_low(const T* re, const T* im, const double* a1, const double* a2, const double* b1,
              const double* b2, const unsigned char* exclude, long long total, int B, int m,
              int n, int rstep, unsigned long long* low) {
    constexpr int W = Cplx ? 3 : 1;
    double best[W];
    for (int w = 0; w < W; ++w) best[w] = EMUL_INF;
    walk<T, Cplx>(re, im, a1, a2, b1, b2, exclude, B, m, n, rstep,
                  [&](long long, const double (&q)[3]) {
                      for (int w = 0; w < W; ++w)
                          if (q[w] > 0 && q[w] < best[w]) best[w] = q[w];
                  });
    const int t = threadIdx.y * 32 + threadIdx.x;
    __shared__ double part[W][kThreads / 32];
    for (int w = 0; w < W; ++w) {
        double v = best[w];
        for (int off = 16; off > 0; off >>= 1) v = fmin(v, __shfl_down_sync(0xffffffffu, v, off));
        if ((t & 31) == 0) part[w][t >> 5] = v;
    }
    __syncthreads();
    if (t < W) {
        double v = EMUL_INF;
        for (int k = 0; k < kThreads / 32; ++k) v = fmin(v, part[t][k]);
        if (v < EMUL_INF) atomicMin(low + t, static_cast<unsigned long long>(__double_as_longlong(v)));
    }
}

template <typename T, bool Cplx>
__global__ void __launch_bounds__(kThreads)
    refit_select(const T* re, const T* im, const double* a1, const double* a2, const double* b1,
                 const double* b2, const unsigned char* exclude, long long total, int B, int m,
                 int n, int rstep, const double* thr, const double* low, int cap,
                 unsigned long long* counts, long long* zero_idx, long long* cand_idx,
                 double* cand_q, unsigned long long* hist, const unsigned long long* skip) {
    if (skip != nullptr && *skip) return;  // the whole grid: no barrier is reached
    constexpr int W = Cplx ? 3 : 1;
    const int t = threadIdx.y * 32 + threadIdx.x;
    __shared__ unsigned int bins[W * kHistBins];  // this block's histogram, added once at the end
    for (int k = t; k < W * kHistBins; k += kThreads) bins[k] = 0;
    __syncthreads();
    walk<T, Cplx>(re, im, a1, a2, b1, b2, exclude, B, m, n, rstep,
                  [&](long long i, const double (&q)[3]) {
        for (int w = 0; w < W; ++w) {
            const double v = q[w];
            if (v == 0) {
                unsigned long long s = atomicAdd(counts + 2 * w, 1ull);
                if (s < static_cast<unsigned long long>(cap)) zero_idx[w * cap + s] = i;
            } else if (v <= thr[w]) {
                unsigned long long s = atomicAdd(counts + 2 * w + 1, 1ull);
                if (s < static_cast<unsigned long long>(cap)) {
                    cand_idx[w * cap + s] = i;
                    cand_q[w * cap + s] = v;
                }
                int b = static_cast<int>(floor(log2(v / low[w]) * kNarrowBins));
                b = b < 0 ? 0 : (b >= kHistBins ? kHistBins - 1 : b);
                atomicAdd(bins + w * kHistBins + b, 1u);
            }
        }
    });
    __syncthreads();
    for (int k = t; k < W * kHistBins; k += kThreads)
        if (bins[k]) atomicAdd(hist + k, static_cast<unsigned long long>(bins[k]));
}
