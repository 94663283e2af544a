"""The suspect refinement and the patch: counts taken off after the certificate's count.

The certificate (``certificate.certify_moduli``) finds the smallest count of moduli that its
cheap bounds certify on every entry, then tests one count lower with the exact shifts
(``certificate.exact_passes``). The entries that fail that test, the suspects, often pass with
better information: ``refine_and_patch`` takes off one count at a time (at most REFINE_STEPS)
while every suspect passes with its dot products of magnitudes (all of them, at most
REFINE_ENTRIES, for the strict form; an even sample of REFINE_ENTRIES giving theta for the
native form). When at most ``patch_limit(m, n)`` still fail, the count drops all the same and
those entries are recomputed with MAX_MODULI moduli after the product (``refit``). Where more
fail but they lie in a few rows of A and columns of B (the native form only, ``line_patch``),
the count drops too and those lines are taken from the native product. Only 2-D products are
refined and patched (batched ones stop after the exact shifts).

References: Uchino, Ozaki, Imamura, arXiv:2602.02549 (the error bound of Scheme II, Lemma 2);
Higham & Mary, SIAM J. Sci. Comput. 2019 (the model of rounding errors of the native form).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .certificate import cert_constants, exact_line_factors, passes
from .moduli import MIN_MODULI
from .scaling import magnitude, max_exponent
from .xputil import ldexp, to_host

# The suspect refinement (``refine_moduli``) runs when at most this many entries stand in the
# way of one modulus fewer: its dot products then cost a small fraction of one INT8 GEMM. The
# native form takes up to SUSPECTS_MAX suspects, of which it samples REFINE_ENTRIES.
REFINE_ENTRIES = 4096
SUSPECTS_MAX = 1 << 24
# The native form's per-product relaxation: at most this factor on |A||B| (``refine_moduli``).
THETA_MAX = 16.0

# Entries one count lower cannot certify are recomputed with MAX_MODULI moduli (``refit``) when
# at most this many, and at most 1/PATCH_SHARE of the output: one dot product of residues
# of length k per entry and modulus.
PATCH_ENTRIES = 256
PATCH_SHARE = 64
# The native form's line patch (``line_patch``): the failing entries of one count fewer often
# fill a few rows of A (or columns of B) whose largest entry stands far above the rest: the
# Scheme II error of such a line follows its largest entry, the native GEMM's its terms. Those
# lines may come from the native product (the native form's target is its error) where they
# hold at most 1/LINE_SHARE of the output: a native GEMM of that share, against one modulus of
# about fifteen.
LINE_SHARE = 64
REFINE_STEPS = 4  # counts the refinement may take off, one at a time
# ``refine_failures`` tests the suspects in blocks of about 1/TEST_BLOCKS of them (at least
# TEST_MIN_ENTRIES): its work arrays then stay a fraction of the suspects' own.
TEST_BLOCKS = 8
TEST_MIN_ENTRIES = 1 << 16


def patch_limit(m, n):
    """How many entries of an (m, n) product (per batch) ``refine_and_patch`` may patch."""
    return min(PATCH_ENTRIES, (m * n) // PATCH_SHARE)


def takes_lines(target):
    """Whether the refinement may patch whole lines from the native product (``line_patch``):
    the native form's target is the native product's error; the strict form's is not."""
    return target.guarantee == "native"


def fails_limit(m, n, lines=False):
    """How many failing entries a step of an (m, n) product reports (per batch) for its patch:
    ``patch_limit(m, n)``, and with ``lines`` (``takes_lines``) as many more as the lines of
    ``line_patch`` may hold."""
    return max(patch_limit(m, n), 0) + ((m * n) // LINE_SHARE if lines else 0)


def suspects_limit(target):
    """The most suspects the refinement takes (the native form samples them)."""
    return SUSPECTS_MAX if target.guarantee == "native" else REFINE_ENTRIES


def refine_moduli(xp, backend, ar, ai, br, bi, prescale, target, count, suspects):
    """``refine_and_patch``'s count without the patch (the count when patching is not
    available)."""
    return refine_and_patch(
        xp, backend, ar, ai, br, bi, prescale, target, count, suspects, patching=False
    )[0]


def refine_and_patch(xp, backend, ar, ai, br, bi, prescale, target, count, suspects,
                     patching=True, gaussian=False):  # fmt: skip
    """``(count, patch)``: the count after the suspect refinement (one count at a time, while
    every suspect passes, at most REFINE_STEPS), and the flat indices of the entries the level
    recomputes with MAX_MODULI moduli (None: none; a ``LinePatch`` where the native form takes
    lines from the native product, ``line_patch``): whether the entries that fail
    ``count - 1`` (``suspects(count)``: their flat indices in the (m, n) output, their lower
    bound of |A||B| so far and their line norms na, nb; None when there are too many) pass it
    with more information than the cheap bounds. Only 2-D products.

    Strict form: at most REFINE_ENTRIES suspects, each with its dot product of magnitudes
    summed in float64 (line-normalized; the rounding removed by ``1 - (k+2) 2**-52`` and an
    absolute ``(2k+2) 2**-1074``: all terms are >= 0, so this holds for any order of the sums):
    the bound GEMM's fixed-point lower bound is loose for entries whose terms are far below
    their lines' maxima.

    Native form: its target is the native GEMM's error at the entry, whose scale
    sqrt(k) ||a_i o b_j||_2 = kappa_ij (|A||B|)_ij the cheap test bounds by kappa >= 1. The
    componentwise measure compares the largest errors over the whole product, and the native
    GEMM's largest ones come from its entries of largest kappa; so the suspects are tested
    against theta (|A||B|)_ij, theta the largest kappa found on a sample of REFINE_ENTRIES of
    them (a lower bound of the product's largest, capped at THETA_MAX: the elementwise relative
    measure compares single entries, ``algorithm.refit``), and the sampled ones against their own
    kappa where larger. One dot product of length k per sampled suspect (the cupy backend runs the
    same steps in its kernels).

    Patch: when the suspects that still fail are at most ``patch_limit(m, n)``, the count
    drops by one all the same and those entries are recomputed with MAX_MODULI moduli after the
    product (they passed ``count``, so the maximum certifies them): a few dot products instead
    of one INT8 GEMM per modulus over the whole output; for the native form also where more
    fail but a few lines hold all but ``patch_limit(m, n)`` of them (``line_patch``).
    ``gaussian``: the counts are of the Gaussian moduli (``certificate.cert_constants``)."""
    if count is None or ar.ndim != 2 or br.ndim != 2:
        return count, None
    m, k = ar.shape
    n = br.shape[-1]
    _, _, e, f = prescale
    cplx = ai is not None
    native = target.guarantee == "native"

    def tested(count):
        sus = suspects(count)
        if sus is None or not (native or sus[0].shape[0] <= REFINE_ENTRIES):
            return None, 0, None
        idx, lam, na, nb = sus
        if idx.shape[0] == 0:
            return 0, 0, None
        pick = refine_sample(xp, idx.shape[0])
        sidx = xp.take(idx, pick)
        S, S2 = suspect_sums(xp, ar, ai, br, bi, sidx // n, sidx % n, native)
        e_r, f_c = xp.take(e, idx // n), xp.take(f, idx % n)
        fail = refine_failures(xp, k, target, cplx, count, lam, S, e_r, f_c, na, nb, S2, pick,
                               gaussian)  # fmt: skip
        return idx.shape[0], int(xp.count_nonzero(fail)), lambda: xp.take(idx, xp.nonzero(fail)[0])

    return refine_loop(count, tested, m, n, patching, takes_lines(target))


def refine_loop(count, tested, m, n, patching=True, lines=False):
    """``refine_and_patch``'s loop on an (m, n) product from ``count``: ``tested(c)`` is one
    step's test one count below c, ``(suspects, failing, failed)``: how many suspects (None:
    more than the step takes), how many of them fail (at least ``fails_limit(m, n, lines) + 1``
    where more do) and a callable giving the failing ones' flat indices, ascending (all of
    them where at most ``fails_limit`` fail); ``step_after`` decides, ``lines`` as its. A
    backend's kernels give ``tested`` where the generic code would read every suspect
    (``refine_and_patch``'s own)."""
    step = Step(count, True, None)
    for _ in range(REFINE_STEPS):
        if not (step.going and step_runs(step.count)):
            break
        step = step_after(step.count, *tested(step.count), m, n, patching, lines)
    return step.count, step.patch


class Step(NamedTuple):
    """The state after one step of ``refine_and_patch``'s loop."""

    count: int
    going: bool  # the loop takes another step (at most REFINE_STEPS)
    patch: Any  # the flat indices of the entries recomputed (the loop then stops), a
    # ``LinePatch``, or None


class LinePatch(NamedTuple):
    """A patch with lines (``line_patch``): the ``rows`` of A and ``cols`` of B (ascending int64
    numpy arrays) whose output lines come from the native product, the ``block`` (None, or the
    pair of them: rows R, columns C) whose entries (i, j), i in R, j in C, do too, and the
    failing entries outside them (``entries``: ascending flat indices, an int64 numpy array, at
    most ``patch_limit(m, n)``) recomputed with MAX_MODULI moduli as a patch's."""

    rows: Any
    cols: Any
    block: Any
    entries: Any


def step_runs(count):
    """Whether a step of the refinement runs at ``count`` (a count above the fewest)."""
    return count > MIN_MODULI


def next_step(xp, count, idx, fail=None, m=0, n=0, patching=True):
    """``step_after`` from a step's suspects' flat indices ``idx`` in the (m, n) product (None:
    too many, the loop stops) and their failures ``fail`` of ``refine_failures``. The engine and
    the dask layer both decide here."""
    if idx is None:
        return Step(count, False, None)
    failing = int(xp.count_nonzero(fail)) if idx.shape[0] else 0
    return step_after(count, idx.shape[0], failing,
                      lambda: xp.take(idx, xp.nonzero(fail)[0]), m, n, patching)  # fmt: skip


def step_after(count, suspects, failing, failed, m=0, n=0, patching=True, lines=False):
    """The decision of one step of ``refine_and_patch``'s loop at ``count``: ``suspects`` how
    many (None: too many, the loop stops), ``failing`` how many of them fail ``count - 1``,
    ``failed()`` their flat indices. One count fewer where none fails (the loop goes on), or
    where at most ``patch_limit(m, n)`` do, which are then the patch (the loop stops), or, with
    ``lines`` (``takes_lines``), where at most ``fails_limit(m, n, True)`` do and ``line_patch``
    covers them, its ``LinePatch`` (the loop stops); else the same count (it stops)."""
    if suspects is None:
        return Step(count, False, None)
    if suspects == 0 or failing == 0:
        return Step(count - 1, True, None)
    if patching and failing <= patch_limit(m, n):
        return Step(count - 1, False, failed())
    if patching and lines and failing <= fails_limit(m, n, True):
        patch = line_patch(failed(), m, n)
        if patch is not None:
            return Step(count - 1, False, patch)
    return Step(count, False, None)


def kernel_patch(count, failed, m, n, lines=False):
    """``(count, patch)`` of a step that a backend's kernels decided as ``step_after`` does, but
    with ``fails_limit(m, n, lines)`` in the place of the patch's limit: they took one count off
    (to ``count``) with the failing entries' flat indices ``failed`` (ascending, at most that
    many). ``step_after``'s decision on those: the entry patch, a ``LinePatch``, or the count back
    up and no patch."""
    step = step_after(count + 1, 1, failed.shape[0], lambda: failed, m, n, True, lines)
    return step.count, step.patch


def line_patch(failed, m, n):
    """The ``LinePatch`` of the failing entries ``failed`` (ascending flat indices into an
    (m, n) product, any array library) or None. Lines are taken greedily, each time the one
    with the most failures not yet covered per entry it holds (a row of n entries against a
    column of m; ties: rows first, then the lowest index), until the failures left are at most
    ``patch_limit(m, n)`` (the entries), or the block of the rows and columns that hold them
    fits and holds as large a share of failures as the next line (or that line does not fit);
    None where more than (m n) / LINE_SHARE entries would be in lines and block together.

    Both shapes are common where a few rows of A (columns of B) hold an entry far above the
    rest: their lines fail nearly throughout, and rows and columns of moderately large entries
    fail where they cross."""
    idx = to_host(failed).astype(np.int64, copy=False)
    if idx.shape[0] > 1 and not np.all(idx[1:] > idx[:-1]):  # the kernels' are ascending
        idx = np.unique(idx)  # sorted, each once
    r, c = idx // n, idx % n
    rows_fail, cols_fail = np.bincount(r, minlength=m), np.bincount(c, minlength=n)
    # (numpy's stable sort of 16-bit keys is a radix sort: ~10x faster than of int64 ones)
    by_col = np.argsort(c.astype(np.uint16) if n <= 1 << 16 else c, kind="stable")
    row_at = np.searchsorted(r, np.arange(m + 1))  # flat order: ascending rows
    col_at = np.searchsorted(c[by_col], np.arange(n + 1))
    live = np.ones(idx.shape[0], dtype=bool)
    left, held, budget = idx.shape[0], 0, (m * n) // LINE_SHARE
    rows, cols = [], []
    while True:
        if left <= patch_limit(m, n):
            return _line_patch(rows, cols, None, idx[live])
        i, j = int(np.argmax(rows_fail)), int(np.argmax(cols_fail))
        row = int(rows_fail[i]) * m >= int(cols_fail[j]) * n
        size = n if row else m
        # the block of the rows and columns with failures left, where it fits and holds as
        # large a share of failures as the best line (else that line, where it fits)
        br, bc = np.count_nonzero(rows_fail), np.count_nonzero(cols_fail)
        best = int(rows_fail[i] if row else cols_fail[j])
        if held + br * bc <= budget and (left * size >= best * br * bc or held + size > budget):
            block = (np.nonzero(rows_fail)[0], np.nonzero(cols_fail)[0])
            return _line_patch(rows, cols, block, idx[:0])
        # A line's failures per entry only fall as lines are taken, and a block holds at least
        # the failures left: where neither the budget's lines nor any block can be enough, stop
        if (left - patch_limit(m, n)) * size > (budget - held) * best and held + left > budget:
            return None
        held += size
        if held > budget:
            return None
        if row:
            at = np.arange(row_at[i], row_at[i + 1])
            rows.append(i)
        else:
            at = by_col[col_at[j] : col_at[j + 1]]
            cols.append(j)
        at = at[live[at]]
        live[at] = False
        left -= at.shape[0]
        np.subtract.at(rows_fail, r[at], 1)  # the line's own count falls to 0
        np.subtract.at(cols_fail, c[at], 1)


def _line_patch(rows, cols, block, entries):
    def ints(x):
        return np.sort(np.asarray(x, dtype=np.int64))

    block = None if block is None else (ints(block[0]), ints(block[1]))
    return LinePatch(ints(rows), ints(cols), block, entries)


def refine_sample(xp, total):
    """Positions (into the suspects, in flat order) of the ones ``refine_moduli`` sums: all
    when at most REFINE_ENTRIES, else every ceil(total / REFINE_ENTRIES)-th (an even sample,
    the same on every backend)."""
    step = -(-total // REFINE_ENTRIES)
    return xp.arange(0, total, step)


def refine_failures(xp, k, target, complex_, count, lam, S, e, f, na, nb, S2=None, pick=None,
                    gaussian=False):  # fmt: skip
    """Per suspect, whether it fails ``count - 1`` (``refine_and_patch``'s test): 1-D arrays
    over the suspects of their lower bound ``lam`` so far, the prescale's e_i, f_j and line
    norms; ``S`` (and for the native form ``S2``) the float64 sums of the line-normalized
    magnitude products (and of their squares) of the sampled suspects at positions ``pick``
    (None: all), in any order; their rounding is removed by ``1 - (k+2) 2**-52`` and
    ``(2k+2) 2**-1074`` (all terms are >= 0). Then the exact-shift test at count - 1
    (``certificate.exact_passes``). ``gaussian``: as ``refine_and_patch``'s."""
    cc = cert_constants(k, target, complex_, gaussian)
    if pick is None:
        pick = xp.arange(lam.shape[0])
    S = xp.maximum(S * cc.native_factor - cc.native_abs_term, 0.0)
    if target.guarantee == "native":
        S2 = xp.maximum(S2 * cc.native_factor - cc.native_abs_term, 0.0)
        scale = xp.sqrt(S2 * k) * (1.0 - 2.0**-52)  # <= sqrt(k) ||a_i o b_j||_2
        upper = S * (1.0 + (k + 2) * 2.0**-52) + cc.native_abs_term  # >= (|A||B|)_ij
        kappa = xp.where(upper > 0, scale / upper, 1.0) * (1.0 - 2.0**-50)
        # sqrt(k) at most: the deterministic bound k weight 2**-bits |A||B| holds throughout
        theta = min(THETA_MAX, math.sqrt(k), max(1.0, float(xp.max(kappa))))
        own = xp.maximum(xp.take(lam, pick) * theta, xp.maximum(S, scale))
        lam = lam * theta
        lam[pick] = own
    else:
        lam = _scatter(xp, lam, pick, xp.maximum(xp.take(lam, pick), S))
    # the test entry by entry, in blocks of suspects: its work arrays stay a fraction of theirs
    total = lam.shape[0]
    step = max(TEST_MIN_ENTRIES, -(-total // TEST_BLOCKS))
    fail = []
    for t0 in range(0, total, step):
        sl = slice(t0, t0 + step)
        p = exact_line_factors(xp, cc, count - 1, e[sl], cc.scale)
        q = exact_line_factors(xp, cc, count - 1, f[sl], cc.scale)
        fail.append(~passes(xp, cc, 1.0, cc.cR * lam[sl], p, q, na[sl], nb[sl]))
    return fail[0] if len(fail) == 1 else xp.concat(fail)


def _scatter(xp, x, at, v):
    """``x`` (1-D) with ``x[at] = v`` (a new array)."""
    out = xp.asarray(x, copy=True)
    out[at] = v
    return out


def suspect_sums(xp, ar, ai, br, bi, rows, cols, squares):
    """Per suspect (row ``rows[t]`` of A, column ``cols[t]`` of B) the float64 sums of the
    line-normalized magnitude products and (``squares``) of their squares, in chunks of
    suspects that keep the products' memory near 2**22 entries, and below an eighth of the
    operands' (each chunk holds several arrays of its size)."""

    def factors(t0, t1):
        r, c = rows[t0:t1], cols[t0:t1]
        a_r, b_r = xp.take(ar, r, axis=0), xp.permute_dims(xp.take(br, c, axis=1), (1, 0))
        a_i = None if ai is None else xp.take(ai, r, axis=0)
        b_i = None if bi is None else xp.permute_dims(xp.take(bi, c, axis=1), (1, 0))
        ea = xp.expand_dims(max_exponent(xp, a_r, a_i, axis=-1), axis=-1)
        eb = xp.expand_dims(max_exponent(xp, b_r, b_i, axis=-1), axis=-1)
        return ldexp(xp, magnitude(xp, a_r, a_i), -ea), ldexp(xp, magnitude(xp, b_r, b_i), -eb)

    size = math.prod(ar.shape) + math.prod(br.shape)
    limit = min(1 << 22, max(1 << 16, size // 8))
    return product_sums(xp, rows.shape[0], ar.shape[-1], factors, squares, limit)


def product_sums(xp, count, k, factors, squares, limit=1 << 22):
    """Per suspect t < ``count`` the float64 sum of the products of its two factors
    (``factors(t0, t1)``: those of suspects t0 to t1 - 1, (t1 - t0, k) each) and (``squares``)
    of their squares, in chunks of suspects that keep the products' memory near ``limit``
    entries (each suspect's sum is its own: any chunks give the same sums)."""
    step = max(1, limit // max(k, 1))
    S, S2 = [], []
    for t0 in range(0, count, step):
        xa, xb = factors(t0, t0 + step)
        x = xa * xb
        S.append(xp.sum(x, axis=-1))
        if squares:
            S2.append(xp.sum(x * x, axis=-1))
    return xp.concat(S), (xp.concat(S2) if squares else None)
