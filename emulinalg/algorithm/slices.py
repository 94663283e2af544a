"""Ozaki Scheme I: INT8 slices, triangular products, exact shift-reduce.

Each scaled operand A' = trunc(2**mu A) (|A'| < 2**(8p-1)) is cut into p slices of 8 bits:
a signed leading slice in [-128, 127] and unsigned slices in [0, 255] (two's complement digits,
as in cuBLAS's fixed-point emulation), A' = sum_i A_i 2**(8(p-1-i)). Slice products of equal
significance s = i + j are summed exactly as integers, C_s = sum_{i+j=s} A_i B_j, only for s < p
(the triangle); the shift-reduce sum_s C_s 2**(8(p-1-s)) is accumulated exactly and rounded once.
Complex inputs use 4M (four real products per slice pair).

References: Ozaki, Ogita, Oishi, Rump, "Error-free transformations of matrix multiplication by
using fast routines of matrix multiplication", Numer. Algorithms 2012; Ootomo, Ozaki, Yokota,
IJHPCA 2024 (ozIMMU, INT8 slices); Schwarz et al., SCA/HPCAsia 2026 (unsigned lower slices).
"""

from __future__ import annotations

import math

from .._timing import stage, staged
from . import rounding
from .moduli import LIMB_BITS
from .scaling import ozaki1_shifts, scale_to_integers
from .xputil import ldexp

SLICE_BITS = 8
SLICE_PRODUCT_BOUND = 255 * 255  # unsigned x unsigned dominates signed slices (128 * 255)


@staged("slicing")
def slices(xp, X, p):
    """The p slices of integer-valued float64 ``X`` (|X| < 2**(8p-1)), leading slice signed."""
    if X is None:
        return None
    out = []
    for t in range(p):
        q = xp.floor(ldexp(xp, X, -SLICE_BITS * (p - 1 - t)))  # exact: power-of-two division
        if t > 0:  # q - 256 floor(q/256): exact (power-of-two division; Sterbenz subtraction)
            q = q - 256.0 * xp.floor(q / 256.0)
        out.append(q)
    return out


@staged("products")
def significance_products(xp, int_matmul, SAr, SAi, SBr, SBi, s):
    """C_s for the real part (and the imaginary part) as int64.

    One integer GEMM per part whose K dimension concatenates the slice pairs with i + j = s,
    so the GEMM's own accumulator holds their exact sum. Complex (4M):
    Re_s = [Ar_i.., Ai_i..] @ [Br_j..; -Bi_j..], Im_s = [Ar_i.., Ai_i..] @ [Bi_j..; Br_j..].
    """
    a = [SAr[i] for i in range(s + 1)]
    b_re = [SBr[s - i] for i in range(s + 1)]
    if SAi is None:
        pairs = [(a, b_re)]
    else:
        a = a + [SAi[i] for i in range(s + 1)]
        b_im = [SBi[s - i] for i in range(s + 1)]
        pairs = [(a, b_re + [-x for x in b_im]), (a, b_im + b_re)]
    out = []
    for pa, pb in pairs:
        c = int_matmul(xp.concat(pa, axis=-1), xp.concat(pb, axis=-2), SLICE_PRODUCT_BOUND)
        out.append(xp.astype(c, xp.int64))
    return out


def product(xp, int_matmul, ar, ai, br, bi, p, out_dtype):
    """Scheme I product with p slices per operand; same conventions as ``products.product``."""
    mu, nu = ozaki1_shifts(xp, ar, ai, br, bi, p)
    SAr = slices(xp, scale_to_integers(xp, ar, mu, -1), p)
    SAi = slices(xp, scale_to_integers(xp, ai, mu, -1), p)
    SBr = slices(xp, scale_to_integers(xp, br, nu, -2), p)
    SBi = slices(xp, scale_to_integers(xp, bi, nu, -2), p)
    k = ar.shape[-1]
    shape = ar.shape[:-1] + (br.shape[-1],)
    # |sum_s C_s 2**(8(p-1-s))| < 2 * p * k * 2**16 * 2**(8(p-1)), plus sign and carry room
    bits = SLICE_BITS * (p - 1) + 18 + math.ceil(math.log2(2 * p * max(k, 1)))
    n_limbs = bits // LIMB_BITS + 2
    nparts = 1 if ai is None else 2
    limbs = [rounding.zeros(xp, shape, n_limbs) for _ in range(nparts)]
    for s in range(p):
        for lp, c in zip(limbs, significance_products(xp, int_matmul, SAr, SAi, SBr, SBi, s)):
            with stage("reconstruction"):
                rounding.add_shifted(xp, lp, c, SLICE_BITS * (p - 1 - s))
    with stage("reconstruction"):
        shift = SLICE_BITS * (p - 1)
        return tuple(rounding.unscale(xp, lp, mu, nu, out_dtype, shift) for lp in limbs)
