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

(|A||B|) is bounded below by the float product of the magnitudes (one native GEMM, rounded down
by (k+2)u). The smallest count that certifies every entry is used; entries no count up to the
maximum can certify (or with a zero lower bound but a nonzero upper bound) are taken from the
native product, and the plan says how many.
"""

from __future__ import annotations

from ._moduli import MAX_MODULI, MIN_MODULI, crt_constants
from ._precision import MAX_SLICES, MIN_SLICES
from ._scaling import magnitude, max_exponent
from ._xputil import ldexp

TAU = 0.25


def _l1_upper(xp, re, im, axis):
    x = xp.abs(re) if im is None else xp.abs(re) + xp.abs(im)
    k = re.shape[axis]
    return xp.sum(x, axis=axis) * (1.0 + (k + 2) * 2.0**-52)


def _normalized_terms(xp, native_matmul, ar, ai, br, bi, bits):
    """Both sides of the certificate are homogeneous in each row's and column's scale, so they
    are evaluated on operands normalized by 2**-floor(log2 max) per line: no overflow, and
    underflow only lowers the lower bound (the safe side)."""
    ea = xp.expand_dims(max_exponent(xp, ar, ai, axis=-1), axis=-1)
    eb = xp.expand_dims(max_exponent(xp, br, bi, axis=-2), axis=-2)
    ar, br = ldexp(xp, ar, -ea), ldexp(xp, br, -eb)
    ai = None if ai is None else ldexp(xp, ai, -ea)
    bi = None if bi is None else ldexp(xp, bi, -eb)
    k = ar.shape[-1]
    lam = native_matmul(magnitude(xp, ar, ai), magnitude(xp, br, bi)) * (1.0 - (k + 2) * 2.0**-52)
    R = TAU * 2.0**-bits * lam
    na = xp.expand_dims(_l1_upper(xp, ar, ai, -1), axis=-1)  # (..., m, 1)
    nb = xp.expand_dims(_l1_upper(xp, br, bi, -2), axis=-2)  # (..., 1, n)
    c = 1.0 if ai is None else 2.0
    return k, R, na, nb, c


def ozaki2_moduli_needed(xp, native_matmul, ar, ai, br, bi, prescale, bits):
    """Per-entry smallest number of moduli (MAX_MODULI + 1 where none suffices)."""
    _, _, e, f = prescale
    k, R, na, nb, c = _normalized_terms(xp, native_matmul, ar, ai, br, bi, bits)
    # alpha_i = 2**-s_i sqrt(e_i) with s_i = 5 - ea_i - cplx, normalized by 2**ea_i
    scale = 2.0 ** (int(ai is not None) - 5)
    alpha = scale * xp.expand_dims(xp.sqrt(xp.astype(e, xp.float64)), axis=-1)
    beta = scale * xp.expand_dims(xp.sqrt(xp.astype(f, xp.float64)), axis=-2)
    G = alpha * nb + beta * na
    Q = 4.0 * c * k * alpha * beta
    denom = 2.0 * G + xp.sqrt(4.0 * G * G + 4.0 * Q * R)
    exact = denom == 0  # no overlapping nonzeros: the entry is computed exactly
    y = xp.where(exact, xp.inf, 2.0 * R / xp.where(exact, 1.0, denom))
    needed = xp.full(y.shape, MAX_MODULI + 1, dtype=xp.int64)
    for n in range(MAX_MODULI, MIN_MODULI - 1, -1):
        needed = xp.where(y >= 2.0 ** -crt_constants(n).L, n, needed)
    return needed


def ozaki1_slices_needed(xp, native_matmul, ar, ai, br, bi, bits):
    """Per-entry smallest number of slices (MAX_SLICES + 1 where none suffices)."""
    k, R, na, nb, c = _normalized_terms(xp, native_matmul, ar, ai, br, bi, bits)
    # 2**-mu_i = 2**(ea_i + 2) 2**-8p: alpha_i = 4 after normalization (0 for zero lines)
    alpha = 4.0 * xp.astype(na > 0, xp.float64)
    beta = 4.0 * xp.astype(nb > 0, xp.float64)
    G = alpha * nb + beta * na
    needed = xp.full(R.shape, MAX_SLICES + 1, dtype=xp.int64)
    for p in range(MAX_SLICES, MIN_SLICES - 1, -1):
        err = 2.0 ** (-8 * p) * (G + c * p * k * alpha * beta)
        needed = xp.where(err <= R, p, needed)
    return needed
