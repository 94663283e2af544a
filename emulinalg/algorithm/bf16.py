"""BF16 slice schedules (Intel AMX-BF16 tiles): ``BF16x3`` (FP32 level) and ``BF16xN`` (FP64).

Both split each operand into BF16 slices after scaling every row of A and column of B by a
power of two (exact) so that its maximum is below 1: e_i with max_l |a_il| < 2**e_i.

- ``BF16xN`` (fixed-point digits): slice s of r = a 2**-e is RNE(r 2**(8s+7)) 2**-(8s+7), and
  r -= slice. Digits are integers |d| <= 128, so a product of two slices has every term on the
  entry's grid 2**-(8(s+t)+14) with at most 2**14 units, and a sum over WIDEN_K = 1024 of K has
  at most 2**24 units: exact in FP32 (the AMX accumulator) and in float64. Each kept pair's
  sum per K chunk is added to a float64 C in the order (chunk, pair), so the AMX kernel and
  the generic code below give the same bits.
- ``BF16x3`` (Henry et al.): slice = r rounded to 8 significant bits (RNE), r -= slice (exact by
  Sterbenz), components below 2**-126 dropped (TDPBF16PS flushes them). The six products are
  accumulated together in FP32 on the AMX; the generic code sums them in float64 (more
  accurate, not bit-identical) and rounds to float32. Products of entries that fall below
  2**-126 after the scaling (2**-126 of their row's and column's maxima together) are lost
  (the tiles flush FP32 subnormals): an absolute error of at most k 2**-126 2**(e_i + f_j).

Complex products are 4M over stacked slices: Re = [Ar, Ai] x [Br, -Bi], Im = [Ar, Ai] x [Bi, Br]
(one pair list per part, so each part is one kernel call).

References: Cui, Liu, "BF16 Component-Product Emulation of FP32 and FP64 GEMM on Intel AMX",
arXiv:2609.04663, Algorithms 1 and 2; Henry, Tang, Heinecke, ARITH 2019 (bf16x3).
"""

from __future__ import annotations

from .._precision import BF16x3
from .._stages import stages
from .._timing import stage
from .scaling import magnitude
from .xputil import frexp_exponent, ldexp

SLICE_BITS = 8
WIDEN_K = 1024  # K per exact FP32 partial sum of BF16xN: 1024 * 2**14 = 2**24 units
FLUSH = 2.0**-126  # smallest normal BF16/FP32 magnitude
# BF16x3's six products in an order that reuses loaded slices (A0 with B0, B1, B2, ...)
HENRY_PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 0), (2, 0))


def kind(scheme):
    """'float' (BF16x3, RNE residual split) or 'fixed' (BF16xN digits)."""
    return "float" if isinstance(scheme, BF16x3) else "fixed"


def pairs(scheme):
    """The kept slice pairs (i, j), in execution order."""
    if isinstance(scheme, BF16x3):
        return HENRY_PAIRS
    d = scheme.diagonals
    return tuple((i, t - i) for t in range(d) for i in range(t + 1))


def pair_lists(scheme, complex_):
    """Pair lists per output part over the slice stacks: A = [Ar (, Ai)], B = [Br (, Bi, -Bi)]
    with ``slices`` slices each: one list for a real product, (Re, Im) for a complex one."""
    p, s = pairs(scheme), scheme.slices
    if not complex_:
        return (p,)
    re = p + tuple((s + i, 2 * s + j) for i, j in p)
    im = tuple((i, s + j) for i, j in p) + tuple((s + i, j) for i, j in p)
    return re, im


def line_exponents(xp, re, im, axis):
    """e per line with max |x| < 2**e (0 for a zero line), as integers."""
    return frexp_exponent(xp, xp.max(magnitude(xp, re, im), axis=axis))


def _round_bf16(xp, r):
    e = frexp_exponent(xp, r)
    v = ldexp(xp, xp.round(ldexp(xp, r, SLICE_BITS - e)), e - SLICE_BITS)
    return xp.where(xp.abs(v) < FLUSH, 0.0, v)


def split(xp, x, e, axis, slices, how):
    """The ``slices`` slices (float64 arrays of BF16 values) of float64 ``x`` whose lines along
    ``axis`` (-1: rows of A, -2: columns of B) have exponents ``e``; ``how`` is ``kind()``."""
    if x is None:
        return None
    r = ldexp(xp, x, -xp.expand_dims(e, axis=axis))
    out = []
    for s in range(slices):
        if how == "fixed":
            g = SLICE_BITS * s + 7  # the digit grid of slice s is 2**-g
            v = ldexp(xp, xp.round(ldexp(xp, r, g)) + 0.0, -g)  # + 0.0: no -0 digits
        else:
            v = _round_bf16(xp, r)
        r = r - v
        out.append(v)
    return out


def slice_products(xp, A, B, plist, how, k):
    """sum over ``plist`` of A[i] @ B[j]: widened (fixed) or float64 then float32 (float)."""
    if how == "float":
        c = None
        for i, j in plist:
            p = xp.matmul(A[i], B[j])
            c = p if c is None else c + p
        return xp.astype(c, xp.float32)
    c = None
    for k0 in range(0, k, WIDEN_K):  # (chunk, pair) order, as the AMX kernel
        for i, j in plist:
            p = xp.matmul(A[i][..., k0 : k0 + WIDEN_K], B[j][..., k0 : k0 + WIDEN_K, :])  # exact
            c = 0.0 + p if c is None else c + p
    return c


def product(xp, backend, ar, ai, br, bi, scheme, out_dtype):
    """The BF16 schedule's product of float64 parts (imaginary parts None when real).

    Parameters
    ----------
    ar, ai : arrays (..., m, k) float64 (ai None for real)
    br, bi : arrays (..., k, n) float64
    scheme : BF16x3 or BF16xN
    out_dtype : {"float64", "float32", "dd"}
        "dd" gives (hi, lo) pairs with lo = 0 (the result is not an exact sum).

    Returns
    -------
    tuple of arrays (..., m, n): (real,) or (real, imaginary), in ``out_dtype``.

    A backend may run it in its own kernels (``backend.bf16_product``, same arguments and
    result, bit-identical for BF16xN); it returns None to decline.
    """
    dt = "float32" if out_dtype == "float32" else "float64"
    hook = None if backend is None else stages(backend).bf16_product
    res = None if hook is None else hook(ar, ai, br, bi, scheme, dt)
    if res is None:
        res = _generic(xp, ar, ai, br, bi, scheme, dt)
    if out_dtype == "dd":
        return tuple((c, xp.zeros_like(c)) for c in res)
    return res


def _generic(xp, ar, ai, br, bi, scheme, dt):
    how, s = kind(scheme), scheme.slices
    with stage("slicing"):
        ea = line_exponents(xp, ar, ai, axis=-1)
        eb = line_exponents(xp, br, bi, axis=-2)
        A = split(xp, ar, ea, -1, s, how) + (split(xp, ai, ea, -1, s, how) or [])
        B = split(xp, br, eb, -2, s, how)
        if bi is not None:
            sbi = split(xp, bi, eb, -2, s, how)
            B = B + sbi + [-x for x in sbi]
    out = []
    for plist in pair_lists(scheme, ai is not None):
        with stage("products"):
            c = slice_products(xp, A, B, plist, how, ar.shape[-1])
        with stage("reconstruction"):  # one rounding: fixed sums are float64, float ones FP32
            e = xp.expand_dims(ea, axis=-1) + xp.expand_dims(eb, axis=-2)
            if how == "fixed":
                out.append(xp.astype(ldexp(xp, c, e), getattr(xp, dt)))
            else:
                out.append(ldexp(xp, xp.astype(c, getattr(xp, dt)), e))
    return tuple(out)
