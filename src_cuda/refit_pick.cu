// The refit's choice of entries (emulinalg/backends/cupy/refit.py: refit_pick), the same
// entries as emulinalg.algorithm.refit.cancelled_entries: per output entry and measure (the
// modulus; for complex results each part too) the ratio q of the computed magnitude to the
// line bound, in the generic code's float64 operation order (no FMA), then
//
//   refit_low     per measure the smallest positive q (atomicMin of the bits: q >= 0, so the
//                 bits order as the values), one atomic per block and measure
//   refit_select  per measure the flat indices of the entries with q == 0, and of those with
//                 0 < q <= thr (thr = low 2**REFIT_SPREAD_BITS) with their q, appended through
//                 atomic counters (in any order: the synchronous pick sorts them on the host,
//                 a pick left on the device by refit_choose), and a histogram of the candidates'
//                 log2(q / low) in kNarrowBins bins per bit: where a measure has more
//                 candidates than the buffer holds (a complex result's modulus rarely
//                 cancels, so many entries lie within the spread), the host narrows thr to a
//                 bin edge that still holds the REFIT_ENTRIES smallest and runs it again
//                 (refit.narrowed_thresholds); more zeros than the buffer holds, or a
//                 narrowed count still above it, send the choice back to the generic code.
//                 Where skip points at a nonzero word the launch returns at once (the
//                 narrowed pass of a pick left on the device, needed only after an overflow)
//   refit_choose  a pick left on the device, from refit_select's buffers (see there)
//
// Parts are (B, m, n) contiguous (T float or double); the line factors a1, a2 (B m) and
// b1, b2 (B n) are refit.line_factors'; ``exclude`` (uint8, or null) marks entries taken from
// the native product (q = inf). refit_low and refit_select walk rows 0, rstep, 2 rstep, ... of each matrix
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

// refit_choose: the pick of a deferred refit from refit_select's buffers in one launch of one
// block: per measure refit.chosen of its valid slots, and their union in refit.merged's form
// (the tests' reference: tests/_helpers.py chosen_fixed per measure, then refit.merged).
// Per measure two lists: the zeros (the REFIT_ENTRIES smallest flat indices) and the
// candidates, trimmed to the spread of their smallest ratio, low 2**REFIT_SPREAD_BITS (low
// times ``spread``, as refit.spread_threshold), of which the REFIT_ENTRIES smallest (q, index)
// are kept (ties of q in flat order). Each list's choice is a radix selection on a 128-bit key
// (hi, lo): hi = bits(q) - bits(low) (0 for the zeros; q >= 0, so the bits order as the values,
// and the kept ones span few bits), lo = the index with its sign bit flipped (int64 order). A
// round narrows every list's group (the keys holding its REFIT_ENTRIES-th smallest) by a byte of
// the key until the group fits in shared memory; then the keys below the group and the group's
// are gathered, the group's smallest taken by rank, and the lists' picks sorted into the output
// (W = 1: every pick, as chosen_fixed; W > 1: each index once, as merged). A round that finds
// the whole group in one byte also fixes the bytes after it that all the group's keys share
// (ties of q, indices of one range), so that ties cost no round per byte.

namespace {

constexpr int kGroup = 128;  // a group small enough to rank in shared memory
constexpr int kChooseThreads = 512;
constexpr unsigned long long kSign = 1ull << 63;
constexpr unsigned long long kInfBits = 0x7ff0000000000000ull;
constexpr long long kNoIndex = 0x7fffffffffffffffLL;  // refit._NO_INDEX

// A list's selection state: its slots, the key's bytes and the group [gl, gu] ({hi, lo} each).
struct ChooseList {
    unsigned long long gl[2], gu[2];
    unsigned long long base, limit;  // candidates: bits(low), the bits of the largest kept q
    int n;       // slots to read (the count clamped to the buffer)
    int digits;  // bytes of hi (the lo word's 8 follow)
    int t;       // the next byte to decide
    int need;    // entries still to take from the group
    int active;  // the group is still above kGroup keys
};

constexpr int kChunk = 4;  // slots per thread and step: their loads in flight together

// Slots i0 + k blockDim.x + threadIdx.x (k < kChunk) of a list of n: the bits of their ratios
// (u, where q: a candidates' list) and their indices' lo keys (lo, where with_lo); 0 beyond n.
__device__ __forceinline__ void load_chunk(const double* q, const long long* idx, int n, int i0,
                                           bool with_lo, unsigned long long (&u)[kChunk],
                                           unsigned long long (&lo)[kChunk]) {
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
        const int i = i0 + k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
        const bool in = i < n;
        u[k] = q != nullptr && in ? static_cast<unsigned long long>(__double_as_longlong(q[i])) : 0;
        lo[k] = with_lo && in ? static_cast<unsigned long long>(idx[i]) ^ kSign : 0;
    }
}

// The key of a slot of s from its loads (false: a candidate beyond the spread).
__device__ __forceinline__ bool slot_key(const ChooseList& s, bool cand, unsigned long long u,
                                         unsigned long long lo, unsigned long long (&k)[2]) {
    if (cand && u > s.limit) return false;
    k[0] = cand ? u - s.base : 0;
    k[1] = lo;
    return true;
}

__device__ __forceinline__ bool key_less(const unsigned long long (&a)[2],
                                         const unsigned long long (&b)[2]) {
    return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]);
}

// Whether key k lies in the group of s (only the decided bytes differ between gl and gu: in
// the hi bytes' rounds the lo word is not read, gl/gu's lo words are 0 and ~0 then).
__device__ __forceinline__ bool in_group(const ChooseList& s, const unsigned long long (&k)[2]) {
    return !key_less(k, s.gl) && !key_less(s.gu, k);
}

// Byte t of the key (most significant first: digits bytes of hi, then 8 of lo): its word
// (0: hi, 1: lo) and the shift of its bits there.
__device__ __forceinline__ int byte_word(const ChooseList& s, int t) {
    return t < s.digits ? 0 : 1;
}
__device__ __forceinline__ int byte_shift(const ChooseList& s, int t) {
    return t < s.digits ? 8 * (s.digits - 1 - t) : 8 * (7 - (t - s.digits));
}

// Byte t of the two words x (selected, not indexed: x stays in registers).
__device__ __forceinline__ unsigned long long byte_of(const ChooseList& s, int t,
                                                      const unsigned long long (&x)[2]) {
    return ((byte_word(s, t) ? x[1] : x[0]) >> byte_shift(s, t)) & 0xff;
}

__device__ __forceinline__ unsigned key_byte(const ChooseList& s,
                                             const unsigned long long (&k)[2]) {
    return static_cast<unsigned>(byte_of(s, s.t, k));
}

// The group narrowed to the keys whose byte s.t is b; the next byte.
__device__ __forceinline__ void fix_byte(ChooseList& s, unsigned long long b) {
    const int shift = byte_shift(s, s.t);
    const unsigned long long mask = 0xffull << shift;
    unsigned long long& gl = byte_word(s, s.t) ? s.gl[1] : s.gl[0];
    unsigned long long& gu = byte_word(s, s.t) ? s.gu[1] : s.gu[0];
    gl = (gl & ~mask) | (b << shift);
    gu = (gu & ~mask) | (b << shift);
    s.t += 1;
}

// Adds a warp's keys to the histogram h, one atomic where every key of the warp has the same
// byte (ties of q would otherwise queue on one counter). All 32 lanes call it.
__device__ __forceinline__ void count_byte(unsigned* h, bool in, unsigned b) {
    const unsigned lanes = __ballot_sync(0xffffffffu, in);
    if (lanes == 0) return;
    const int first = __ffs(static_cast<int>(lanes)) - 1;
    const unsigned b0 = __shfl_sync(0xffffffffu, b, first);
    if (__ballot_sync(0xffffffffu, in && b != b0) == 0) {
        if ((threadIdx.x & 31) == static_cast<unsigned>(first))
            atomicAdd(h + b0, static_cast<unsigned>(__popc(lanes)));
    } else if (in) {
        atomicAdd(h + b, 1u);
    }
}

// One warp: the byte of s's next digit that holds its need-th smallest key (h: the group's
// keys per byte), the group narrowed to it; where the group holds at most need keys, all of
// them are taken. Where the whole group had that byte, the following bytes that all its keys
// share (the bits of ``diff``, the AND ^ OR of its keys, that are 0; ``same``, their AND) are
// fixed too (ties of q, indices of one range), in a hi round only within the hi word (its keys'
// lo were not read).
__device__ __forceinline__ void narrow_group(ChooseList& s, const unsigned* h,
                                             const unsigned long long (&diff)[2],
                                             const unsigned long long (&same)[2]) {
    const int lane = threadIdx.x & 31;
    const unsigned need = static_cast<unsigned>(s.need);  // before the shuffles: one lane writes s
    unsigned c[8], sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += c[j] = h[8 * lane + j];
    unsigned incl = sum;  // inclusive scan over the lanes
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    const unsigned total = __shfl_sync(0xffffffffu, incl, 31);
    const unsigned before = incl - sum;
    if (total <= need) {
        if (lane == 0) s.active = 0;
        return;
    }
    if (!(before < need && need <= incl)) return;
    unsigned below = before, cj = 0;
    int j = -1;
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // unrolled: c stays in registers
        if (j >= 0) continue;
        if (below + c[k] >= need) j = k, cj = c[k];
        else below += c[k];
    }
    const int end = s.t < s.digits ? s.digits : s.digits + 8;
    fix_byte(s, static_cast<unsigned long long>(8 * lane + j));
    while (cj == total && s.t < end && byte_of(s, s.t, diff) == 0)
        fix_byte(s, byte_of(s, s.t, same));
    s.need = static_cast<int>(need - below);
    s.active = cj > static_cast<unsigned>(kGroup) && s.t < s.digits + 8;  // else identical keys
}

// A list's state before the rounds (n set): a candidates' list (``cand``) keeps the ratios
// within the spread of the smallest, low = kmin (none where kmax is a NaN's), and its key's hi
// spans the bytes of bits(min(thr, kmax)) - bits(low); a zeros' list starts below the bytes its
// keys share (kmin, kmax: the smallest and largest lo).
__device__ __forceinline__ void init_list(ChooseList& s, bool cand, unsigned long long kmin,
                                          unsigned long long kmax, double spread, int entries) {
    s.base = 0, s.limit = ~0ull, s.digits = 0, s.t = 0;
    s.gl[0] = s.gl[1] = 0;
    s.gu[1] = ~0ull;
    if (cand) {  // low 2**REFIT_SPREAD_BITS: refit.spread_threshold's product
        const double thr = __dmul_rn(__longlong_as_double(static_cast<long long>(kmin)), spread);
        const unsigned long long tb = static_cast<unsigned long long>(__double_as_longlong(thr));
        s.base = kmin;
        s.limit = tb < kInfBits ? tb : kInfBits - 1;  // q < inf
        const unsigned long long top = kmax < s.limit ? kmax : s.limit;  // the largest kept
        if (kmin >= kInfBits || kmax > kInfBits || s.limit < kmin) s.n = 0;
        else s.digits = (64 - __clzll(static_cast<long long>(top - kmin)) + 7) / 8;
    } else if (s.n > 0) {
        const unsigned long long d = kmin ^ kmax;
        s.t = d == 0 ? 8 : __clzll(static_cast<long long>(d)) / 8;
        const unsigned long long rest = s.t == 8 ? 0 : ~0ull >> (8 * s.t);
        s.gl[1] = kmin & ~rest;
        s.gu[1] = kmin | rest;
    }
    s.gu[0] = s.digits == 8 ? ~0ull : (1ull << (8 * s.digits)) - 1;
    s.need = entries;
    s.active = s.n > kGroup && s.t < s.digits + 8;
}

}  // namespace

// counts (2W,) int64: per measure the zeros' and the candidates' counts (clamped to [0, cap]);
// zero_idx, cand_idx (W, cap) int64 and cand_q (W, cap) float64: refit_select's buffers;
// spread: refit.spread_threshold(1.0); E: refit.REFIT_ENTRIES. Writes idx (2W E,) int64, the
// chosen flat indices ascending then kNoIndex, and valid (same shape) idx < kNoIndex. One block
// of kChooseThreads threads (at least 2W E: the last step takes an output slot per thread).
template <int W, int E>
__global__ void __launch_bounds__(kChooseThreads)
    refit_choose(const long long* counts, const long long* zero_idx, const long long* cand_idx,
                 const double* cand_q, int cap, double spread, long long* idx, bool* valid) {
    constexpr int L = 2 * W;         // lists: 2w the zeros, 2w + 1 the candidates of measure w
    constexpr int N = L * E;              // output slots
    constexpr int kSlots = E + kGroup;    // per list: keys below the group, then the group
    static_assert(N <= kChooseThreads, "the compaction takes an output slot per thread");
    static_assert(E <= kGroup, "a group holds the keys still to take");
    __shared__ ChooseList lists[L];
    __shared__ unsigned hist[L][256];
    __shared__ unsigned long long keys[L][kSlots][2];
    __shared__ unsigned below_n[L], group_n[L];
    __shared__ unsigned long long kmin[L], kmax[L];
    __shared__ unsigned long long gand[L][2], gor[L][2];  // a round's groups: AND, OR of keys
    __shared__ long long picked[N], out[N];
    __shared__ int warp_firsts[kChooseThreads / 32];
    const int tid = threadIdx.x, nt = blockDim.x;
    const auto row = [&](int l) { return static_cast<long long>(l >> 1) * cap; };  // measure's
    const auto ratios = [&](int l) { return (l & 1) ? cand_q + row(l) : nullptr; };
    const auto indices = [&](int l) { return ((l & 1) ? cand_idx : zero_idx) + row(l); };

    if (tid < L) {
        kmin[tid] = ~0ull, kmax[tid] = 0;
        const long long c = counts[tid];
        lists[tid].n = c < 0 ? 0 : (c > cap ? cap : static_cast<int>(c));
        below_n[tid] = group_n[tid] = 0;
    }
    for (int x = tid; x < N; x += nt) picked[x] = out[x] = kNoIndex;
    __syncthreads();

    // Per list the smallest and largest of: the candidates' ratio bits (the smallest is low;
    // the largest finds a NaN, which takes none, as the host's min does), the zeros' lo key.
    for (int l = 0; l < L; ++l) {
        const bool cand = l & 1;
        const int n = lists[l].n;
        unsigned long long mn = ~0ull, mx = 0;
        for (int i0 = 0; i0 < n; i0 += kChunk * nt) {
            unsigned long long u[kChunk], lo[kChunk];
            load_chunk(ratios(l), indices(l), n, i0, !cand, u, lo);
#pragma unroll
            for (int k = 0; k < kChunk; ++k) {
                if (i0 + k * nt >= n) break;  // the block's last slots
                if (i0 + k * nt + tid >= n) continue;
                const unsigned long long v = cand ? u[k] : lo[k];
                mn = v < mn ? v : mn;
                mx = v > mx ? v : mx;
            }
        }
        if (n == 0) continue;  // the whole block
        for (int o = 16; o > 0; o >>= 1) {  // a warp's, then an atomic per warp
            const unsigned long long a = __shfl_down_sync(0xffffffffu, mn, o);
            const unsigned long long b = __shfl_down_sync(0xffffffffu, mx, o);
            mn = a < mn ? a : mn;
            mx = b > mx ? b : mx;
        }
        if ((tid & 31) == 0 && mn <= mx) atomicMin(kmin + l, mn), atomicMax(kmax + l, mx);
    }
    __syncthreads();
    if (tid < L) init_list(lists[tid], (tid & 1) != 0, kmin[tid], kmax[tid], spread, E);
    __syncthreads();

    // Rounds: every list still above kGroup keys narrows its group by a byte.
    for (;;) {
        bool any = false;
        for (int l = 0; l < L; ++l) any |= lists[l].active != 0;
        if (!any) break;
        for (int x = tid; x < L * 256; x += nt) (&hist[0][0])[x] = 0;
        if (tid < L) gand[tid][0] = gand[tid][1] = ~0ull, gor[tid][0] = gor[tid][1] = 0;
        __syncthreads();
        for (int l = 0; l < L; ++l) {
            const ChooseList s = lists[l];
            if (!s.active) continue;
            const bool with_lo = s.t >= s.digits, cand = l & 1;
            unsigned long long a[2] = {~0ull, ~0ull}, o[2] = {0, 0};
            for (int i0 = 0; i0 < s.n; i0 += kChunk * nt) {  // whole warps: count_byte's ballots
                unsigned long long u[kChunk], lo[kChunk];
                load_chunk(ratios(l), indices(l), s.n, i0, with_lo, u, lo);
#pragma unroll
                for (int k = 0; k < kChunk; ++k) {
                    if (i0 + k * nt >= s.n) break;  // the whole block at once: whole warps
                    unsigned long long key[2];
                    const bool in = i0 + k * nt + tid < s.n &&
                                    slot_key(s, cand, u[k], lo[k], key) && in_group(s, key);
                    count_byte(hist[l], in, in ? key_byte(s, key) : 0);
                    if (in) a[0] &= key[0], a[1] &= key[1], o[0] |= key[0], o[1] |= key[1];
                }
            }
            for (int d = 16; d > 0; d >>= 1) {  // a warp's, then an atomic per warp
                a[0] &= __shfl_down_sync(0xffffffffu, a[0], d);
                a[1] &= __shfl_down_sync(0xffffffffu, a[1], d);
                o[0] |= __shfl_down_sync(0xffffffffu, o[0], d);
                o[1] |= __shfl_down_sync(0xffffffffu, o[1], d);
            }
            if ((tid & 31) == 0) {
                atomicAnd(&gand[l][0], a[0]), atomicAnd(&gand[l][1], a[1]);
                atomicOr(&gor[l][0], o[0]), atomicOr(&gor[l][1], o[1]);
            }
        }
        __syncthreads();
        const int l = tid >> 5;
        if (l < L && lists[l].active) {
            const unsigned long long diff[2] = {gand[l][0] ^ gor[l][0], gand[l][1] ^ gor[l][1]};
            const unsigned long long same[2] = {gand[l][0], gand[l][1]};
            narrow_group(lists[l], hist[l], diff, same);
        }
        __syncthreads();
    }

    // The keys below each group and the group's (the first kGroup where its keys are identical).
    for (int l = 0; l < L; ++l) {
        const ChooseList s = lists[l];
        for (int i0 = 0; i0 < s.n; i0 += kChunk * nt) {
            unsigned long long u[kChunk], lo[kChunk];
            load_chunk(ratios(l), indices(l), s.n, i0, true, u, lo);
#pragma unroll
            for (int k = 0; k < kChunk; ++k) {
                if (i0 + k * nt >= s.n) break;
                unsigned long long key[2];
                if (i0 + k * nt + tid >= s.n || !slot_key(s, l & 1, u[k], lo[k], key)) continue;
                unsigned slot = kSlots;
                if (key_less(key, s.gl)) {
                    const unsigned at = atomicAdd(below_n + l, 1u);
                    if (at < E) slot = at;
                } else if (!key_less(s.gu, key)) {
                    const unsigned at = atomicAdd(group_n + l, 1u);
                    if (at < kGroup) slot = E + at;
                }
                if (slot < kSlots) keys[l][slot][0] = key[0], keys[l][slot][1] = key[1];
            }
        }
    }
    __syncthreads();

    // Each list's pick: the keys below its group, then the group's smallest by rank.
    for (int x = tid; x < L * kSlots; x += nt) {
        const int l = x / kSlots, r = x % kSlots;
        const int nb = below_n[l] < E ? static_cast<int>(below_n[l]) : E;
        const int ng = group_n[l] < kGroup ? static_cast<int>(group_n[l]) : kGroup;
        const unsigned long long(&k)[2] = keys[l][r];
        int at = -1;
        if (r < nb) {
            at = r;
        } else if (r >= E && r - E < ng) {
            int rank = r - E;  // the group in slot order where all of it is taken
            if (nb + ng > E) {
                rank = 0;
                for (int j = 0; j < ng; ++j) {
                    const unsigned long long(&o)[2] = keys[l][E + j];
                    rank += key_less(o, k) || (o[0] == k[0] && o[1] == k[1] && j < r - E);
                }
            }
            at = nb + rank < E ? nb + rank : -1;
        }
        if (at >= 0) picked[l * E + at] = static_cast<long long>(k[1] ^ kSign);
    }
    __syncthreads();

    // Each list's picks sorted, then all merged: a pick's place is its place in its list and,
    // in every other list, the count of the picks below it (those of earlier lists first on
    // ties), found by bisection.
    for (int x = tid; x < N; x += nt) {
        const int l0 = x - x % E;
        const long long v = picked[x];
        int rank = 0;
        for (int j = l0; j < l0 + E; ++j) rank += picked[j] < v || (picked[j] == v && j < x);
        out[l0 + rank] = v;
    }
    __syncthreads();
    for (int x = tid; x < N; x += nt) {
        const int l = x / E;
        const long long v = out[x];
        int at = x % E;
        for (int o = 0; o < L; ++o) {
            if (o == l) continue;
            const long long* list = out + o * E;
            int lo = 0, hi = E;  // the first of list not before v
            while (lo < hi) {
                const int mid = (lo + hi) / 2;
                if (list[mid] < v || (o < l && list[mid] == v)) lo = mid + 1;
                else hi = mid;
            }
            at += lo;
        }
        picked[at] = v;
    }
    __syncthreads();
    const long long* result = picked;
    if (W > 1) {  // each index once (merged): the first of each run, compacted by a ballot scan
        const bool first = tid < N && picked[tid] < kNoIndex &&
                           (tid == 0 || picked[tid] != picked[tid - 1]);
        const unsigned lanes = __ballot_sync(0xffffffffu, first);
        if ((tid & 31) == 0) warp_firsts[tid >> 5] = __popc(lanes);
        __syncthreads();
        int at = __popc(lanes & ((1u << (tid & 31)) - 1)), total = 0;
        for (int w = 0; w < nt / 32; ++w) {
            at += w < (tid >> 5) ? warp_firsts[w] : 0;
            total += warp_firsts[w];
        }
        if (first) out[at] = picked[tid];  // at < total
        if (tid >= total && tid < N) out[tid] = kNoIndex;
        __syncthreads();
        result = out;
    }
    for (int x = tid; x < N; x += nt) idx[x] = result[x], valid[x] = result[x] < kNoIndex;
}

#ifndef __CUDACC_RTC__
// Standalone nvcc build (register/spill check); the backend instantiates what it needs.
#define EMU_REFIT_INSTANCES(T, CPLX)                                                            \
  template __global__ void refit_low<T, CPLX>(const T*, const T*, const double*, const double*, \
                                              const double*, const double*,                    \
                                              const unsigned char*, long long, int, int, int,  \
                                              int, unsigned long long*);                       \
  template __global__ void refit_select<T, CPLX>(                                               \
      const T*, const T*, const double*, const double*, const double*, const double*,          \
      const unsigned char*, long long, int, int, int, int, const double*, const double*, int,  \
      unsigned long long*, long long*, long long*, double*, unsigned long long*,              \
      const unsigned long long*);
EMU_REFIT_INSTANCES(double, false)
EMU_REFIT_INSTANCES(double, true)
EMU_REFIT_INSTANCES(float, false)
EMU_REFIT_INSTANCES(float, true)
#define EMU_CHOOSE_INSTANCE(W)                                                                 \
  template __global__ void refit_choose<W, 64>(const long long*, const long long*,               \
                                               const long long*, const double*, int, double,     \
                                               long long*, bool*);
EMU_CHOOSE_INSTANCE(1)
EMU_CHOOSE_INSTANCE(3)
#endif
