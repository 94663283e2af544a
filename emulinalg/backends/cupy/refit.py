"""The refit's choice of entries in two passes over the output (``src_cuda/refit_pick.cu``; a
third where a measure has more entries within the spread than the buffers hold, as a complex
result's modulus does): the same entries as ``emulinalg.algorithm.refit.cancelled_entries``,
whose generic code makes a dozen elementwise passes and scans over the output for it."""

from __future__ import annotations

import array_api_compat
import cupy as cp
import numpy as np

from emulinalg.algorithm import refit as _refit

from .kernels import _THREADS, _i32, _i64, _kernel, _tf, kernels_enabled

# Entries per measure the selection keeps (beyond it: the generic code decides)
CAP = 1 << 16
_INF_BITS = 0x7FF0000000000000
_MAX_BLOCKS = 132 * 16  # grid-stride loops: a few waves of the H200's 132 SMs


def refit_pick(parts, prescale, exclude=None, everything=False):
    """``refit.cancelled_entries(cupy, parts, prescale, exclude, everything)`` in the kernels:
    the flat indices to refit (possibly empty), or None to decline (a product that refits
    every entry, non-contiguous parts, more than ``CAP`` zeros in a measure, or more than ``CAP``
    candidates that ``refit.narrowed_threshold`` cannot narrow)."""
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
    grid = (min(_MAX_BLOCKS, -(-total // _THREADS)),)
    common = (re, im if cplx else re, a1, a2, b1, b2, ex, _i64(total), _i32(m), _i32(n))
    low = cp.full(W, _INF_BITS, dtype=cp.uint64)
    _kernel("refit_pick.cu", f"refit_low<{T}, {_tf(cplx)}>")(grid, (_THREADS,), (*common, low))
    low_d = low.view(cp.float64)
    # the spread's threshold on the device: the selection follows without a host round trip
    thr = cp.where(low_d < np.inf, low_d * 2.0**_refit.REFIT_SPREAD_BITS, -1.0)
    counts = cp.zeros(2 * W, dtype=cp.uint64)
    zero_idx = cp.empty((W, CAP), dtype=cp.int64)
    cand_idx = cp.empty((W, CAP), dtype=cp.int64)
    cand_q = cp.empty((W, CAP), dtype=cp.float64)
    hist = cp.zeros((W, _refit.NARROW_BINS), dtype=cp.uint64)
    fn = _kernel("refit_pick.cu", f"refit_select<{T}, {_tf(cplx)}>")

    def select(thr):
        counts.fill(0)
        hist.fill(0)
        fn(grid, (_THREADS,), (*common, thr, low_d, _i32(CAP), counts, zero_idx, cand_idx,
                               cand_q, hist))  # fmt: skip
        return counts.get()

    got = select(thr)
    over = [w for w in range(W) if got[2 * w + 1] > CAP]
    if over and got[0::2].max() <= CAP:  # candidates beyond the buffer: narrow the spread
        bins, lows, thr = hist.get(), low_d.get(), thr.get()
        for w in over:
            narrowed = _refit.narrowed_threshold(lows[w], bins[w], CAP)
            if narrowed is None:
                return None
            thr[w] = min(thr[w], narrowed)
        got = select(cp.asarray(thr))
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
