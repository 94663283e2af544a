"""The per-part check of complex products: whether each part of every entry keeps its own
accuracy on the complex route, or the product must be split into real products.

A complex product's real and imaginary parts are sums of their own terms,

    Re C = Ar Br - Ai Bi,  sums P_re = |Ar||Br| + |Ai||Bi|,
    Im C = Ar Bi + Ai Br,  sums P_im = |Ar||Bi| + |Ai||Br|,

and a native GEMM computes each to an accuracy of its own sums (Higham & Mary's model:
rounding errors of rms u sqrt(k) ||terms||_2 per part). The emulation scales each row of A and
column of B by the complex magnitudes |Re| + |Im| and certifies every entry against
T = P_re + P_im (``certificate``): its error in a part is about that of the whole entry, so a
part whose sums are a small share of T keeps fewer bits than native's (a phase of 1e-12 loses
~40 bits of the imaginary part). A part is fine where the route's bound on T is within a
slack of the part's own bound:

    native form:  T <= slack max(P_p, sqrt(k) ||terms_p||_2)   (the native form's target)
    strict form:  T <= slack P_p

per entry and part p (a part whose terms are all zero is exact on either route). The slack
of each route is the planner's (``_planner.part_form``). Where some part of some entry is not
fine the product runs as real products of the stacked parts, each part certified on its own
sums (``_engine``).

First the balance of the parts (``balanced``): ordinary complex inputs, whose parts are of
similar size, are fine by it in two GEMMs of the operands' size. Otherwise the bounds come in up
to three stages, each only where the one before leaves a part of some entry not fine:

1. The sums (``stage_sums``): the magnitudes normalized by the complex line exponents of
   ``certificate.normalized``, the four products of the parts (Ar Br, Ai Bi, Ar Bi, Ai Br)
   as one GEMM of the stacked operands through the backend's ``certificate.magnitude_lower``
   (one bfloat16 tensor-core GEMM on the GPU, float32 elsewhere): a lower bound of each
   part's sums, and ``certificate.magnitude_upper`` of it the upper bound (within about 2 %).
   An entry is fine where the part's lower bound meets the upper bound of T / slack, failing
   where even the part's upper bound (times sqrt(k) in the native form) is below the lower
   bound of T / slack.
2. The exact zeros (``exact_zeros``): which parts have no nonzero term (exact on either
   route), from one integer GEMM of the nonzero patterns.
3. kappa (``with_kappa``, the native form only, where entries stay undecided and none fails):
   the lower bound of sqrt(k) ||terms_p||_2 from one more GEMM of the stacked squares. Entries
   still undecided count as failing (the safe side).

Stage 0's lower bound of T also serves the complex route's certificate: T / 2 is a lower bound
of |A||B| of the moduli (``certificate.parts_lower``), mostly well above the bound GEMM's.

The stages read only the operands: the dask layer computes them over its chunks and decides
with ``decide`` as the engine does (the exact zeros are the engine's; the sums may differ in
their last bits, so only an entry within about k 2**-24 of a threshold can decide
differently).

References: Higham & Mary, SIAM J. Sci. Comput. 2019 (the rounding-error model of the native
form); Uchino et al., arXiv:2512.08321 (complex Scheme II, whose 3M form certifies the modulus).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .certificate import (
    lower_abs,
    magnitude_upper,
    parts_lower,
    signed_error,
    upper_of,
    upper_terms,
)
from .scaling import max_exponent
from .xputil import dd_add, ldexp


class PartForm(NamedTuple):
    """How a route's bound on T relates to each part's (``_planner.part_form``): ``slack``
    (a part fine where T <= slack times its own bound), ``native`` (the native form: the part's
    bound is max(P_p, sqrt(k) ||terms_p||_2); else P_p), ``route`` (the plan's name of it)."""

    slack: float
    native: bool
    route: str


class PartBounds(NamedTuple):
    """Per entry (..., m, n), normalized by the complex line exponents: lower and upper bounds
    of the sums (P_re, P_im), whether a part's terms are all zero (``zero``), and the lower
    bounds of sqrt(k) ||terms_p||_2 (``kappa``, stage 2; None before)."""

    lo: tuple
    hi: tuple
    zero: tuple
    kappa: tuple | None = None


class PartCheck(NamedTuple):
    """``part_check``'s result: ``split`` (some part of some entry is not fine), ``part`` ("real",
    "imaginary" or "real and imaginary": the parts not fine), ``share`` (the smallest upper bound
    of a failing part's sums relative to its entry's T: how small the part is), ``stages``
    (how many stages decided), ``lower`` (where the complex route runs: stage 0's lower bound of
    T as ``certificate.parts_lower`` gives it, FP32 sums (..., m, n) line-normalized, the
    certificate's other lower bound of |A||B|; None otherwise)."""

    split: bool
    part: str = ""
    share: float = 1.0
    stages: int = 1
    lower: object = None


def _line_exponents(xp, ar, ai, br, bi, lines=None):
    """The complex line exponents of ``certificate.normalized``: (..., m, 1), (..., 1, n);
    ``lines``: the same, made already (the backend's line scan), or None."""
    if lines is not None:
        return lines
    ea = xp.expand_dims(max_exponent(xp, ar, ai, axis=-1), axis=-1)
    eb = xp.expand_dims(max_exponent(xp, br, bi, axis=-2), axis=-2)
    return ea, eb


def _magnitudes(xp, ar, ai, br, bi, lines=None):
    """The parts' magnitudes normalized by the complex line exponents (entries < 2)."""
    ea, eb = _line_exponents(xp, ar, ai, br, bi, lines)
    na = [ldexp(xp, xp.abs(x), -ea) for x in (ar, ai)]
    return na, [ldexp(xp, xp.abs(x), -eb) for x in (br, bi)]


def _stacked(xp, gemm, xa, xb):
    """The four products of the parts as their (Re, Im) sums, one GEMM of the stacked operands:
    [xa_r, xa_i] (..., m, 2k) @ [[xb_r, xb_i], [xb_i, xb_r]] (..., 2k, 2n)."""
    a2 = xp.concat([xa[0], xa[1]], axis=-1)
    b_re = xp.concat([xb[0], xb[1]], axis=-2)
    b_im = xp.concat([xb[1], xb[0]], axis=-2)
    s = gemm(a2, xp.concat([b_re, b_im], axis=-1))
    n = xb[0].shape[-1]
    return s[..., :n], s[..., n:]


def balanced(xp, lower, signed, ar, ai, br, bi, form, lines=None, hooks=(None, None, None)):
    """``(fine, pl)``: whether the balance of the parts alone shows every part of every entry
    fine (stage 0), and ``certificate.parts_lower`` of the lower bound of T it took (the
    certificate's other lower bound of |A||B|, FP32 sums (..., m, n); None where k is beyond
    its range): with T = (|Ar| + |Ai|)(|Br| + |Bi|) = P_re + P_im and D = (|Ar| - |Ai|)(|Br| -
    |Bi|) = P_re - P_im, each part's sums are P_p = (T +- D) / 2 >= (T - |D|) / 2. T from
    ``lower`` (as in ``stage_sums``) and D, of either sign, from ``signed``
    (``certificate.signed_estimate``: within ``signed_error`` of sum ||Ar| - |Ai|| ||Br| - |Bi||
    <= T): two GEMMs of the operands' size, where the stacked one of stage 1 is four times that.
    Every entry is fine where (T - |D|) / 2 >= T / slack, entries in all-zero lines (no term at
    all) included. False says nothing: the stages decide. ``lines``: ``_line_exponents``'
    result, when made already; ``hooks``: a backend's fused kernels of ``balance_sides`` and
    ``balance_fine`` (same arguments and results), and of the whole stage (``(ar, ai, br, bi,
    ea, eb, terms)`` with the line exponents and ``balance_terms``: the same result, its GEMMs
    the backend's ``lower`` and ``signed``); each None, or returning None, declines."""
    ea, eb = _line_exponents(xp, ar, ai, br, bi, lines)
    side_hook, fine_hook, stage_hook = hooks
    k = ar.shape[-1]
    terms = balance_terms(k, form.slack)
    got = None if stage_hook is None else stage_hook(ar, ai, br, bi, ea, eb, terms)
    if got is not None:
        return got

    def sides(re, im, e):
        got = None if side_hook is None else side_hook(re, im, e)
        return balance_sides(xp, re, im, e) if got is None else got

    (ta, da), (tb, db) = sides(ar, ai, ea), sides(br, bi, eb)
    t_lo, s = lower(ta, tb), signed(da, db)
    empty = (xp.expand_dims(xp.max(ta, axis=-1) == 0, axis=-1),
             xp.expand_dims(xp.max(tb, axis=-2) == 0, axis=-2))  # fmt: skip
    got = None if fine_hook is None else fine_hook(t_lo, s, terms, *empty)
    fine = balance_fine(xp, t_lo, s, terms, *empty) if got is None else got
    return fine, parts_lower(xp, t_lo, k)


def balance_sides(xp, re, im, e):
    """``balanced``'s operand sides (|re| + |im|, |re| - |im|), each part line-normalized first
    (``ldexp`` by -e: entries < 4)."""
    x, y = ldexp(xp, xp.abs(re), -e), ldexp(xp, xp.abs(im), -e)
    return x + y, x - y


def balance_terms(k, slack):
    """``balance_fine``'s scalars: ``certificate.upper_terms(k)``, then signed_error(k),
    lower_abs(k) and the factors of the test, in its order of operations."""
    up = upper_terms(k)
    return up + (signed_error(k), lower_abs(k), 1.0 + 2.0**-50, 1.0 - 2.0**-52, 1.0 + 2.0**-52,
                 0.5 * (1.0 - 2.0**-50), (1.0 + 2.0**-52) / slack)  # fmt: skip


def balance_fine(xp, t_lo, s, terms, empty_rows, empty_cols):
    """``balanced``'s test from T's lower bound ``t_lo`` and D's estimate ``s``: every entry
    fine, (T - |D|) / 2 >= T / slack in bounds rounded the safe way (``terms``:
    ``balance_terms``), or in an all-zero row (``empty_rows`` (..., m, 1)) or column
    (``empty_cols`` (..., 1, n))."""
    se, la, d_up, lo_dn, hi_up, half_dn, per_slack = terms[5:]
    t_hi = upper_of(t_lo, terms[:5])
    d_hi = ((xp.abs(s) + se * t_hi) + la) * d_up
    part_lo = (t_lo * lo_dn - d_hi * hi_up) * half_dn
    fine = part_lo >= t_hi * per_slack
    return bool(xp.all(fine | empty_rows | empty_cols))


def stage_sums(xp, lower, ar, ai, br, bi, lines=None):
    """``PartBounds`` of the sums (module docstring, stage 1): ``lower(xa, xb)`` is
    ``certificate.magnitude_lower`` of the backend (its lower bound of a product of non-negative
    operands with entries <= 2), the upper bounds ``certificate.magnitude_upper`` of it; which
    parts have no nonzero term is not known yet (``zero`` None)."""
    na, nb = _magnitudes(xp, ar, ai, br, bi, lines)
    lo = _stacked(xp, lower, na, nb)
    K = 2 * ar.shape[-1]
    return PartBounds(lo, tuple(magnitude_upper(xp, x, K) for x in lo), (None, None))


def exact_zeros(xp, int_matmul, ar, ai, br, bi, bounds):
    """``bounds`` with ``zero`` (stage 2): per entry and part, whether no term is nonzero, from
    the exact counts of nonzero terms (one integer GEMM of the parts' nonzero patterns)."""
    nz = [xp.astype(x != 0, xp.float64) for x in (ar, ai, br, bi)]
    counts = _stacked(xp, lambda x, y: int_matmul(x, y, 1), nz[:2], nz[2:])
    return bounds._replace(zero=tuple(c == 0 for c in counts))


def with_kappa(xp, lower, ar, ai, br, bi, bounds, lines=None):
    """``bounds`` with ``kappa`` (stage 3, the native form): lower bounds of sqrt(k)
    ||terms_p||_2 from one more GEMM of the stacked squares (each square / 4 <= 1, rounded
    down: each term's square / 16)."""
    na, nb = _magnitudes(xp, ar, ai, br, bi, lines)
    quarter = 0.25 * (1.0 - 2.0**-52)
    sq = _stacked(xp, lower, [x * x * quarter for x in na], [x * x * quarter for x in nb])
    k = ar.shape[-1]
    kappa = tuple(4.0 * xp.sqrt(s * k) * (1.0 - 2.0**-52) for s in sq)
    return bounds._replace(kappa=kappa)


def judge(xp, bounds, form, k):
    """Per part (re, im): ``(fine, fail)`` masks of the entries the bounds decide (neither:
    undecided). T lies in [lo_re + lo_im, hi_re + hi_im]; the slack is a power of two, so the
    divisions are exact."""
    lo_t = (bounds.lo[0] + bounds.lo[1]) * (1.0 - 2.0**-52) / form.slack
    hi_t = (bounds.hi[0] + bounds.hi[1]) * (1.0 + 2.0**-52) / form.slack
    up = math.sqrt(k) * (1.0 + 2.0**-52) if form.native else 1.0
    out = []
    for p in range(2):
        own = bounds.lo[p]
        if bounds.kappa is not None:
            own = xp.maximum(own, bounds.kappa[p])
        fine, fail = own >= hi_t, bounds.hi[p] * up < lo_t
        zero = bounds.zero[p]
        if zero is not None:
            fine, fail = zero | fine, ~zero & fail
        out.append((fine, fail))
    return out


def decide(xp, bounds, form, k, final):
    """``PartCheck`` from ``bounds``; None when entries stay undecided and none fails (stage 2
    then runs), unless ``final`` (they fail)."""
    verdicts = judge(xp, bounds, form, k)
    failing = [fail if not final else ~fine for fine, fail in verdicts]
    if not any(bool(xp.any(f)) for f in failing):
        if all(bool(xp.all(fine)) for fine, _ in verdicts):
            return PartCheck(False)
        if not final:
            return None
    names = [n for n, f in zip(("real", "imaginary"), failing) if bool(xp.any(f))]
    lo_t = bounds.lo[0] + bounds.lo[1]
    share = 1.0
    for p, f in enumerate(failing):
        if bool(xp.any(f)):
            r = xp.where(f & (lo_t > 0), bounds.hi[p] / xp.where(lo_t > 0, lo_t, 1.0), 1.0)
            share = min(share, float(xp.min(r)))
    return PartCheck(True, " and ".join(names), share)


def part_check(xp, lower, signed, int_matmul, ar, ai, br, bi, form, materialize=None,
               lines=None, hooks=(None, None, None)):
    """``PartCheck`` of a complex product (``ar`` ... the finite float64 parts, (..., m, k) and
    (..., k, n); ``ai`` or ``bi`` may be all zero but not None): the sums' bounds, then, only
    where some part of some entry is not fine by them, the exact zeros and (native form) kappa
    (module docstring). ``lower`` the backend's ``certificate.magnitude_lower``, ``signed`` its
    ``certificate.signed_estimate``,
    ``int_matmul(x, y, bound)`` an exact integer GEMM, ``form`` the route's ``PartForm``;
    ``materialize(bounds)`` returns ``(namespace, bounds)`` to decide on (the dask layer computes
    its lazy bounds there; default: as they are); ``lines``: the operands' complex line
    exponents (``_line_exponents``), when the backend's line scan made them; ``hooks``: the
    backend's fused kernels of ``balanced``."""
    k = ar.shape[-1]
    if k == 0:  # no terms: every part exact
        return PartCheck(False, stages=0)
    done = materialize or (lambda bounds: (xp, bounds))
    fine, pl = balanced(xp, lower, signed, ar, ai, br, bi, form, lines, hooks)
    if fine:
        return PartCheck(False, stages=0, lower=pl)

    def kept(res):  # the complex route keeps T's lower bound for its certificate
        return res if res.split else res._replace(lower=pl)

    dxp, bounds = done(stage_sums(xp, lower, ar, ai, br, bi, lines))
    res = decide(dxp, bounds, form, k, final=False)
    if res is not None and not res.split:
        return kept(res)
    dxp, bounds = done(exact_zeros(xp, int_matmul, ar, ai, br, bi, bounds))
    res = decide(dxp, bounds, form, k, final=False)
    if res is not None:
        return kept(res._replace(stages=2))
    if form.native:
        dxp, bounds = done(with_kappa(xp, lower, ar, ai, br, bi, bounds, lines))
    return kept(decide(dxp, bounds, form, k, final=True)._replace(stages=3))


# The split route (``_engine._split``, the dask layer's split graph): the stacked product's
# output (..., 2m, 2n) holds Ar Br, Ar Bi (top) and Ai Br, Ai Bi (bottom); these read it.
BLOCKS = ((0, 0), (1, 1), (0, 1), (1, 0))  # Ar Br, Ai Bi (real part); Ar Bi, Ai Br (imaginary)


def combine(xp, rr, ii, ri, ir):
    """The result's parts from the four products as double-double pairs (hi, lo): Re = Ar Br -
    Ai Bi, Im = Ar Bi + Ai Br, each a double-double pair (``xputil.dd_add``)."""
    re = dd_add(xp, rr, (-ii[0], -ii[1]))
    return re, dd_add(xp, ri, ir)


def combined_ratio(xp, re, im, lines):
    """Per entry the cancellation ratio of the combined parts: each part's magnitude over the
    sum of its two products' line bounds (``refit.cancel_ratio``: 2**-(s_i+t_j) sqrt(e_i f_j)),
    the smaller of the two parts'; ``lines`` the four products' prescales (s, t, e, f) in the
    order of ``BLOCKS``. Elementwise: any block of the output with its lines gives the same."""
    from .refit import cancel_ratio

    def ratio(v, p, q):  # |v| / (bound_p + bound_q) from |v| / bound_p and |v| / bound_q
        return 1.0 / (1.0 / cancel_ratio(xp, (v,), p) + 1.0 / cancel_ratio(xp, (v,), q))

    return xp.minimum(ratio(re, lines[0], lines[1]), ratio(im, lines[2], lines[3]))


def stacked_indices(xp, idx, m, n):
    """The flat indices into the stacked (..., 2m, 2n) output of the four products of the
    flat output entries ``idx`` of an (..., m, n) product."""
    bat, i, j = idx // (m * n), (idx // n) % m, idx % n
    return xp.concat([bat * (4 * m * n) + (r * m + i) * (2 * n) + c * n + j
                      for r, c in BLOCKS])  # fmt: skip
