"""The refit's choice of entries for numpy arrays (the numpy and amx backends' ``refit_pick``):
the entries of ``emulinalg.algorithm.refit.cancelled_entries``, computed by blocks of rows that
stay in cache, in two passes over the output (the smallest positive ratio per measure, then the
exact zeros and the candidates), where the generic code makes a dozen passes over the whole
output with a fresh array each. Each block's ratios are the generic code's operations on the
same values, so the same entries."""

from __future__ import annotations

import array_api_compat.numpy as xp
import numpy as np

from emulinalg.algorithm import refit

# Output entries per block: a few float64 temporaries of this size stay in a core's L2 cache.
BLOCK_ENTRIES = 1 << 15


def _ratios(parts, factors, exclude, rows, b):
    """``refit.cancel_ratios`` of the rows ``rows`` of batch entry ``b`` (the same operations
    on the block's values)."""
    a1, a2, b1, b2 = factors
    blk = [p[b, rows] for p in parts]
    lines = (a1[b, rows], a2[b, rows], b1[b], b2[b])
    ex = None if exclude is None else exclude[b, rows]
    return refit.cancel_ratios(xp, blk, None, ex, factors=lines)


def refit_pick(parts, prescale, exclude=None, everything=False):
    """``refit.cancelled_entries(numpy, parts, prescale, exclude, everything)`` by blocks of
    rows: the flat indices (possibly empty), or None to decline (a product refitting every
    entry: the generic code)."""
    if everything:
        return None
    shape = parts[0].shape
    m, n = shape[-2], shape[-1]
    batch = int(np.prod(shape[:-2], dtype=np.int64))
    flat = [np.reshape(p, (batch, m, n)) for p in parts]
    ex = None if exclude is None else np.reshape(np.broadcast_to(exclude, shape), (batch, m, n))
    lines = refit.line_factors(xp, prescale)
    shapes = ((m, 1), (m, 1), (1, n), (1, n))
    factors = [np.reshape(np.broadcast_to(v, shape[:-2] + s), (batch,) + s)
               for v, s in zip(lines, shapes)]  # fmt: skip
    step = max(1, BLOCK_ENTRIES // max(1, n))
    blocks = [(b, slice(r, min(m, r + step))) for b in range(batch) for r in range(0, m, step)]
    low = None
    for b, rows in blocks:  # pass 1: the smallest positive ratio per measure
        got = [float(np.min(np.where(q > 0, q, np.inf), initial=np.inf))
               for q in _ratios(flat, factors, ex, rows, b)]  # fmt: skip
        low = got if low is None else [min(x, y) for x, y in zip(low, got)]
    thr = [x * 2.0**refit.REFIT_SPREAD_BITS if x < np.inf else -1.0 for x in low]
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
