"""Power-of-two scaling vectors: row shifts ``mu`` for A and column shifts ``nu`` for B.

Scaling by powers of two is exact, so A' = round(2**mu * A) and B' = round(B * 2**nu) lose only
the bits below the integer grid (Scheme II's accurate mode rounds to nearest, ties to even, where
``rounds_to_nearest`` allows it; Scheme I and the other cases truncate toward zero). Operands
are given as real parts (and imaginary parts or None); the contraction axis is -1 for A
(..., m, k) and -2 for B (..., k, n).

References: Ozaki, Ogita, Oishi, Rump 2012 (Scheme I, row-max scaling); Ozaki, Uchino, Imamura,
arXiv:2504.08009 and Uchino et al., SC-W 2025 (Scheme II fast/accurate modes); the fast mode here
is the scale-invariant Cauchy-Schwarz form (Kawakami & Takahashi, arXiv:2606.29129), not
GEMMul8's, whose shift depends on the scale of the input (research/accuracy-and-cost.md §0.1).
"""

from __future__ import annotations

from typing import NamedTuple

from .moduli import crt_constants
from .operands import once
from .xputil import frexp_exponent, ldexp


def magnitude(xp, re, im):
    """Elementwise bound max(|re|, |im|) used for exponents."""
    return xp.abs(re) if im is None else xp.maximum(xp.abs(re), xp.abs(im))


def max_exponent(xp, re, im, axis):
    """``floor(log2(max |x|))`` along ``axis`` (0 where the whole line is zero) as int64."""
    mx = xp.max(magnitude(xp, re, im), axis=axis)
    e = xp.astype(frexp_exponent(xp, mx), xp.int64) - 1
    return xp.where(mx == 0, 0, e)


def _expand(xp, v, axis):
    return xp.expand_dims(v, axis=axis)


BOUND_MAX = 127  # largest entry of the accurate-mode bound operand (it fits INT8)


def bound_operand(xp, re, im, shift, axis):
    """Accurate mode's int8 operand and its line terms: ``floor(2**(s+1) |re|) (+ floor(2**(s+1)
    |im|))`` per entry (<= 127 when s = 5 - e - is_complex), with per line the sum of the
    entries and the count of nonzero parts (each entry's floor + its nonzero parts bounds
    2**(s+1) (|re| + |im|) from above)."""
    s = _expand(xp, shift + 1, axis)
    out = xp.floor(ldexp(xp, xp.abs(re), s))
    nz = xp.astype(re != 0, xp.float64)
    if im is not None:
        out = out + xp.floor(ldexp(xp, xp.abs(im), s))
        nz = nz + xp.astype(im != 0, xp.float64)
    return out, xp.sum(out, axis=axis), xp.sum(nz, axis=axis)


def mixed_lines(xp, re, im, axis):
    """Per line the number of entries with both parts nonzero (complex operands; None for real):
    where a row of A and a column of B have none, |Re| + |Im| is the modulus in every term, and
    the bound GEMM's lower bound gains a factor 2 (``certificate.bound_lower``)."""
    if im is None:
        return None
    return xp.sum(xp.astype((re != 0) & (im != 0), xp.int64), axis=axis)


def bound_upper(xp, F, ra, nza, cb, nzb, cplx):
    """4x an upper bound of 2**(s_i+t_j) ((|Re A| + |Im A|)(|Re B| + |Im B|))_ij from the bound
    GEMM ``F = Ā B̄`` (..., m, n) and the line terms: with z the nonzero parts (z <= c = 1 or 2
    per entry), sum (ā + z_a)(b̄ + z_b) = F + sum ā z_b + sum z_a b̄ + sum z_a z_b, and each
    cross sum is at most both of its line bounds below (so zero lines give 0). Exact integers
    (below 2**53) in float64."""
    c = 2.0 if cplx else 1.0
    ra, nza = _expand(xp, ra, -1), _expand(xp, nza, -1)
    cb, nzb = _expand(xp, cb, -2), _expand(xp, nzb, -2)
    return (
        F
        + xp.minimum(c * ra, BOUND_MAX * nzb)
        + xp.minimum(c * cb, BOUND_MAX * nza)
        + c * xp.minimum(nza, nzb)
    )


def sqnorm_sums(xp, re, im, shift, axis, keepdims=False):
    """|| |re| + |im| ||_2^2 after scaling by 2**shift, summed in float64 (``sqnorm_factor``
    of the whole line makes it an upper bound; the dask layer sums it over chunks first)."""
    s = _expand(xp, shift, axis)
    x = ldexp(xp, xp.abs(re), s)
    if im is not None:
        x = x + ldexp(xp, xp.abs(im), s)
    return xp.sum(x * x, axis=axis, keepdims=keepdims)


def sqnorm_factor(k):
    """Each add and multiply rounds by at most u; (k + 4) u covers the recursive sum of a line
    of length k and the complex add (any order of the sums of non-negative terms)."""
    return 1.0 + (k + 4) * 2.0**-52


def line_bound(upper_max):
    """The accurate mode's line bound e_i = max_j U_ij / 4 from the maxima of ``bound_upper``
    over the line (any array type: the dask layer passes its lazy maxima)."""
    return upper_max * 0.25


def _sqnorm_bound(xp, re, im, shift, axis):
    """Upper bound of || |re| + |im| ||_2^2 after scaling by 2**shift."""
    return sqnorm_sums(xp, re, im, shift, axis) * sqnorm_factor(re.shape[axis])


def half_log_shift(xp, L, Q_down, v):
    """The largest integer t with ``v * 4**t <= Q`` (Q = (P-1)/4, so t = floor(L - log2(v)/2))
    for positive bounds ``v`` (zeros are treated as 1).

    A log2 estimate is corrected by exact comparisons (v * 4**t is an exact double and Q_down
    the largest double <= Q), so the shift is the same on every backend.
    """
    v = xp.where(v > 0, v, 1.0)
    t = xp.astype(xp.floor(L - 0.5 * xp.log2(v)), xp.int64)
    t = xp.where(ldexp(xp, v, 2 * t) > Q_down, t - 1, t)
    t = xp.where(ldexp(xp, v, 2 * t) > Q_down, t - 1, t)
    return xp.where(ldexp(xp, v, 2 * (t + 1)) <= Q_down, t + 1, t)


def prescale_shift(exponent, complex_):
    """The pre-shift s = 5 - e - is_complex of lines whose largest magnitude has exponent e
    (``max_exponent``): each line's max below 64 (32 for complex)."""
    return 5 - exponent - int(complex_)


class Prescale(tuple):
    """``(s, t, e, f)`` of ``ozaki2_prescale``; ``lower`` keeps the accurate mode's bound GEMM
    ``F = Ā B̄`` (..., m, n) for the certificate's lower bound of |A||B| (``certificate``), None in
    fast mode, and ``mixed`` the complex operands' ``mixed_lines`` of A and B (None: real, or
    not known). A backend's prescale stage may keep its own object in ``lower`` (its
    certificate stage reads it) and the line sums of the certificate's norms in ``line_sums``
    (``((l1 of A, l1 of B), (squares of A, squares of B))`` of the normalized lines, or None).
    ``parts_lower``: a complex product's other lower bound of |A||B| from its part check
    (``certificate.parts_lower``: float32 (..., m, n)), set by the engine, or None.
    ``release()`` drops ``lower`` and ``parts_lower`` once the certificate is done (the product
    does not need them)."""

    def __new__(cls, s, t, e, f, lower=None, mixed=None, line_sums=None):
        self = super().__new__(cls, (s, t, e, f))
        self.lower = lower
        self.mixed = mixed
        self.line_sums = line_sums
        self.parts_lower = None
        return self

    def release(self):
        self.lower = None
        self.parts_lower = None


class LineStats(NamedTuple):
    """What ``ozaki2_prescale`` takes from one operand alone: the pre-shifts ``s`` of its lines,
    and in accurate mode its bound operand with its line terms (``bound_operand``) and, complex,
    its ``mixed_lines``; in fast mode the line bounds ``sq`` (``_sqnorm_bound``)."""

    s: object
    bar: object = None
    sums: object = None
    nz: object = None
    mixed: object = None
    sq: object = None


def line_statistics(xp, re, im, axis, mode, complex_):
    """One operand's ``LineStats`` along ``axis`` (-1: rows of A, -2: columns of B) for ``mode``;
    ``complex_``: whether the product is complex. Depends on that operand alone (the shifts of
    ``ozaki2_shifts`` need the other one too, through the accurate mode's bound GEMM)."""
    s = prescale_shift(max_exponent(xp, re, im, axis=axis), complex_)
    if mode == "accurate":
        bar, sums, nz = bound_operand(xp, re, im, s, axis=axis)
        mixed = mixed_lines(xp, re, im, axis=axis) if im is not None else None
        return LineStats(s, bar, sums, nz, mixed)
    if mode == "fast":
        return LineStats(s, sq=_sqnorm_bound(xp, re, im, s, axis=axis))
    raise ValueError(f"unknown scaling mode {mode!r}")  # validated by the parser; internal misuse


def ozaki2_prescale(xp, int_matmul, ar, ai, br, bi, mode, sides=(None, None)):
    """The part of Scheme II scaling that does not depend on the number of moduli.

    Returns a ``Prescale`` ``(s, t, e, f)``: pre-shifts s (rows of A) and t (columns of B) that
    bring each line's max below 64 (32 for complex), and line bounds e, f such that
    2**(s_i+t_j) (|A||B|)_ij <= sqrt(e_i f_j) for every (i, j) (|A| summing |Re| and |Im|).

    accurate: one INT8 GEMM of Ā = floor(2**(s+1)|A|), B̄ (entries <= 127) gives F, and
    U = ``bound_upper`` >= 4 * 2**(s_i+t_j)(|A||B|)_ij from F and line sums; e_i = max_j U_ij / 4,
    f_j = max_i U_ij / 4 (GEMMul8's accurate mode bounds with ceil(2**s|A|) instead: per entry
    (floor(2v) + 1) / 2 <= ceil(v) unless 2v is an integer, so e, f are mostly tighter, but the
    cross terms of ``bound_upper`` make U > 0 where structural zeros made the ceil product 0),
    and F/4096 (F/1024 or F/2048 complex, ``certificate.bound_lower``) is also a lower bound of the
    line-normalized |A||B|, which the certificate uses: ``Prescale.lower`` = F, with the
    complex operands' ``mixed_lines`` in ``Prescale.mixed``). fast: Cauchy-Schwarz,
    e_i = ||2**s_i |a_i| ||_2**2 (no GEMM).

    ``sides``: the ``operands.SideUse`` of a prepared A and B (or None), which keep each one's
    ``line_statistics``; the bound GEMM and the line bounds e, f depend on both.
    """
    if mode not in ("accurate", "fast"):
        raise ValueError(f"unknown scaling mode {mode!r}")  # validated by the parser
    cplx = ai is not None
    key = ("line statistics", mode, cplx)
    A = once(sides[0], key, lambda: line_statistics(xp, ar, ai, -1, mode, cplx))
    B = once(sides[1], key, lambda: line_statistics(xp, br, bi, -2, mode, cplx))
    if mode == "fast":
        return Prescale(A.s, B.s, A.sq, B.sq)
    F = int_matmul(A.bar, B.bar, BOUND_MAX * BOUND_MAX)
    U = bound_upper(xp, F, A.sums, A.nz, B.sums, B.nz, cplx)
    e, f = line_bound(xp.max(U, axis=-1)), line_bound(xp.max(U, axis=-2))
    mixed = None if ai is None else (A.mixed, B.mixed)
    return Prescale(A.s, B.s, e, f, lower=F, mixed=mixed)


def ozaki2_shifts(xp, prescale, L, Q_down):
    """Shifts ``(mu, nu)`` with ``|A'B'|_ij <= 2**(2L)`` componentwise (real and imaginary parts):
    mu_i = s_i + floor(L - log2(e_i)/2), and likewise nu_j, since 2**(s_i+t_j)(|A||B|)_ij <=
    sqrt(e_i f_j)."""
    s, t, e, f = prescale
    return line_shift(xp, s, e, L, Q_down), line_shift(xp, t, f, L, Q_down)


def line_shift(xp, s, e, L, Q_down):
    """One side of ``ozaki2_shifts``: s + the largest t with e * 4**t <= Q, per line."""
    return s + half_log_shift(xp, L, Q_down, e)


def ozaki1_shifts(xp, ar, ai, br, bi, slices):
    """Row/column shifts putting each line's max in [2**(8p-2), 2**(8p-1)) so that the scaled
    integers fit ``p`` slices (one signed leading INT8 slice, p-1 unsigned 8-bit slices)."""
    top = 8 * slices - 2
    mu = top - max_exponent(xp, ar, ai, axis=-1)
    nu = top - max_exponent(xp, br, bi, axis=-2)
    return mu, nu


def scale_to_integers(xp, x, shift, axis, nearest=False):
    """round(x * 2**shift) per line, to nearest (ties to even) when ``nearest``, else toward
    zero: exact integers held in float64 (a double times a power of two stays a double, and
    rounding it to an integer is exact)."""
    if x is None:
        return None
    scaled = ldexp(xp, x, _expand(xp, shift, axis))
    return xp.round(scaled) if nearest else xp.trunc(scaled)


# The accurate-mode line bound e = max_j U_ij / 4 is at most (127 + c)**2 k / 4 (c <= 2: each
# entry of a bound operand is <= 127 and has at most c nonzero parts, ``bound_upper``).
E_PER_K = 129 * 129 / 4


def rounds_to_nearest(moduli, k, mode, gaussian=False):
    """Whether Scheme II rounds its scaled operands to nearest (ties to even) instead of
    truncating them, for ``moduli`` moduli (``gaussian``: of ``moduli.GAUSSIAN_MODULI``), inner
    dimension ``k`` and scaling ``mode``.

    Rounding to nearest halves the worst-case error of each scaled entry (|delta| <= 1/2) and
    makes it symmetric about zero whatever the signs of the data, which the level's
    probabilistic bound (``certificate``) assumes; but it can raise an entry's magnitude by 1/2.
    With accurate-mode shifts at least two bits above the pre-shift (mu_i - s_i >= 2 and
    nu_j - t_j >= 2, i.e. 16 e <= Q for every possible line bound e), each |a'| is at most
    2**(mu-s) (Ā + 1.25 z) / 2, so |A'B'| <= 1.25**2 (P - 1) / 4 < 0.391 P: the symmetric CRT
    representative and its float quotient stay exact. Fast mode (Cauchy-Schwarz shifts) and
    smaller counts truncate."""
    return mode == "accurate" and 16 * E_PER_K * k <= crt_constants(moduli, gaussian).Q_down
