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

The bounds come in two stages, each only as far as it is needed:

1. Exact integer bounds (``stage_one``): per part, floor(2**(s+1) |x|) <= 127 with s the
   part's own line pre-shift (``scaling.bound_operand``), four integer GEMMs of the parts
   (Ar Br, Ai Bi, Ar Bi, Ai Br) and their line terms: F / 4 below and ``scaling.bound_upper``
   / 4 above each part's scaled sums, all exact integers, normalized by the complex line
   exponents of ``certificate.normalized``. They decide most entries: fine (the part's lower
   bound meets the upper bound of T / slack), or failing (even the part's upper bound, times
   sqrt(k) in the native form, is below the lower bound of T / slack; one such entry splits).
2. float32 GEMMs (``stage_two``, only where stage 1 leaves entries undecided and none failing):
   the normalized magnitudes and their squares rounded down to float32, the four products of
   each stacked as one GEMM, the rounding removed by factors as in
   ``certificate.magnitude_lower`` (upper bounds by the rounding's factor above): the sums to
   float32 precision and the lower bound of sqrt(k) ||terms_p||_2. Entries still undecided
   count as failing (the safe side).

Both stages read only the operands: the dask layer computes them over its chunks and decides
with ``decide`` as the engine does (stage 1's exact integers give the same bounds there;
stage 2's sums may differ in their last bits, so only an entry within about k 2**-24 of the
threshold can decide differently).

References: Higham & Mary, SIAM J. Sci. Comput. 2019 (the rounding-error model of the native
form); Uchino et al., arXiv:2512.08321 (complex Scheme II, whose 3M form certifies the modulus).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .scaling import BOUND_MAX, bound_operand, bound_upper, max_exponent, prescale_shift
from .xputil import dd_add, ldexp

# Lower bounds below this (normalized units) may have lost relative accuracy to underflow in
# the exponent shifts: they are lowered by it, and upper bounds raised by it.
TINY = 2.0**-1000


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
    (how many stages decided)."""

    split: bool
    part: str = ""
    share: float = 1.0
    stages: int = 1


def _line_exponents(xp, ar, ai, br, bi):
    """The complex line exponents of ``certificate.normalized``: (..., m, 1), (..., 1, n)."""
    ea = xp.expand_dims(max_exponent(xp, ar, ai, axis=-1), axis=-1)
    eb = xp.expand_dims(max_exponent(xp, br, bi, axis=-2), axis=-2)
    return ea, eb


def _bound_part(xp, x, axis):
    """One part's bound operand floor(2**(s+1) |x|) (entries <= 127, s from the part's own line
    maxima), its line sums and nonzero counts, and the part's line exponents."""
    e = max_exponent(xp, x, None, axis=axis)
    bar, sums, nz = bound_operand(xp, x, None, prescale_shift(e, False), axis)
    return bar, sums, nz, e


def stage_one(xp, int_matmul, ar, ai, br, bi):
    """``PartBounds`` from four exact integer GEMMs of the parts' bound operands (module
    docstring, stage 1). ``int_matmul(x, y, term_bound)``: the exact product of integer-valued
    float64 arrays (a backend's, or dask's blocked product)."""
    ea, eb = _line_exponents(xp, ar, ai, br, bi)
    A = (_bound_part(xp, ar, -1), _bound_part(xp, ai, -1))
    B = (_bound_part(xp, br, -2), _bound_part(xp, bi, -2))

    def block(x, y):  # (F, U) of one product of parts, normalized; U == 0: no nonzero term
        F = int_matmul(x[0], y[0], BOUND_MAX * BOUND_MAX)
        U = bound_upper(xp, F, x[1], x[2], y[1], y[2], False)
        # 2**-(s_i + t_j + 2) with s = 5 - e, then the complex line exponents taken off
        d = xp.expand_dims(x[3], axis=-1) + xp.expand_dims(y[3], axis=-2) - ea - eb - 12
        return ldexp(xp, xp.astype(F, xp.float64), d), ldexp(xp, U, d), U == 0

    pairs = ((block(A[0], B[0]), block(A[1], B[1])), (block(A[0], B[1]), block(A[1], B[0])))
    lo, hi, zero = [], [], []
    for (l1, h1, z1), (l2, h2, z2) in pairs:
        lo.append(xp.maximum((l1 + l2) * (1.0 - 2.0**-52) - TINY, 0.0))
        hi.append((h1 + h2) * (1.0 + 2.0**-52) + TINY)
        zero.append(z1 & z2)
    return PartBounds(tuple(lo), tuple(hi), tuple(zero))


def _down32(xp, x):
    """float32 values <= x (x >= 0)."""
    f = xp.astype(x, xp.float32)
    return xp.where(xp.astype(f, xp.float64) > x, xp.nextafter(f, xp.zeros_like(f)), f)


# Beyond this stacked inner dimension stage 2 sums in float64 (the float32 factor loosens).
F32_K_MAX = 1 << 20


def stage_two(xp, matmul, ar, ai, br, bi, bounds, native):
    """``bounds`` tightened by float32 GEMMs (module docstring, stage 2): the sums' lower and
    upper bounds to float32 precision and, for the native form, ``kappa``. ``matmul``: the
    backend's native GEMM (float32 operands; float64 beyond ``F32_K_MAX``)."""
    ea, eb = _line_exponents(xp, ar, ai, br, bi)
    k = ar.shape[-1]
    na = [ldexp(xp, xp.abs(x), -ea) for x in (ar, ai)]  # line-normalized: entries < 2
    nb = [ldexp(xp, xp.abs(x), -eb) for x in (br, bi)]
    K = 2 * k  # the stacked inner dimension
    if K <= F32_K_MAX:  # rounded down to float32, then the GEMM's rounding (all terms >= 0)
        down = _down32
        lo_f, hi_f = 1.0 - (K + 2) * 2.0**-22, 1.0 + (K + 4) * 2.0**-22
        lo_a, hi_a = (K + 2) * 2.0**-149, K * 2.0**-146
    else:

        def down(xp, x):
            return x

        lo_f, hi_f = 1.0 - (K + 2) * 2.0**-52, 1.0 + (K + 2) * 2.0**-52
        lo_a, hi_a = (2 * K + 2) * 2.0**-1074, (2 * K + 2) * 2.0**-1074

    def stacked(xa, xb):  # the four products' sums as (Re part, Im part), one GEMM
        a2 = xp.concat([down(xp, xa[0]), down(xp, xa[1])], axis=-1)
        b_re = xp.concat([xb[0], xb[1]], axis=-2)
        b_im = xp.concat([xb[1], xb[0]], axis=-2)
        s = xp.astype(matmul(a2, down(xp, xp.concat([b_re, b_im], axis=-1))), xp.float64)
        n = xb[0].shape[-1]
        return s[..., :n], s[..., n:]

    sums = stacked(na, nb)
    lo = tuple(xp.maximum(bl, xp.maximum(s * lo_f - lo_a, 0.0)) for s, bl in zip(sums, bounds.lo))
    hi = tuple(xp.minimum(bh, s * hi_f + hi_a) for s, bh in zip(sums, bounds.hi))
    kappa = None
    if native:  # squares / 4 <= 1 (rounded down): each term's square / 16
        quarter = 0.25 * (1.0 - 2.0**-52)
        sq = stacked([x * x * quarter for x in na], [x * x * quarter for x in nb])
        kappa = tuple(
            4.0 * xp.sqrt(xp.maximum(s * lo_f - lo_a, 0.0) * k) * (1.0 - 2.0**-52) for s in sq
        )
    return PartBounds(lo, hi, bounds.zero, kappa)


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
        zero = bounds.zero[p]
        out.append((zero | (own >= hi_t), ~zero & (bounds.hi[p] * up < lo_t)))
    return out


def decide(xp, bounds, form, k, final):
    """``PartCheck`` from ``bounds``; None when entries stay undecided and none fails (stage 2
    then runs), unless ``final`` (they fail)."""
    verdicts = judge(xp, bounds, form, k)
    failing = [fail if not final else ~fine for fine, fail in verdicts]
    if not any(bool(xp.any(f)) for f in failing):
        if all(bool(xp.all(fine)) for fine, _ in verdicts):
            return PartCheck(False, stages=2 if final else 1)
        if not final:
            return None
    names = [n for n, f in zip(("real", "imaginary"), failing) if bool(xp.any(f))]
    lo_t = bounds.lo[0] + bounds.lo[1]
    share = 1.0
    for p, f in enumerate(failing):
        if bool(xp.any(f)):
            r = xp.where(f & (lo_t > 0), bounds.hi[p] / xp.where(lo_t > 0, lo_t, 1.0), 1.0)
            share = min(share, float(xp.min(r)))
    return PartCheck(True, " and ".join(names), share, 2 if final else 1)


def part_check(xp, int_matmul, matmul32, ar, ai, br, bi, form):
    """``PartCheck`` of a complex product (``ar`` ... the finite float64 parts, (..., m, k) and
    (..., k, n); ``ai`` or ``bi`` may be all zero but not None): stage 1, then stage 2 where it
    leaves entries undecided and none failing (module docstring). ``int_matmul(x, y, bound)``
    an exact integer GEMM, ``matmul32`` a float32 GEMM; ``form`` the route's ``PartForm``."""
    k = ar.shape[-1]
    bounds = stage_one(xp, int_matmul, ar, ai, br, bi)
    res = decide(xp, bounds, form, k, final=False)
    if res is not None:
        return res
    bounds = stage_two(xp, matmul32, ar, ai, br, bi, bounds, form.native)
    return decide(xp, bounds, form, k, final=True)


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
