"""The refit's choice of entries for numpy arrays (the numpy and amx backends' ``refit_pick``):
the entries of ``emulinalg.algorithm.refit.cancelled_entries``, where the generic code makes a
dozen passes over the whole output with a fresh array each.

With ``emulinalg._amx`` (``src_amx/refit_host.cpp``: ``refit_candidates``) one OpenMP pass over
contiguous float32 or float64 parts finds, per measure, the first REFIT_ENTRIES exact zeros and
the REFIT_ENTRIES smallest (q, flat index) pairs of positive finite ratio in the generic code's
float64 operations; ``refit.pick`` keeps a prefix of that order (the entries within the spread of
the smallest), so the spread applied to them and ``refit.chosen`` give the same entries.
Elsewhere (no compiled module, other parts) the same choice runs by blocks of rows that stay in
cache, in two passes over the output (the smallest positive ratio per measure, then the exact
zeros and the candidates); each block's ratios are the generic code's operations on the same
values."""

from __future__ import annotations

import functools

import array_api_compat.numpy as xp
import numpy as np

from emulinalg.algorithm import refit

# Output entries per block: a few float64 temporaries of this size stay in a core's L2 cache.
BLOCK_ENTRIES = 1 << 15


@functools.cache
def _native():
    """``emulinalg._amx.refit_candidates``, or None where the module or the function is absent."""
    try:
        from emulinalg import _amx
    except ImportError:
        return None
    return getattr(_amx, "refit_candidates", None)


def refit_pick(parts, prescale, exclude=None, everything=False):
    """``refit.cancelled_entries(numpy, parts, prescale, exclude, everything)``: the flat indices
    (possibly empty), or None to decline (a product refitting every entry: the generic code)."""
    if everything:
        return None
    got = _one_pass(parts, prescale, exclude)
    return _by_blocks(parts, prescale, exclude) if got is None else got


def _shapes(parts, prescale):
    """(batch, m, n) of the output and ``refit.line_factors`` broadcast to (batch, m, 1) and
    (batch, 1, n)."""
    shape = parts[0].shape
    m, n = shape[-2], shape[-1]
    batch = int(np.prod(shape[:-2], dtype=np.int64))
    lines = refit.line_factors(xp, prescale)
    sizes = ((m, 1), (m, 1), (1, n), (1, n))
    factors = [np.reshape(np.broadcast_to(v, shape[:-2] + s), (batch,) + s)
               for v, s in zip(lines, sizes)]  # fmt: skip
    return batch, m, n, factors


def _one_pass(parts, prescale, exclude):
    """``refit_pick``'s indices from ``refit_candidates``, or None where it does not apply."""
    fn = _native()
    kinds = (np.float32, np.float64)
    if fn is None or any(not (isinstance(p, np.ndarray) and p.dtype in kinds
                              and p.flags.c_contiguous) for p in parts):  # fmt: skip
        return None
    if len(parts) > 1 and parts[1].dtype != parts[0].dtype:
        return None
    batch, m, n, factors = _shapes(parts, prescale)
    a1, a2, b1, b2 = (np.ascontiguousarray(v, dtype=np.float64).reshape(-1) for v in factors)
    ex = None
    if exclude is not None:
        ex = np.ascontiguousarray(np.broadcast_to(exclude, parts[0].shape), dtype=bool)
        ex = ex.view(np.uint8)
    im = parts[1] if len(parts) > 1 else None
    found = fn(parts[0], im, a1, a2, b1, b2, ex, batch, m, n, refit.REFIT_ENTRIES)
    picks = []
    for zeros, idx, q in found:
        if q.shape[0]:  # refit.pick's spread around the smallest positive q
            thr = refit.spread_threshold(float(np.min(q)))
            if thr == np.inf:  # pick's threshold would admit infinite q too: the blocks do
                return None
            within = q <= thr
            idx, q = idx[within], q[within]
        picks.append(refit.chosen(xp, zeros, idx, q))
    got = refit.union(xp, picks)
    return np.zeros(0, dtype=np.int64) if got is None else got.astype(np.int64)


def _ratios(parts, factors, exclude, rows, b):
    """``refit.cancel_ratios`` of the rows ``rows`` of batch entry ``b`` (the same operations
    on the block's values)."""
    a1, a2, b1, b2 = factors
    blk = [p[b, rows] for p in parts]
    lines = (a1[b, rows], a2[b, rows], b1[b], b2[b])
    ex = None if exclude is None else exclude[b, rows]
    return refit.cancel_ratios(xp, blk, None, ex, factors=lines)


def _by_blocks(parts, prescale, exclude):
    """``refit_pick``'s indices by blocks of rows, in two passes over the output."""
    shape = parts[0].shape
    batch, m, n, factors = _shapes(parts, prescale)
    flat = [np.reshape(p, (batch, m, n)) for p in parts]
    ex = None if exclude is None else np.reshape(np.broadcast_to(exclude, shape), (batch, m, n))
    step = max(1, BLOCK_ENTRIES // max(1, n))
    blocks = [(b, slice(r, min(m, r + step))) for b in range(batch) for r in range(0, m, step)]
    low = None
    for b, rows in blocks:  # pass 1: the smallest positive ratio per measure
        got = [float(np.min(np.where(q > 0, q, np.inf), initial=np.inf))
               for q in _ratios(flat, factors, ex, rows, b)]  # fmt: skip
        low = got if low is None else [min(x, y) for x, y in zip(low, got)]
    thr = [refit.spread_threshold(x) if x < np.inf else -1.0 for x in low]
    zeros = [[] for _ in low]
    cands = [[] for _ in low]
    for b, rows in blocks:  # pass 2: the exact zeros and the candidates, in flat order
        base = (b * m + rows.start) * n
        for w, q in enumerate(_ratios(flat, factors, ex, rows, b)):
            q = np.reshape(q, (-1,))
            if sum(len(z) for z in zeros[w]) < refit.REFIT_ENTRIES:
                zeros[w].append(np.flatnonzero(q == 0) + base)
            idx = np.flatnonzero((q > 0) & (q <= thr[w]))
            cands[w].append((idx + base, q[idx]))
    picks = []
    for w in range(len(low)):
        q = np.concatenate([c[1] for c in cands[w]])
        idx = np.concatenate([c[0] for c in cands[w]])
        picks.append(refit.chosen(xp, np.concatenate(zeros[w]), idx, q))
    got = refit.union(xp, picks)
    return np.zeros(0, dtype=np.int64) if got is None else got.astype(np.int64)
