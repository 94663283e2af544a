"""Choosing slices / moduli for a precision level, with a per-entry certificate.

For a level of ``bits`` the plan asks every output entry to satisfy the a-priori truncation
bound

    |C_emulated - C|_ij  <=  tau * 2**-bits * (|A||B|)_ij          (before the final rounding)

Scheme II (Uchino, Ozaki, Imamura, arXiv:2602.02549, Lemma 2 form): A' = trunc(2**mu A) is off by
less than one unit per entry, so with 2**-mu_i <= 2 * 2**-L * alpha_i (alpha_i = 2**-s_i sqrt(e_i)
from the N-independent prescale)

    err_ij <= 2y (alpha_i ||b_j||_1 + beta_j ||a_i||_1) + 4 c k alpha_i beta_j y**2,  y = 2**-L_N,

c = 1 (real) or 2 (complex). Scheme I (row-max scaling, p slices, x = 2**-8p) adds the dropped
triangle, at most 1.01 (p-1) 2**8p per term in integer units:

    err_ij <= x (alpha_i ||b_j||_1 + beta_j ||a_i||_1 + c p k alpha_i beta_j).

(|A||B|) is bounded below cheaply (``magnitude_lower``): magnitudes of the line-normalized
operands truncated toward zero to float32 (or to bfloat16 by a backend's tensor-core hook), one
low-precision GEMM, and its rounding removed by the factor 1 - (k+2) 2**-22 and an absolute
(k+2) 2**-149 for the subnormal range: all terms are >= 0, so truncation only lowers the sum.
The smallest count that certifies every entry is used; entries no count up to the
maximum can certify (or with a zero lower bound but a nonzero upper bound) are taken from the
native product, and the plan says how many.
"""

from __future__ import annotations

from typing import NamedTuple

from ._moduli import MAX_MODULI, MIN_MODULI, crt_constants
from ._precision import MAX_SLICES, MIN_SLICES
from ._scaling import magnitude, max_exponent
from ._xputil import ldexp

TAU = 0.25
BEYOND_Y = 2.0 ** -crt_constants(MAX_MODULI).L  # entries with y below it: beyond every count


class CertConstants(NamedTuple):
    """The scalars of the certificate, written once: the generic code below, the backends'
    certificate kernels (``cert_y`` in backends/cuda/ozaki2_stats.cu and its CPU build) and the
    dask graph take them from ``cert_constants``."""

    factor: float  # removes a float32/bf16 GEMM's rounding from the lower bound: 1 - (k+2) 2**-22
    native_factor: float  # the same for a float64 GEMM (k beyond _LOWER_K_MAX): 1 - (k+2) 2**-52
    abs_term: float  # the subnormal range of that GEMM: (k+2) 2**-149
    l1fac: float  # makes float64 l1 sums upper bounds: 1 + (k+2) 2**-52
    scale: float  # alpha = scale sqrt(e): 2**(cplx - 5)
    c4: float  # 4 c k, c = 1 (real) or 2 (complex)
    cR: float | None  # R = cR lam: TAU 2**-bits (None without bits)
    thr: float  # entries with y below 2**-L_max are beyond every count


def cert_constants(k, bits=None, complex_=False) -> CertConstants:
    """``CertConstants`` for inner dimension ``k``, the level's ``bits`` and the operands' kind."""
    return CertConstants(
        factor=1.0 - (k + 2) * 2.0**-22,
        native_factor=1.0 - (k + 2) * 2.0**-52,
        abs_term=(k + 2) * 2.0**-149,
        l1fac=1.0 + (k + 2) * 2.0**-52,
        scale=2.0 ** (int(complex_) - 5),
        c4=4.0 * (2.0 if complex_ else 1.0) * k,
        cR=None if bits is None else TAU * 2.0**-bits,
        thr=BEYOND_Y,
    )


def _l1_upper(xp, re, im, axis):
    x = xp.abs(re) if im is None else xp.abs(re) + xp.abs(im)
    k = re.shape[axis]
    return xp.sum(x, axis=axis) * cert_constants(k).l1fac


def _down_to_float32(xp, x):
    """float32 values <= x (x >= 0): the cast rounds to nearest, so step down where it rose."""
    f = xp.astype(x, xp.float32)
    return xp.where(xp.astype(f, xp.float64) > x, xp.nextafter(f, xp.zeros_like(f)), f)


_LOWER_K_MAX = 1 << 20  # beyond this the float32 rounding factor is no longer tight


def magnitude_lower(xp, backend, xa, xb):
    """Elementwise lower bound of ``xa @ xb`` for non-negative operands whose entries are <= 2
    (line-normalized magnitudes), at a fraction of a native GEMM's cost."""
    k = xa.shape[-1]
    cc = cert_constants(k)
    if k > _LOWER_K_MAX:
        return backend.native_matmul(xa, xb) * cc.native_factor
    hook = getattr(backend, "magnitude_lower_matmul", None)
    if hook is not None:  # e.g. one bfloat16 tensor-core GEMM, already a lower bound
        s = xp.astype(hook(xa, xb), xp.float64)
    else:
        s = xp.astype(
            backend.native_matmul(_down_to_float32(xp, xa), _down_to_float32(xp, xb)), xp.float64
        )
        s = s * cc.factor
    return xp.maximum(s - cc.abs_term, 0.0)


def _normalized_terms(xp, backend, ar, ai, br, bi, bits):
    """Both sides of the certificate are homogeneous in each row's and column's scale, so they
    are evaluated on operands normalized by 2**-floor(log2 max) per line: no overflow, and
    underflow only lowers the lower bound (the safe side)."""
    ea = xp.expand_dims(max_exponent(xp, ar, ai, axis=-1), axis=-1)
    eb = xp.expand_dims(max_exponent(xp, br, bi, axis=-2), axis=-2)
    ar, br = ldexp(xp, ar, -ea), ldexp(xp, br, -eb)
    ai = None if ai is None else ldexp(xp, ai, -ea)
    bi = None if bi is None else ldexp(xp, bi, -eb)
    k = ar.shape[-1]
    lam = magnitude_lower(xp, backend, magnitude(xp, ar, ai), magnitude(xp, br, bi))
    R = cert_constants(k, bits).cR * lam
    na = xp.expand_dims(_l1_upper(xp, ar, ai, -1), axis=-1)  # (..., m, 1)
    nb = xp.expand_dims(_l1_upper(xp, br, bi, -2), axis=-2)  # (..., 1, n)
    c = 1.0 if ai is None else 2.0
    return k, R, na, nb, c


def ozaki2_moduli_needed(xp, backend, ar, ai, br, bi, prescale, bits):
    """``(count, beyond)``: the smallest number of moduli certifying every entry that the
    maximum certifies, and the mask of entries it does not (count None: no entry at all).

    A backend may compute this in its own kernels (``backend.ozaki2_certificate``, same
    arguments and result; it returns None to decline)."""
    hook = getattr(backend, "ozaki2_certificate", None)
    res = None if hook is None else hook(ar, ai, br, bi, prescale, bits)
    if res is not None:
        return res
    _, _, e, f = prescale
    k, R, na, nb, _ = _normalized_terms(xp, backend, ar, ai, br, bi, bits)
    y, beyond = ozaki2_certified_y(xp, k, R, na, nb, e, f, ai is not None)
    if bool(xp.all(beyond)):
        return None, beyond
    return moduli_for(float(xp.min(xp.where(beyond, xp.inf, y)))), beyond


def moduli_for(y_min):
    """The smallest count n of moduli with ``y_min >= 2**-L_n`` (None when even the most do
    not reach it): L_n grows with n, so one y, the smallest over the certified entries, decides
    for all of them (the backends' certificate kernels and the dask count task use it too)."""
    return next(
        (n for n in range(MIN_MODULI, MAX_MODULI + 1) if y_min >= 2.0 ** -crt_constants(n).L),
        None,
    )


def ozaki2_certified_y(xp, k, R, na, nb, e, f, complex_):
    """``(y, beyond)`` per entry from the certificate's terms: ``y`` the largest ``2**-L`` the
    Scheme II bound certifies (inf where the product is exact), ``beyond`` the entries no count
    up to the maximum certifies (y < 2**-L_max). n moduli certify an entry iff y >= 2**-L_n.

    ``R = TAU 2**-bits lam`` (..., m, n), ``na`` (..., m, 1) and ``nb`` (..., 1, n) are the
    line-normalized terms of ``_normalized_terms``, ``e`` (..., m) and ``f`` (..., n) the
    prescale's bounds and ``k`` the whole inner dimension: any rows/columns of the output (the
    dask layer's output blocks, with terms summed over K-blocks) give the same entries as the
    whole product from the same terms."""
    # alpha_i = 2**-s_i sqrt(e_i) with s_i = 5 - ea_i - cplx, normalized by 2**ea_i
    cc = cert_constants(k, complex_=complex_)
    alpha = cc.scale * xp.expand_dims(xp.sqrt(xp.astype(e, xp.float64)), axis=-1)
    beta = cc.scale * xp.expand_dims(xp.sqrt(xp.astype(f, xp.float64)), axis=-2)
    G = alpha * nb + beta * na
    Q = cc.c4 * alpha * beta
    denom = 2.0 * G + xp.sqrt(4.0 * G * G + 4.0 * Q * R)
    exact = denom == 0  # no overlapping nonzeros: the entry is computed exactly
    y = xp.where(exact, xp.inf, 2.0 * R / xp.where(exact, 1.0, denom))
    # L_n increases with n: the count for all certifiable entries follows from the smallest
    # such y, without a pass per count.
    return y, y < cc.thr


def ozaki1_slices_needed(xp, backend, ar, ai, br, bi, bits):
    """``(count, beyond)`` as ``ozaki2_moduli_needed``, for Scheme I slices."""
    k, R, na, nb, c = _normalized_terms(xp, backend, ar, ai, br, bi, bits)
    # 2**-mu_i = 2**(ea_i + 2) 2**-8p: alpha_i = 4 after normalization (0 for zero lines)
    alpha = 4.0 * xp.astype(na > 0, xp.float64)
    beta = 4.0 * xp.astype(nb > 0, xp.float64)
    G = alpha * nb + beta * na
    needed = xp.full(R.shape, MAX_SLICES + 1, dtype=xp.int64)
    for p in range(MAX_SLICES, MIN_SLICES - 1, -1):
        err = 2.0 ** (-8 * p) * (G + c * p * k * alpha * beta)
        needed = xp.where(err <= R, p, needed)
    beyond = needed > MAX_SLICES
    if bool(xp.all(beyond)):
        return None, beyond
    return int(xp.max(xp.where(beyond, 0, needed))), beyond
