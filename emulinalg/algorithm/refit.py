"""The refit of the most cancelled entries: a few entries recomputed with the most moduli.

The level's certificate bounds each entry's error relative to |A||B| (the componentwise
measure). An entry whose value cancels (|C_ij| << (|A||B|)_ij) has a large error relative to
itself, with native and emulated products alike, and the largest elementwise relative error of a
product comes from its few most cancelled entries: a comparison of two single random errors.
So after a level's product the ``REFIT_ENTRIES`` entries with the largest ratio of their line
bound to their computed value (within ``2**REFIT_SPREAD_BITS`` of the largest) are recomputed
with ``MAX_MODULI`` moduli (``products.entries``: one dot product of residues per entry and
modulus), which leaves their error ~4 bits smaller per extra modulus. The elementwise relative
error of the product then comes from the next entries, whose values cancel less.

The ratio uses the prescale's bound 2**-(s_i+t_j) sqrt(e_i f_j) >= (|A||B|)_ij, the same on every
backend, so the entries chosen depend only on the inputs (and the computed values).

A complex result is measured on its modulus and on each part (docs/precision.md), and a part
cancels where the modulus need not (Im C_ij << |C_ij|): its error on the complex route is about
the entry's, so that part's elementwise relative error comes from its own most cancelled
entries. So the pick is made per measure (``cancel_ratios``: the modulus's ratio and each
part's, against the same bound) and the entries of the picks are refit together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from . import operands, products
from .moduli import MAX_MODULI
from .scaling import rounds_to_nearest
from .xputil import ldexp, take

REFIT_ENTRIES = 64  # at most this many entries per call (and as many exact zeros)
REFIT_SPREAD_BITS = 8  # ... and only those within 2**8 of the most cancelled one
# Products of at most this many multiply-adds (outputs * k) recompute every entry: the maxima
# the two effective-bits measures compare are then taken over a few entries, single random
# draws of the native and the emulated errors, and all of them cost less than the statistics.
REFIT_ALL_WORK = 1 << 20
# The recomputation's work arrays stay below 1/WORK_SHARE of the output's entries (the working
# memory bound of docs/limitations.md)
WORK_SHARE = 8
# Entries per block where a backend's own Scheme II product recomputes them (``recomputed``):
# each block is a (block x block) product of which the diagonal is kept.
PRODUCT_BLOCK = 512


# A backend's one-pass choice (``refit_pick``) buffers the entries within the spread; where a
# measure has more than its buffer holds it narrows the spread to a bin edge of log2(q / low),
# in bins of 1/NARROW_BINS_PER_BIT bit, that still holds the REFIT_ENTRIES smallest
# (``narrowed_thresholds``)
NARROW_BINS_PER_BIT = 8
NARROW_BINS = REFIT_SPREAD_BITS * NARROW_BINS_PER_BIT


# 2**(i / NARROW_BINS_PER_BIT) as Python computes it, for the bin edges of
# ``narrowed_thresholds`` on any device (its pow need not round as the host's does)
_EDGE_FACTORS = tuple(2.0 ** (i / NARROW_BINS_PER_BIT) for i in range(NARROW_BINS + 2))


def narrowed_thresholds(xp, low, hist, cap):
    """Per measure a threshold thr <= low 2**REFIT_SPREAD_BITS such that the entries with
    0 < q <= thr hold the REFIT_ENTRIES smallest ratios (so ``chosen`` picks the same entries
    from them) and about at most ``cap`` entries, and whether a bin edge does that (where not,
    thr is meaningless). ``low`` (W,): the smallest positive q; ``hist`` (W, NARROW_BINS): the
    counts of the entries within the spread per bin floor(log2(q / low) NARROW_BINS_PER_BIT),
    clamped to [0, NARROW_BINS - 1]. The edge is one bin above the one where REFIT_ENTRIES are
    reached: a q that log2's rounding put in a lower bin is still below it. The caller counts
    again below the threshold. Array operations only, so that a device decides without a
    read-back."""
    h = xp.astype(hist, xp.int64)
    cum = xp.cumulative_sum(h, axis=-1)  # the entries in bins 0..i
    bins = xp.arange(NARROW_BINS, dtype=xp.int64)
    b = xp.min(xp.where(cum >= REFIT_ENTRIES, bins, NARROW_BINS), axis=-1)  # the first there
    below = xp.sum(xp.where(bins <= xp.expand_dims(b + 1, axis=-1), h, 0), axis=-1)
    ok = (b + 2 < NARROW_BINS) & (below <= cap)
    factors = xp.asarray(_EDGE_FACTORS, dtype=xp.float64)
    return low * xp.take(factors, xp.minimum(b + 2, NARROW_BINS + 1)), ok


def spread_threshold(low):
    """The largest ratio q within the spread of the smallest positive one ``low`` (a float or an
    array of them): low 2**REFIT_SPREAD_BITS. Every pick (``pick``, the backends' ``refit_pick``)
    takes its spread from here."""
    return low * 2.0**REFIT_SPREAD_BITS


def refits_all(outputs, k):
    """Whether a product of ``outputs`` entries (all batches) and inner dimension ``k``
    recomputes every entry (``REFIT_ALL_WORK``)."""
    return outputs * k <= REFIT_ALL_WORK


def cancel_ratios(xp, parts, prescale, exclude=None, factors=None):
    """Per entry of the (..., m, n) output the ratios q_ij of its computed magnitudes to its line
    bound 2**-(s_i+t_j) sqrt(e_i f_j) >= (|A||B|)_ij, one array per measure: the modulus's (for a
    real result its magnitude), and for a complex result each part's too, in which an exact zero
    part counts as no cancellation (inf; real data held as complex: the modulus's ratio takes
    the computed zeros). Small q: cancelled. inf where the bound is 0, the value is not finite
    or ``exclude`` holds. ``parts`` are the result's real (and imaginary) parts, ``prescale``
    the lines' ``(s, t, e, f)``: any block of the output with its lines' values gives the same
    q. The per-line factors 2**s_i / sqrt(e_i) are applied in two halves, so that no product
    leaves the float64 range for finite operands (q <= 1). ``factors``: ``line_factors`` of the
    prescale, when the caller has them (of the lines of a block of the output)."""
    a1, a2, b1, b2 = line_factors(xp, prescale) if factors is None else factors
    q = None
    own = []
    for p in parts:  # each part scaled first: the modulus of the scaled parts stays in range
        v = ((xp.abs(xp.astype(p, xp.float64)) * a1) * b1) * (a2 * b2)
        own.append(v)
        q = v if q is None else xp.sqrt(q * q + v * v)
    if len(own) > 1:
        own = [xp.where(v > 0, v, xp.inf) for v in own]
    out = []
    for x in [q] + (own if len(own) > 1 else []):
        x = xp.where(x >= 0, x, xp.inf)  # nan (0 * inf, inf * 0) -> inf
        out.append(x if exclude is None else xp.where(exclude, xp.inf, x))
    return out


def line_factors(xp, prescale):
    """``cancel_ratios``' per-line factors of the prescale's ``(s, t, e, f)``: 2**s_i / sqrt(e_i)
    in two halves (a1, a2: (..., m, 1)) and 2**t_j / sqrt(f_j) (b1, b2: (..., 1, n)), inf
    where the bound is 0."""
    s, t, e, f = prescale

    def halves(shift, bound):
        shift = xp.astype(shift, xp.int64)
        h = shift // 2
        inv = xp.where(bound > 0, 1.0 / xp.sqrt(xp.astype(bound, xp.float64)), xp.inf)
        return ldexp(xp, inv, h), ldexp(xp, xp.ones_like(inv), shift - h)

    a1, a2 = (xp.expand_dims(v, axis=-1) for v in halves(s, e))
    b1, b2 = (xp.expand_dims(v, axis=-2) for v in halves(t, f))
    return a1, a2, b1, b2


def cancel_ratio(xp, parts, prescale, exclude=None):
    """``cancel_ratios``' first array: the modulus's ratio (a real result's)."""
    return cancel_ratios(xp, parts, prescale, exclude)[0]


def note(everything, count):
    """The plan's note for a refit of ``count`` entries (``everything``: ``refits_all``)."""
    which = "every entry (a small product)" if everything else "the most cancelled entries"
    return f"refit: {which} recomputed with {MAX_MODULI} moduli ({count} recomputed in all)"


def pick(xp, q, everything=False):
    """Positions in the 1-D ``q`` (``cancel_ratio``'s, entries in flat order) of the entries
    to refit, in ascending order: the nonzero entries within 2**REFIT_SPREAD_BITS of the
    smallest nonzero q, at most REFIT_ENTRIES (the smallest, ties in flat order), and the
    computed zeros (q = 0) apart, the first REFIT_ENTRIES of them (an exact zero, as in a
    difference of equal terms, must not take the others' places); with ``everything``
    (``refits_all``) all entries of finite q. None when there are none."""
    if everything:
        idx = xp.nonzero(q < math.inf)[0]
        return idx if idx.shape[0] else None
    zero = xp.nonzero(q == 0)[0]
    pos = xp.where(q > 0, q, xp.inf)
    low = float(xp.min(pos)) if q.shape[0] else math.inf
    idx = zero[:0]
    if low < math.inf:
        idx = xp.nonzero(pos <= spread_threshold(low))[0]
    return chosen(xp, zero, idx, xp.take(q, idx))


def chosen(xp, zero, idx, q):
    """``pick``'s rule on what a pass over the ratios found (a backend's ``refit_pick`` applies
    it too): ``zero`` the flat positions of the exact zeros, ``idx`` those of the nonzero
    entries within the spread, both ascending, and ``q`` their ratios. The first REFIT_ENTRIES
    zeros and the REFIT_ENTRIES smallest q (ties in flat order), ascending; None when none."""
    zero = zero[:REFIT_ENTRIES]
    if idx.shape[0] > REFIT_ENTRIES:
        order = xp.argsort(q, stable=True)
        idx = xp.sort(xp.take(idx, order[:REFIT_ENTRIES]))
    if not (zero.shape[0] or idx.shape[0]):
        return None
    return xp.sort(xp.concat([zero, idx]))


_NO_INDEX = (1 << 63) - 1  # a padded slot of ``Deferred``'s arrays


class Deferred(NamedTuple):
    """A backend's pick (``refit_pick``) left on its device, so that the host queues the
    recomputation without waiting for the pick's counts: ``idx`` (S,) int64 flat indices,
    ascending in the slots where ``valid`` (S,) bool holds and the largest int64 in the others;
    ``ok`` a 0-d bool array, false where these are not the pick's
    entries (its buffers overflowed: ``redo()`` then gives the hook's synchronous answer, an
    index array or None for the generic code). ``refit`` reads ``ok`` and the count once, after
    its writes are queued, and where ``ok`` is false puts the old values back and picks again."""

    idx: Any
    valid: Any
    ok: Any
    redo: Callable


def union(xp, picks):
    """The union of ``pick``'s results (None: none), ascending; None when all are None."""
    picks = [x for x in picks if x is not None]
    if len(picks) < 2:
        return picks[0] if picks else None
    return xp.unique_values(xp.concat(picks))


def cancelled_entries(xp, parts, prescale, exclude=None, everything=False, hook=None):
    """Flat indices (into the (..., m, n) output) of the entries to refit, or None when there
    are none: the ``union`` of the ``pick`` of each of ``cancel_ratios`` (``everything``: the
    modulus's alone, which holds every finite entry). ``hook``: a backend's ``refit_pick``
    (same arguments, the same indices, possibly empty, or None to decline; or a ``Deferred``,
    returned as it is)."""
    if hook is not None:
        got = hook(parts, prescale, exclude, everything)
        if isinstance(got, Deferred):
            return got
        if got is not None:
            return got if got.shape[0] else None
    ratios = cancel_ratios(xp, parts, prescale, exclude)
    if everything:
        ratios = ratios[:1]
    return union(xp, [pick(xp, xp.reshape(q, (-1,)), everything) for q in ratios])


def refit(xp, ar, ai, br, bi, parts, prescale, mode, out_dtype, exclude=None, extra=None,
          cancelled=True, product=None, pick_hook=None, inplace=False):  # fmt: skip
    """``parts`` (the product's real and imaginary parts, (..., m, n); "dd": (hi, lo) pairs) with
    the entries of ``cancelled_entries`` recomputed at ``MAX_MODULI`` moduli. ``ar``... are the
    finite float64 operands (..., m, k), (..., k, n) the product was computed from; ``extra``
    more flat indices to recompute (the certificate's patch), ``cancelled`` whether to add
    ``cancelled_entries``; ``product`` a backend's ``ozaki2_product`` (``recomputed``),
    ``pick_hook`` its ``refit_pick`` (``cancelled_entries``); ``inplace``: the caller owns
    ``parts`` (contiguous ones are written where they are, not copied). Returns the parts and the
    number of entries recomputed."""
    idx = None
    plain = [p[0] if out_dtype == "dd" else p for p in parts]
    outputs = math.prod(plain[0].shape)
    if cancelled:
        every = refits_all(outputs, ar.shape[-1])
        idx = cancelled_entries(xp, plain, prescale, exclude, every, pick_hook)
    if isinstance(idx, Deferred):
        return _refit_deferred(xp, ar, ai, br, bi, parts, prescale, mode, out_dtype, exclude,
                               extra, product, inplace, idx)  # fmt: skip
    if extra is not None:
        idx = extra if idx is None else xp.unique_values(xp.concat([extra, idx]))
    if idx is None:
        return parts, 0
    vals = _recompute(xp, ar, ai, br, bi, prescale, mode, out_dtype, idx, outputs, product)
    out = []
    for p, v in zip(parts, vals):
        if out_dtype == "dd":
            out.append(tuple(_put(xp, x, idx, y, inplace) for x, y in zip(p, v)))
        else:
            out.append(_put(xp, p, idx, v, inplace))
    return tuple(out), int(idx.shape[0])


def _recompute(xp, ar, ai, br, bi, prescale, mode, out_dtype, idx, outputs, product):
    """``recomputed``'s values (``product``: the backend's hook) of the flat output entries
    ``idx`` (in their order, repeats allowed) of a product of ``outputs`` entries."""
    m, k = ar.shape[-2], ar.shape[-1]
    n = br.shape[-1]
    s, t, e, f = (xp.reshape(v, (-1,)) for v in prescale)
    rows, cols = entry_lines(idx, m, n)

    def lines_a(x):
        return None if x is None else take(xp, xp.reshape(x, (-1, k)), rows, 0)

    def lines_b(x):
        if x is None:
            return None
        flags = getattr(x, "flags", None)
        if x.ndim == 2 and not (flags is not None and flags.f_contiguous):
            # B's columns first: taking rows of a strided B^T would copy all of B
            return xp.permute_dims(take(xp, x, cols, 1), (1, 0))
        xt = xp.reshape(xp.permute_dims(x, tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)),
                        (-1, k))  # fmt: skip
        return take(xp, xt, cols, 0)

    sub = (xp.take(s, rows), xp.take(t, cols), xp.take(e, rows), xp.take(f, cols))
    work = min(products.ENTRY_WORK, outputs // WORK_SHARE)
    return recomputed(xp, lines_a(ar), lines_a(ai), lines_b(br), lines_b(bi), sub, mode,
                      out_dtype, work, product)  # fmt: skip


def merged(xp, idx, valid, extra):
    """``Deferred``'s padded indices ``idx`` (``valid``) with the flat indices ``extra`` (any
    order, repeats allowed) added, in the same form: ascending, each once, padded with the
    largest int64 (the generic path's ``unique_values`` of both, at a fixed size)."""
    big = xp.asarray(_NO_INDEX, dtype=xp.int64)
    both = xp.sort(xp.concat([xp.where(valid, idx, big), xp.astype(extra, xp.int64)]))
    again = xp.concat([xp.zeros(1, dtype=xp.bool), both[1:] == both[:-1]])
    both = xp.sort(xp.where(again, big, both))
    return both, both < big


def _refit_deferred(xp, ar, ai, br, bi, parts, prescale, mode, out_dtype, exclude, extra,
                    product, inplace, d):  # fmt: skip
    """``refit`` of a ``Deferred`` pick ``d``: the recomputation and the writes are queued
    first, then ``d.ok`` and the count are read at once. Padded slots read and write the
    first slot's entry (entry 0 where no slot is valid) with the value that slot writes, so
    every write of an entry writes the same value."""
    idx, valid = d.idx, d.valid
    if extra is not None:
        idx, valid = merged(xp, idx, valid, extra)
    plain = [p[0] if out_dtype == "dd" else p for p in parts]
    outputs = math.prod(plain[0].shape)
    if idx.shape[0] > outputs:  # the valid slots, a prefix, are distinct entries: at most all
        idx, valid = idx[:outputs], valid[:outputs]
    zero = xp.zeros((), dtype=xp.int64)
    safe = xp.where(valid, idx, xp.where(valid[0], idx[0], zero))
    vals = _recompute(xp, ar, ai, br, bi, prescale, mode, out_dtype, safe, outputs, product)
    written = []

    def put(x, v):
        flat = xp.reshape(x if inplace else xp.asarray(x, copy=True), (-1,))
        old = xp.take(flat, safe)
        v = xp.astype(v, flat.dtype)
        flat[safe] = xp.where(valid, v, xp.where(valid[0], v[0], old[0]))
        written.append((flat, old))
        return xp.reshape(flat, x.shape)

    out = []
    for p, v in zip(parts, vals):
        out.append(tuple(map(put, p, v)) if out_dtype == "dd" else put(p, v))
    flags = xp.stack([xp.astype(d.ok, xp.int64), xp.sum(xp.astype(valid, xp.int64))])
    ok, count = (int(v) for v in flags.tolist())  # the one read-back
    if ok:
        return tuple(out), count
    if inplace:  # the parts were written: their old values back, then the synchronous pick
        for flat, old in written:
            flat[safe] = old
    return refit(xp, ar, ai, br, bi, parts, prescale, mode, out_dtype, exclude, extra,
                 product=product, pick_hook=lambda *_: d.redo(), inplace=inplace)  # fmt: skip


def entry_lines(idx, m, n):
    """The rows of A and columns of B of the flat output entries ``idx`` of an (..., m, n)
    product, as indices into the batch-flattened lines."""
    bat, i, j = idx // (m * n), (idx // n) % m, idx % n
    return bat * m + i, bat * n + j


def recomputed(xp, ar, ai, br, bi, prescale, mode, out_dtype, work=products.ENTRY_WORK,
               product=None):  # fmt: skip
    """Entries recomputed with MAX_MODULI moduli: row t of ``ar`` (+ i ``ai``) times row t of
    ``br`` (+ i ``bi``), whole lines (K, k), with those lines' ``prescale`` (``products.entries``,
    rounded as ``rounds_to_nearest`` says for the whole k, its work arrays about ``work``
    elements). With a backend's ``ozaki2_product`` hook (``product``) they are the diagonals of
    its products of blocks of the lines: a few kernels where the generic code takes a few array
    operations per modulus (each a kernel launch on a device), the same integers, hence the
    same values."""
    if product is not None:
        got = _diagonals(xp, product, ar, ai, br, bi, prescale, mode, out_dtype)
        if got is not None:
            return got
    near = rounds_to_nearest(MAX_MODULI, ar.shape[-1], mode)
    ar, ai, br, bi = operands.wide(xp, ar, ai, br, bi)  # a narrow_products backend's lines
    return products.entries(xp, ar, ai, br, bi, MAX_MODULI, out_dtype, prescale, near, work)


def _diagonals(xp, product, ar, ai, br, bi, prescale, mode, out_dtype):
    """``recomputed``'s entries from ``product`` (a backend's ``ozaki2_product``) of blocks of
    ``PRODUCT_BLOCK`` lines; None where it declines."""
    K = ar.shape[0]
    blocks = []
    for r0 in range(0, K, PRODUCT_BLOCK):
        sl = slice(r0, min(K, r0 + PRODUCT_BLOCK))
        size = sl.stop - sl.start
        a = [None if x is None else x[sl] for x in (ar, ai)]
        b = [None if x is None else xp.permute_dims(x[sl], (1, 0)) for x in (br, bi)]
        res = product(*a, *b, MAX_MODULI, mode, out_dtype, tuple(v[sl] for v in prescale))
        if res is None:
            return None

        def diag(x, size=size):
            return xp.reshape(x, (-1,))[:: size + 1]

        blocks.append([tuple(map(diag, p)) if out_dtype == "dd" else diag(p) for p in res])
    if len(blocks) == 1:
        return tuple(blocks[0])
    if out_dtype == "dd":
        return tuple(
            tuple(xp.concat([blk[p][h] for blk in blocks]) for h in range(2))
            for p in range(len(blocks[0]))
        )
    return tuple(xp.concat([blk[p] for blk in blocks]) for p in range(len(blocks[0])))


def _put(xp, x, idx, v, inplace=False):
    """``x`` with its flat entries ``idx`` replaced by ``v`` (a new array, or ``x`` itself where
    ``inplace`` and its entries are contiguous)."""
    flat = xp.reshape(x if inplace else xp.asarray(x, copy=True), (-1,))
    flat[idx] = xp.astype(v, flat.dtype)
    return xp.reshape(flat, x.shape)
