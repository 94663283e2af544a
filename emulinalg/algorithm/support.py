"""Symmetry zeros: the two classes of the contraction index that a product splits into.

An entry ``c_ij = sum_l a_il b_lj`` whose every term pairs an entry of its row of A with one at
rounding-noise level of its column of B, or the other way round (a molecule's symmetry zeros: a
row and a column of different parity under a mirror plane, whose terms are noise on one side),
cannot be certified at the native level by one Scheme II product: the scaling vectors follow
each line's largest entry, so the noise side rounds away while ``(|A||B|)_ij`` is noise-sized.
Where the contraction index splits into a class where row i is the noise side and one where
column j is, the product is the sum of the classes' products ``A[:, K_c] B[K_c, :]``, each with
its own scaling vectors: there the noise line is scaled by its own maximum and keeps its bits,
so each class's certificate covers the entry at the native level of the class's terms, and the
bounds add up to the native level of the whole product (``sum_c k_c |A_c||B_c| <= k |A||B|``;
the variances likewise).

The split is read off the entries beyond one product's certificate: for such an entry and each
``l``, the side whose normalized magnitude (``|a_il| / max_l |a_il|``, ``|b_lj| / max_l |b_lj|``)
is far below the other, itself significant, is the noise side; the sampled entries' sides,
aligned with those of the entry most indices inform, vote each ``l`` into one of two classes
(an index no sampled entry informs goes by the held lines' largest magnitudes, else to the
class where it stays below the class's noise-side maximum, else by its clear gaps). Any split
is only a proposal: each class's product is certified as any product is (a split the data do
not follow costs time, never accuracy), and an entry its certificate cannot cover still comes
from the native product.
"""

from __future__ import annotations

from .scaling import magnitude

# Beyond entries whose sides vote (sampled per row: evenly spaced rows holding such entries,
# spread ranks within each): a symmetry's entries all show the same split, so a few dozen
# settle it
VOTERS = 64
# An index votes for a sampled entry where the larger of its two normalized magnitudes is
# within this many bits of its line's largest (a term that matters) and the smaller lies at
# least NOISE_GAP bits below it (a noise side): float64 noise sits ~50 bits below, genuine
# small values rarely more than 30
SIGNIFICANT_BITS = 30
NOISE_GAP = 16
# A sampled entry counts as fixed by the split where, in each class, the row's and column's
# largest magnitudes multiply to at most 2**FIX_BITS times the class's sum of |a_il b_lj| (a
# few moduli above the count such an entry needs in a product of its own); the split is taken
# where at least MIN_FIXED of them are
FIX_BITS = 20
MIN_FIXED = 0.5
# A product's first split is also taken where the median over the sampled entries of the
# share of their informed indices that the classes put on their side reaches MIN_FIT
MIN_FIT = 0.7
# Rows and columns holding beyond entries (evenly spaced, at most this many of each) whose
# largest normalized magnitudes decide the indices no sampled entry informs
SPREAD = 1024
# Entries of those lines read at once (at least one whole line: the pass's temporaries are a
# few times this, or a line's, whichever is larger)
SPREAD_ENTRIES = 2**24
# log2 of a zero magnitude, below every subnormal
_ZERO_LOG2 = -1100.0


def _log2(xp, x):
    """log2 of nonnegative ``x``, ``_ZERO_LOG2`` for zeros."""
    return xp.where(x > 0, xp.log2(xp.where(x > 0, x, 1.0)), _ZERO_LOG2)


def _normalized_log2(xp, re, im, axis):
    """log2 of the magnitudes (``scaling.magnitude``) over their lines' largest (lines along
    ``axis``), ``_ZERO_LOG2`` for zeros (and every entry of a zero line)."""
    mag = magnitude(xp, re, im)
    top = xp.max(mag, axis=axis, keepdims=True)
    return _log2(xp, mag / xp.where(top > 0, top, 1.0))


def k_classes(xp, ar, ai, br, bi, beyond, progress=True, complete=False):
    """The two classes of the contraction index of a 2-D product with entries ``beyond`` its
    certificate, or None where the split would not help (too few sampled entries fixed, or for
    a first split a poor fit) or the votes leave one class empty.

    Parameters
    ----------
    ar, ai : (m, k) float arrays (``ai`` None for real operands): A's parts.
    br, bi : (k, n) float arrays: B's parts.
    beyond : (m, n) bool array, at least one entry True.
    progress : bool
        Whether a split that fixes few sampled entries itself but fits their sides
        (``MIN_FIT``) is taken: a product's first split, whose classes may split again; theirs
        must fix their entries (``MIN_FIXED``).
    complete : bool
        Whether the split must fix every sampled entry itself (``strategy="performant"``: an
        entry the classes leave beyond costs the whole native product on top of theirs, more
        than the native product alone). Neither a split fixing only some of them
        (``MIN_FIXED``) nor one that only fits their sides (``MIN_FIT``: symmetry zeros of
        several mirror planes, whose classes split again, but also wide exponent ranges, φ = 4:
        0.83 measured) is taken then.

    Returns
    -------
    list of two int64 arrays or None
        Each class's indices into ``range(k)``, ascending, every index in exactly one class,
        the class holding index 0 first; None where the split would fix too few of the sampled
        entries (``FIX_BITS``, ``MIN_FIXED``, ``MIN_FIT``).
    """
    beyond = xp.reshape(beyond, beyond.shape[-2:])
    held_rows = xp.nonzero(xp.any(beyond, axis=-1))[0]
    if held_rows.shape[0] == 0:
        return None
    # up to VOTERS rows with beyond entries, evenly spaced, and in each the beyond entries at
    # spread ranks (no index array over all beyond entries: that is 8 bytes per entry)
    step = max(1, held_rows.shape[0] // VOTERS)
    rows = held_rows[::step][:VOTERS]
    per = max(1, VOTERS // rows.shape[0])  # few rows (a vector times a matrix): several each
    rows = xp.reshape(xp.broadcast_to(rows[:, None], (rows.shape[0], per)), (-1,))
    ranks = xp.cumulative_sum(xp.astype(xp.take(beyond, rows, axis=-2), xp.int32), axis=-1)
    last = ranks[:, -1:]
    want = (xp.arange(rows.shape[0], dtype=xp.int32)[:, None] * 7919) % last + 1
    cols = xp.argmax(xp.astype(ranks >= want, xp.int8), axis=-1)
    la = _normalized_log2(xp, xp.take(ar, rows, axis=-2),
                          None if ai is None else xp.take(ai, rows, axis=-2), -1)  # fmt: skip
    lb = _normalized_log2(xp, xp.take(br, cols, axis=-1),
                          None if bi is None else xp.take(bi, cols, axis=-1), -2)  # fmt: skip
    lb = xp.matrix_transpose(lb)
    gap = la - lb  # (voters, k): > 0 where column j is the noise side
    clear = xp.abs(gap) >= NOISE_GAP
    informs = clear & (xp.maximum(la, lb) >= -SIGNIFICANT_BITS)
    side = xp.where(informs, xp.sign(gap), 0.0)
    ref = int(xp.argmax(xp.sum(xp.abs(side), axis=-1)))  # the entry most indices inform
    agree = xp.sign(xp.sum(side * side[ref], axis=-1))[:, None]  # each entry's sides, as ref's
    votes = xp.sum(agree * side, axis=-2)  # (k,)
    # an index no sampled entry informs (not one whose votes tie: those keep the fallback below)
    quiet = ~xp.any(informs, axis=-2)
    if bool(xp.any(quiet)) and bool(xp.all(agree == agree[0])):
        # it may matter in rows or columns not sampled (a pair of distant functions: its
        # integrals small in most rows): the largest normalized magnitudes over many held rows
        # and columns decide it where they differ clearly, with the sampled entries' one
        # orientation (a Coulomb-type vector's; where the entries' orientations are mixed, as
        # in most square products, this is skipped)
        spread = _spread_votes(xp, ar, ai, br, bi, beyond, held_rows, xp.nonzero(quiet)[0])
        votes = xp.where(quiet, agree[0] * spread, votes)
        quiet = quiet & (votes == 0)
    if bool(xp.any(quiet)):
        votes = xp.where(quiet, _quiet_votes(xp, la, lb, agree, votes), votes)
    # an index still without a vote (its votes tie, or nothing above placed it) goes where its
    # clear gaps put it: in the other class its small value would set the scaling of a line
    # that is noise there
    weak = xp.sum(agree * xp.where(clear, xp.sign(gap), 0.0), axis=-2)
    votes = xp.where(votes != 0, votes, weak)
    # A split helps an entry where, in each class, the largest terms' magnitudes (row max times
    # column max, what the scaling follows) stay within FIX_BITS of the class's sum of
    # |a_il b_lj| (what the certificate compares with); symmetry zeros pass, entries beyond for
    # other reasons (exponents graded along k, wide ranges, bands) mostly do not, and then the
    # classes' products would cost more than the native entries they save
    terms = la + lb
    fixed = xp.ones(terms.shape[0], dtype=xp.bool)
    for mask in (votes > 0, votes <= 0):
        inside = mask[None, :]
        top_a = xp.max(xp.where(inside, la, _ZERO_LOG2), axis=-1)
        top_b = xp.max(xp.where(inside, lb, _ZERO_LOG2), axis=-1)
        t = xp.where(inside, terms, 2 * _ZERO_LOG2)
        peak = xp.max(t, axis=-1)
        total = peak + xp.log2(xp.sum(xp.pow(2.0, t - peak[:, None]), axis=-1))
        none = (top_a <= _ZERO_LOG2) | (top_b <= _ZERO_LOG2) | (peak <= _ZERO_LOG2)
        fixed = fixed & (none | (top_a + top_b - total <= FIX_BITS))
    share = float(xp.mean(xp.astype(fixed, xp.float64)))
    if share == 1.0 or (share >= MIN_FIXED and not complete):
        return _classes(xp, votes)
    if complete or not progress:
        return None
    # A product's first split is also taken where the classes fit the entries' sides (each
    # entry's informed indices on its side of the split): symmetry zeros whose classes need a
    # split of their own (the Coulomb vector's pair index: 0.74-1 measured), not entries beyond
    # for other reasons (wide exponent ranges: 0.33-0.58)
    held = xp.sum(xp.abs(side), axis=-1)
    fit = xp.sum(agree * side * xp.where(votes > 0, 1.0, -1.0), axis=-1)
    fit = xp.sort((fit / xp.where(held > 0, held, 1.0))[held > 0])
    if fit.shape[0] == 0 or float(fit[fit.shape[0] // 2]) < MIN_FIT:
        return None
    return _classes(xp, votes)


def _quiet_votes(xp, la, lb, agree, votes):
    """Votes (k,) for indices small on both sides in every sampled entry (a pair of distant
    functions: its integrals and its density noise-sized): each entry prefers the class where
    the index stays below the class's largest magnitude on that class's noise side (its row's
    where the row is the noise side, its column's where the column is), by at least NOISE_GAP
    bits; in the other class the index would set the scaling of a noise line."""
    oriented = agree * votes  # (voters, k): > 0 where the entry's column is the noise side
    noise_row = xp.max(xp.where(oriented < 0, la, _ZERO_LOG2), axis=-1, keepdims=True)
    noise_col = xp.max(xp.where(oriented > 0, lb, _ZERO_LOG2), axis=-1, keepdims=True)
    over_row, over_col = la - noise_row, lb - noise_col  # how far the index would raise each
    prefer = over_row - over_col  # > 0: the class where the column is the noise side
    harm = (xp.maximum(over_row, over_col) > 0) & (xp.abs(prefer) >= NOISE_GAP)
    return xp.sum(agree * xp.where(harm, xp.sign(prefer), 0.0), axis=-2)


def _spread_votes(xp, ar, ai, br, bi, beyond, held_rows, idx):
    """Votes (k,) for the indices ``idx`` from up to ``SPREAD`` held rows and columns: the sign
    of the gap between the largest normalized magnitude over those rows of A and over those
    columns of B, where the gap is at least ``NOISE_GAP`` bits and the larger side significant
    (0 elsewhere; > 0: B's side is the noise side, as ``gap`` in ``k_classes``)."""
    held_cols = xp.nonzero(xp.any(beyond, axis=-2))[0]
    rows = held_rows[:: max(1, held_rows.shape[0] // SPREAD)][:SPREAD]
    cols = held_cols[:: max(1, held_cols.shape[0] // SPREAD)][:SPREAD]

    def top(re, im, lines, axis):
        # the largest normalized magnitude at ``idx`` over ``lines`` (log2; _ZERO_LOG2 for 0),
        # a few lines at a time (each a whole row or column of the operand: k entries)
        step = max(1, SPREAD_ENTRIES // re.shape[1 - axis])
        best = None
        for i in range(0, lines.shape[0], step):
            part = lines[i : i + step]
            mag = magnitude(xp, xp.take(re, part, axis=axis),
                            None if im is None else xp.take(im, part, axis=axis))  # fmt: skip
            line_max = xp.max(mag, axis=1 - axis, keepdims=True)
            rel = xp.take(mag, idx, axis=1 - axis) / xp.where(line_max > 0, line_max, 1.0)
            got = xp.max(rel, axis=axis)
            best = got if best is None else xp.maximum(best, got)
        return _log2(xp, best)

    la = top(ar, ai, rows, 0)
    lb = top(br, bi, cols, 1)
    gap = la - lb
    decided = (xp.abs(gap) >= NOISE_GAP) & (xp.maximum(la, lb) >= -SIGNIFICANT_BITS)
    votes = xp.zeros(ar.shape[-1], dtype=gap.dtype)
    votes[idx] = xp.where(decided, xp.sign(gap), 0.0)
    return votes


def _classes(xp, votes):
    """The two classes of the votes (index 0's first), or None where one is empty."""
    first = votes > 0 if bool(votes[0] > 0) else votes <= 0
    classes = [xp.nonzero(first)[0], xp.nonzero(~first)[0]]
    if any(c.shape[0] == 0 for c in classes):
        return None
    return [xp.astype(c, xp.int64) for c in classes]
