"""The refit's choice of entries in passes over the output (``src_cuda/refit_pick.cu``): the same
entries as ``emulinalg.algorithm.refit.cancelled_entries``, whose generic code makes a dozen
elementwise passes and scans over the output for it.

Two passes: the smallest ratio per measure, then the selection of the entries within its spread;
a third where a measure has more of those than the buffers hold, as a complex result's modulus
does, with the spread narrowed (``refit.narrowed_thresholds``). A real result of many rows takes
one pass: the smallest ratio of every ``SAMPLE_STEP``-th row is at least the smallest one, so
its spread holds the whole true spread and, as a real result's spread holds few entries, fits
the buffers; the true smallest ratio, which is among them, then trims them to the true spread.
A pick left on the device (``refit.Deferred``) is chosen from the buffers in one launch
(``choose``) rather than by a chain of cupy sorts."""

from __future__ import annotations

import array_api_compat
import array_api_compat.numpy as _npx
import cupy as cp
import numpy as np

from emulinalg.algorithm import refit as _refit

from .kernels import _i32, _i64, _kernel, _tf, kernels_enabled

# Entries per measure the selection keeps (beyond it: the generic code decides)
CAP = 1 << 16
_INF_BITS = 0x7FF0000000000000
_MAX_BLOCKS = 132 * 16  # row-stride loops: a few waves of the H200's 132 SMs
_BLOCK = (32, 8)  # refit_pick.cu's walk: 4 columns per thread, 128 per block column
_CHOOSE_THREADS = 512  # refit_choose's one block (its __launch_bounds__)
# A real result's first pass reads every SAMPLE_STEP-th row (results of fewer rows than
# 4 * SAMPLE_STEP take the two passes); the sample's smallest ratio is some 16x the smallest one
# on random data, so its spread holds ~16 x 256 entries (a buffer overflow, which costs the
# two passes again, needs one ~16x above that)
SAMPLE_STEP = 16


def refit_pick(parts, prescale, exclude=None, everything=False, defer=True):
    """``refit.cancelled_entries(cupy, parts, prescale, exclude, everything)`` in the kernels:
    the flat indices to refit (possibly empty), or None to decline (a product that refits
    every entry, non-contiguous parts, more than ``CAP`` zeros in a measure, or more than ``CAP``
    candidates that ``refit.narrowed_thresholds`` cannot narrow). With ``defer``, a
    ``refit.Deferred``: the entries chosen on the device (``choose``), no read-back here, its
    ``redo`` this function without ``defer``."""
    if everything or not kernels_enabled():
        return None
    re = parts[0]
    im = parts[1] if len(parts) > 1 else None
    if any(not (x.flags.c_contiguous and x.dtype in (cp.float32, cp.float64))
           for x in parts) or (im is not None and im.dtype != re.dtype):  # fmt: skip
        return None
    if exclude is not None and (exclude.shape != re.shape or not exclude.flags.c_contiguous):
        return None
    m, n = re.shape[-2], re.shape[-1]
    cxp = array_api_compat.array_namespace(re)
    factors = _refit.line_factors(cxp, prescale)
    lines = (re.shape[:-2] + (m, 1),) * 2 + (re.shape[:-2] + (1, n),) * 2  # the batch spelled out
    a1, a2, b1, b2 = (cp.ascontiguousarray(cp.broadcast_to(v, sh), dtype=cp.float64).reshape(-1)
                      for v, sh in zip(factors, lines))  # fmt: skip
    cplx = im is not None
    W = 3 if cplx else 1
    total = re.size
    if total == 0:
        return None
    T = "double" if re.dtype == cp.float64 else "float"
    ex = np.uint64(0) if exclude is None else exclude.view(cp.uint8)  # null: none
    B = total // (m * n)

    def walked(rstep):
        """The kernels' arguments up to the walk's: every rstep-th row of each matrix."""
        rows = B * -(-m // rstep)
        return (re, im if cplx else re, a1, a2, b1, b2, ex, _i64(rows * n), _i32(B), _i32(m),
                _i32(n), _i32(rstep))  # fmt: skip

    common = walked(1)
    low_fn = _kernel("refit_pick.cu", f"refit_low<{T}, {_tf(cplx)}>")

    def smallest(args):
        """Per measure the smallest positive ratio of the entries ``args`` walk (inf: none)."""
        low = cp.full(W, _INF_BITS, dtype=cp.uint64)
        low_fn(_grid(args), _BLOCK, (*args, low))
        return low.view(cp.float64)

    counts = cp.zeros(2 * W, dtype=cp.uint64)
    zero_idx = cp.empty((W, CAP), dtype=cp.int64)
    cand_idx = cp.empty((W, CAP), dtype=cp.int64)
    cand_q = cp.empty((W, CAP), dtype=cp.float64)
    hist = cp.zeros((W, _refit.NARROW_BINS), dtype=cp.uint64)
    fn = _kernel("refit_pick.cu", f"refit_select<{T}, {_tf(cplx)}>")

    def launch_select(thr, low, cnt=counts, hst=hist, skip=None):
        cnt.fill(0)
        hst.fill(0)
        args = (*common, thr, low, _i32(CAP), cnt, zero_idx, cand_idx, cand_q, hst)
        fn(_grid(common), _BLOCK, (*args, np.uint64(0) if skip is None else skip))

    def select(thr, low):
        launch_select(thr, low)
        return counts.get()

    def redo():
        return refit_pick(parts, prescale, exclude, everything, defer=False)

    if not cplx and m >= 4 * SAMPLE_STEP:
        low = smallest(walked(SAMPLE_STEP))
        if defer:  # the sync path's test below, on the device: ok where it would pick here
            launch_select(_spread(low), low)
            cnt = counts.view(cp.int64)
            picked, valid = choose(cnt, zero_idx, cand_idx, cand_q)
            nz, nc = cnt[0], cnt[1]
            ok = (nc > 0) & (nc <= CAP) & (nz <= CAP)
            return _refit.Deferred(picked, valid, ok, redo)
        got = select(_spread(low), low)
        nz, nc = int(got[0]), int(got[1])
        # none: no positive ratio in the sample (the sample's smallest is a candidate); more
        # than the buffers hold: the bounded spread overflowed. Either way the two passes.
        if 0 < nc <= CAP:
            if nz > CAP:
                return None
            # a few thousand candidates: trimmed and chosen on the host (no launches to wait for)
            q, idx, zero = cand_q[0, :nc].get(), cand_idx[0, :nc].get(), zero_idx[0, :nz].get()
            keep = q <= _refit.spread_threshold(q.min())  # the true smallest is among them
            q, idx = q[keep], idx[keep]
            order = np.argsort(idx)  # the buffers fill in any order
            chosen = _refit.chosen(_npx, np.sort(zero), idx[order], q[order])
            return cp.zeros(0, dtype=cp.int64) if chosen is None else cp.asarray(chosen)
    low = smallest(common)
    thr = _spread(low)
    if defer:
        return _two_passes_deferred(cxp, launch_select, low, thr, counts, hist, zero_idx,
                                    cand_idx, cand_q, redo)  # fmt: skip
    got = select(thr, low)
    over = [w for w in range(W) if got[2 * w + 1] > CAP]
    if over and got[0::2].max() <= CAP:  # candidates beyond the buffer: narrow the spread
        thr, fine = _narrowed(cxp, thr, low, hist, cp.asarray(got[1::2] > CAP))
        if not bool(fine):
            return None
        got = select(thr, low)
    if got.max() > CAP:
        return None
    picks = []
    for w in range(W):
        nz, nc = int(got[2 * w]), int(got[2 * w + 1])
        order = cp.argsort(cand_idx[w, :nc])  # the buffers fill in any order
        zero = cp.sort(zero_idx[w, :nz])
        picks.append(_refit.chosen(cxp, zero, cand_idx[w, :nc][order], cand_q[w, :nc][order]))
    chosen = _refit.union(cxp, picks)
    return cp.zeros(0, dtype=cp.int64) if chosen is None else chosen


def _two_passes_deferred(xp, launch_select, low, thr, counts, hist, zero_idx, cand_idx, cand_q,
                         redo):  # fmt: skip
    """The two passes' choice left on the device (``refit.Deferred``): the selection, then
    again with each overflowed measure's spread narrowed (a launch that returns at once where
    none overflowed), each measure's entries and their union (``choose``); ok where the
    synchronous form picks the same (no decline, every count within the buffers)."""
    W = low.shape[0]
    launch_select(thr, low)
    first = counts.astype(cp.int64)
    over = first[1::2] > CAP
    anyover = cp.any(over)
    narrowed, fine = _narrowed(xp, thr, low, hist, over)
    again = cp.zeros(2 * W, dtype=cp.uint64)
    launch_select(narrowed, low, again, cp.zeros_like(hist),
                  (~anyover).astype(cp.uint64).reshape(1))  # fmt: skip
    got = cp.where(anyover, again.astype(cp.int64), first)
    ok = cp.all(got <= CAP) & (~anyover | (cp.all(first[0::2] <= CAP) & fine))
    idx, valid = choose(got, zero_idx, cand_idx, cand_q)
    return _refit.Deferred(idx, valid, ok, redo)


def choose(counts, zero_idx, cand_idx, cand_q):
    """The deferred pick from the selection's buffers in one launch (``refit_choose``): each
    measure's ``refit.chosen`` of its valid slots and their union, in ``refit.Deferred``'s form
    (the tests' reference: ``_helpers.refit_chain``).
    ``counts`` (2W,) int64 on the device: per measure the zeros' and the candidates' counts
    (any value; clamped to the buffers); ``zero_idx``, ``cand_idx`` (W, cap) int64 and ``cand_q``
    (W, cap) float64 (non-negative ratios, or NaN), contiguous. Returns ``(idx, valid)``, both
    (2 W REFIT_ENTRIES,): int64 ascending chosen indices padded with int64 max (W = 1: an index
    both a zero and a candidate kept twice, as the reference does; W > 1: each once), and bool
    idx < int64 max."""
    W, cap = zero_idx.shape
    E = _refit.REFIT_ENTRIES
    idx = cp.empty(2 * W * E, dtype=cp.int64)
    valid = cp.empty(idx.shape, dtype=cp.bool_)
    fn = _kernel("refit_pick.cu", f"refit_choose<{W}, {E}>")
    spread = np.float64(_refit.spread_threshold(1.0))  # the kernel's low * spread
    fn((1,), (_CHOOSE_THREADS,), (counts, zero_idx, cand_idx, cand_q, _i32(cap), spread, idx,
                                  valid))  # fmt: skip
    return idx, valid


def _narrowed(xp, thr, low, hist, over):
    """The thresholds with each overflowed measure's (``over`` (W,) bool) spread narrowed to
    ``refit.narrowed_thresholds``' bin edge, and whether every overflowed one could be (0-d),
    on the device: the synchronous and the deferred passes narrow alike."""
    edge, can = _refit.narrowed_thresholds(xp, low, hist, CAP)
    return cp.where(over, cp.minimum(thr, edge), thr), cp.all(can | ~over)


def _grid(args):
    """refit_pick.cu's grid for the walk ``args``: a block column per 128 columns, block rows
    to about _MAX_BLOCKS blocks (any grid gives the same result)."""
    rows, n = int(args[7]) // int(args[10]), int(args[10])
    gx = -(-n // 128)
    return (gx, max(1, min(-(-rows // 8), _MAX_BLOCKS // gx, 65535)))


def _spread(low):
    """The spread's threshold per measure, low 2**REFIT_SPREAD_BITS (-1: none), on the device."""
    return cp.where(low < np.inf, _refit.spread_threshold(low), -1.0)
