"""Ozaki Scheme II: residues modulo INT8-sized moduli, one integer GEMM per modulus, CRT.

Pipeline (named after the steps): scaling (``scaling.ozaki2_shifts``) -> residues
(``residues``) -> modular products (``modular_products``) -> CRT accumulation and unscaling
(``reconstruct``). Complex inputs use 3M: T1 = Ar Br, T2 = Ai Bi, T3 = (Ar+Ai)(Br+Bi) per
modulus, Re = T1 - T2, Im = T3 - T1 - T2, exact in modular arithmetic, so 3 GEMMs per modulus.

References: Ozaki, Uchino, Imamura, "Ozaki Scheme II: A GEMM-oriented emulation of floating-point
matrix multiplication using an integer modular technique", arXiv:2504.08009; Uchino et al.,
SC-W 2025 (GEMMul8); Uchino et al., arXiv:2512.08321 (complex, 3M).
"""

from __future__ import annotations

from ._timing import stage, staged
from .algorithm import rounding
from .algorithm.moduli import crt_constants
from .algorithm.scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest, scale_to_integers
from .algorithm.xputil import floor_mod, ldexp

RESIDUE_PRODUCT_BOUND = 128 * 128  # |r_a * r_b| for residues in [-128, 127]


SPLIT_BITS = 32  # scaled integers reach ~2**83: split them into two exact parts below 2**53


def symmetric_mod(xp, x, m):
    """Residue of integer-valued floats ``x`` (|x| < 2**53) modulo ``m``, in [-(m//2), (m-1)//2]."""
    r = floor_mod(xp, x, float(m))
    return xp.where(r > (m - 1) // 2, r - m, r)


def split(xp, X):
    """X = hi * 2**SPLIT_BITS + lo exactly, with lo in [0, 2**32) and |hi| < 2**53 (or None)."""
    if X is None:
        return None
    hi = xp.floor(ldexp(xp, X, -SPLIT_BITS))
    return hi, X - ldexp(xp, hi, SPLIT_BITS)


def _residue(xp, parts, m):
    hi, lo = parts
    r = floor_mod(xp, hi, float(m)) * float(pow(2, SPLIT_BITS, m)) + floor_mod(xp, lo, float(m))
    return symmetric_mod(xp, r, m)


@staged("slicing")
def residues(xp, Xr, Xi, m):
    """Residue planes of a scaled integer operand (given ``split``): (re, im, re+im) for 3M,
    or (re,)."""
    rr = _residue(xp, Xr, m)
    if Xi is None:
        return (rr,)
    ri = _residue(xp, Xi, m)
    return rr, ri, symmetric_mod(xp, rr + ri, m)


@staged("products")
def modular_products(xp, int_matmul, ra, rb, m):
    """Real and imaginary parts of A'B' mod m, as int64 in the symmetric range."""
    if len(ra) == 1:
        return (symmetric_mod(xp, int_matmul(ra[0], rb[0], RESIDUE_PRODUCT_BOUND), m),)
    t1 = int_matmul(ra[0], rb[0], RESIDUE_PRODUCT_BOUND)
    t2 = int_matmul(ra[1], rb[1], RESIDUE_PRODUCT_BOUND)
    t3 = int_matmul(ra[2], rb[2], RESIDUE_PRODUCT_BOUND)
    return symmetric_mod(xp, t1 - t2, m), symmetric_mod(xp, t3 - t1 - t2, m)


def b_residue_planes(xp, br, bi, prescale, moduli, mode="accurate"):
    """B's residue planes for every modulus, as int8 (``residues`` of the scaled B): made once
    and passed to ``product`` for each row block of A (``b_planes``) instead of once per block.
    n planes per entry of B (3n for complex)."""
    c = crt_constants(moduli)
    _, nu = ozaki2_shifts(xp, prescale, c.L, c.Q_down)
    near = rounds_to_nearest(moduli, br.shape[-2], mode)
    Br, Bi = (split(xp, scale_to_integers(xp, x, nu, -2, near)) for x in (br, bi))
    return [tuple(xp.astype(r, xp.int8) for r in residues(xp, Br, Bi, m)) for m in c.moduli]


def product(xp, int_matmul, ar, ai, br, bi, moduli, mode, out_dtype, prescale=None, b_planes=None):
    """Scheme II product of A = ar + i ai (..., m, k) and B = br + i bi (..., k, n).

    ``ai``/``bi`` are None for real operands (both or neither). Inputs are finite float64;
    returns a tuple of real and (for complex) imaginary parts of dtype ``out_dtype``
    ("float64"/"float32"; "dd": each part a (hi, lo) float64 pair, ``rounding.unscale_dd``),
    each the correctly rounded value of the reconstructed integer product times
    2**-(mu_i + nu_j), the scaled operands rounded as ``scaling.rounds_to_nearest`` says.
    ``prescale`` reuses ``scaling.ozaki2_prescale``'s result, ``b_planes``
    ``b_residue_planes``' (same prescale and moduli).
    """
    c = crt_constants(moduli)
    if prescale is None:
        prescale = ozaki2_prescale(xp, int_matmul, ar, ai, br, bi, mode)
    mu, nu = ozaki2_shifts(xp, prescale, c.L, c.Q_down)
    near = rounds_to_nearest(moduli, ar.shape[-1], mode)
    Ar, Ai = (split(xp, scale_to_integers(xp, x, mu, -1, near)) for x in (ar, ai))
    if b_planes is None:
        Br, Bi = (split(xp, scale_to_integers(xp, x, nu, -2, near)) for x in (br, bi))
    shape = ar.shape[:-1] + (br.shape[-1],)
    limbs, quotient = accumulators(xp, c, shape, 1 if ai is None else 2)
    for ell, m in enumerate(c.moduli):
        rb = residues(xp, Br, Bi, m) if b_planes is None else b_planes[ell]
        W = modular_products(xp, int_matmul, residues(xp, Ar, Ai, m), rb, m)
        with stage("reconstruction"):
            accumulate(xp, c, limbs, quotient, ell, W)
    return reconstruct(xp, c, limbs, quotient, mu, nu, out_dtype)


def accumulators(xp, c, shape, nparts):
    """The CRT sums of ``nparts`` parts of this shape at zero: per part the exact limbs of
    X = sum_l W_l w_l (``algorithm.rounding``) and the float64 estimate of X / P."""
    limbs = [rounding.zeros(xp, shape, c.n_limbs) for _ in range(nparts)]
    return limbs, [xp.zeros(shape, dtype=xp.float64) for _ in range(nparts)]


def accumulate(xp, c, limbs, quotient, ell, W):
    """Adds modulus ``ell``'s residue products ``W`` (one symmetric residue array per part,
    any integer or float64 dtype) into the CRT sums of ``accumulators``."""
    for p, w in enumerate(W):
        rounding.add_multiple(xp, limbs[p], xp.astype(w, xp.int64), c.weight_limbs[ell])
        quotient[p] = quotient[p] + xp.astype(w, xp.float64) * c.weight_ratios[ell]


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


def entries(xp, ar, ai, br, bi, moduli, out_dtype, prescale, nearest):
    """Scheme II product of single entries: entry t is row t of ``ar`` (+ i ``ai``) (K, k) times
    row t of ``br`` (+ i ``bi``) (K, k), i.e. columns of B given as rows, with the shifts of
    the line bounds ``prescale = (s, t, e, f)`` restricted to those lines ((K,) each) and the
    scaled operands rounded as ``nearest`` says. Returns the parts (K,) as ``product`` does,
    computed with one length-k dot product of residues per entry and modulus (integers, exact)
    instead of GEMMs: the same integers, hence the same result, as those entries of ``product``
    with the same shifts."""
    c = crt_constants(moduli)
    mu, nu = ozaki2_shifts(xp, prescale, c.L, c.Q_down)
    Ar, Ai = (split(xp, scale_to_integers(xp, x, mu, -1, nearest)) for x in (ar, ai))
    Br, Bi = (split(xp, scale_to_integers(xp, x, nu, -1, nearest)) for x in (br, bi))
    limbs, quotient = accumulators(xp, c, (ar.shape[0], 1), 1 if ai is None else 2)

    def dot(x, y):  # |residue products| <= 2**14: exact in float64 sums below 2**53
        return xp.expand_dims(xp.sum(x * y, axis=-1), axis=-1)

    for ell, m in enumerate(c.moduli):
        ra, rb = residues(xp, Ar, Ai, m), residues(xp, Br, Bi, m)
        if ai is None:
            W = (symmetric_mod(xp, dot(ra[0], rb[0]), m),)
        else:
            t1, t2, t3 = dot(ra[0], rb[0]), dot(ra[1], rb[1]), dot(ra[2], rb[2])
            W = (symmetric_mod(xp, t1 - t2, m), symmetric_mod(xp, t3 - t1 - t2, m))
        accumulate(xp, c, limbs, quotient, ell, W)
    zero = xp.zeros((1,), dtype=mu.dtype)
    parts = reconstruct(xp, c, limbs, quotient, mu + nu, zero, out_dtype)
    if out_dtype == "dd":
        return tuple((hi[:, 0], lo[:, 0]) for hi, lo in parts)
    return tuple(p[:, 0] for p in parts)
