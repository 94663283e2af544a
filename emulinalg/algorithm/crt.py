"""The Chinese remainder theorem for Scheme II: the exact integer product from its residues.

Per modulus m_l the residue products W_l (``products.modular_products``) are added into
X = sum_l W_l w_l, exact in limbs (``rounding``), and into the float64 estimate of X / P from the
ratios w_l / P (``moduli.crt_constants``); the rounded estimate is the quotient q, and X - qP,
the symmetric representative, is the integer product A'B', unscaled and rounded once.

References: Ozaki, Uchino, Imamura, arXiv:2504.08009 (Scheme II); Uchino et al., SC-W 2025
(GEMMul8).
"""

from __future__ import annotations

from .._timing import stage, staged
from . import rounding


def accumulators(xp, c, shape, nparts):
    """The CRT sums of ``nparts`` parts of this shape at zero: per part the exact limbs of
    X = sum_l W_l w_l (``rounding``) and the float64 estimate of X / P."""
    limbs = [rounding.zeros(xp, shape, c.n_limbs) for _ in range(nparts)]
    return limbs, [xp.zeros(shape, dtype=xp.float64) for _ in range(nparts)]


def accumulate(xp, c, limbs, quotient, ell, W):
    """Adds modulus ``ell``'s residue products ``W`` (one symmetric residue array per part,
    any integer or float64 dtype) into the CRT sums of ``accumulators``. ``ell`` a range of
    moduli: ``W``'s arrays have a leading axis of those moduli, summed here (the limbs are exact
    integers in any order; the quotient's estimate keeps its error bound in any order of its
    sum, so its rounding, the exact quotient, is the same)."""
    if isinstance(ell, int):
        for p, w in enumerate(W):
            rounding.add_multiple(xp, limbs[p], xp.astype(w, xp.int64), c.weight_limbs[ell])
            quotient[p] = quotient[p] + xp.astype(w, xp.float64) * c.weight_ratios[ell]
        return
    ells = list(ell)
    for p, w in enumerate(W):
        axis = (-1,) + (1,) * (w.ndim - 1)
        wi = xp.astype(w, xp.int64)
        for i in range(c.n_limbs):
            col = [c.weight_limbs[lo][i] for lo in ells]
            if any(col):
                C = xp.reshape(xp.asarray(col, dtype=xp.int64, device=w.device), axis)
                limbs[p][i] = limbs[p][i] + xp.sum(wi * C, axis=0)
        R = xp.asarray([c.weight_ratios[lo] for lo in ells], dtype=xp.float64, device=w.device)
        quotient[p] = quotient[p] + xp.sum(xp.astype(w, xp.float64) * xp.reshape(R, axis), axis=0)


@staged("reconstruction")
def reconstruct(xp, c, limbs, quotient, mu, nu, out_dtype):
    """Symmetric CRT representative, unscaled by 2**-(mu_i+nu_j) and rounded once.

    X = sum_l W_l w_l is exact in the limbs; X/P is within n*128*2**-53 of the float sum of
    W_l (w_l/P), and the scaling keeps |X mod P| below 0.391 P (``scaling.rounds_to_nearest``;
    P/4 where the operands are truncated), so rounding that sum gives the exact quotient and
    X - qP the exact product.
    """
    out = []
    for lp, qf in zip(limbs, quotient):
        rounding.add_multiple(xp, lp, -xp.astype(xp.round(qf), xp.int64), c.P_limbs)
        out.append(rounding.unscale(xp, lp, mu, nu, out_dtype))
    return tuple(out)


def from_residues(xp, c, W, shape, nparts, mu, nu, out_dtype):
    """The product from its residue products: ``W`` yields ``accumulate``'s W of every modulus
    in order (a generator makes one modulus's at a time), added into ``accumulators`` of this
    shape and ``nparts`` parts, then ``reconstruct``."""
    limbs, quotient = accumulators(xp, c, shape, nparts)
    for ell, w in enumerate(W):
        with stage("reconstruction"):
            accumulate(xp, c, limbs, quotient, ell, w)
    return reconstruct(xp, c, limbs, quotient, mu, nu, out_dtype)
