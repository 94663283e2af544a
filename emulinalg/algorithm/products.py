"""Ozaki Scheme II: residues modulo INT8-sized moduli, one integer GEMM per modulus, CRT.

Pipeline (named after the steps): scaling (``scaling.ozaki2_shifts``) -> residues
(``residues.residues``) -> modular products (``modular_products``) -> CRT accumulation and
unscaling (``crt.accumulate``, ``crt.reconstruct``). Complex inputs use 3M: T1 = Ar Br,
T2 = Ai Bi, T3 = (Ar+Ai)(Br+Bi) per modulus, Re = T1 - T2, Im = T3 - T1 - T2, exact in modular
arithmetic, so 3 GEMMs per modulus.

References: Ozaki, Uchino, Imamura, "Ozaki Scheme II: A GEMM-oriented emulation of floating-point
matrix multiplication using an integer modular technique", arXiv:2504.08009; Uchino et al.,
SC-W 2025 (GEMMul8); Uchino et al., arXiv:2512.08321 (complex, 3M).
"""

from __future__ import annotations

from .._timing import staged
from .crt import accumulate, accumulators, from_residues, reconstruct
from .moduli import crt_constants
from .residues import moduli_axis, residues, split, symmetric_mod
from .scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest, scale_to_integers

# ``entries`` takes several moduli per pass, its work arrays at most about this many elements
# (or ``work``'s)
ENTRY_WORK = 1 << 22
RESIDUE_PRODUCT_BOUND = 128 * 128  # |r_a * r_b| for residues in [-128, 127]


@staged("products")
def modular_products(xp, int_matmul, ra, rb, m):
    """Real and imaginary parts of A'B' mod m, as int64 in the symmetric range."""
    if len(ra) == 1:
        return (symmetric_mod(xp, int_matmul(ra[0], rb[0], RESIDUE_PRODUCT_BOUND), m),)
    t1 = int_matmul(ra[0], rb[0], RESIDUE_PRODUCT_BOUND)
    t2 = int_matmul(ra[1], rb[1], RESIDUE_PRODUCT_BOUND)
    t3 = int_matmul(ra[2], rb[2], RESIDUE_PRODUCT_BOUND)
    return symmetric_mod(xp, t1 - t2, m), symmetric_mod(xp, t3 - t1 - t2, m)


def product(
    xp, int_matmul, ar, ai, br, bi, moduli, mode, out_dtype, prescale=None, b_planes=None,
    a_planes=None,
):  # fmt: skip
    """Scheme II product of A = ar + i ai (..., m, k) and B = br + i bi (..., k, n).

    ``ai``/``bi`` are None for real operands (both or neither). Inputs are finite float64;
    returns a tuple of real and (for complex) imaginary parts of dtype ``out_dtype``
    ("float64"/"float32"; "dd": each part a (hi, lo) float64 pair, ``rounding.unscale_dd``),
    each the correctly rounded value of the reconstructed integer product times
    2**-(mu_i + nu_j), the scaled operands rounded as ``scaling.rounds_to_nearest`` says.
    ``prescale`` reuses ``scaling.ozaki2_prescale``'s result, ``b_planes``
    ``residues.b_residue_planes``' (same prescale and moduli), ``a_planes`` A's planes the same
    way (``residues.int8_planes`` with A's shifts, e.g. ``residues.kept_planes``).
    """
    c = crt_constants(moduli)
    if prescale is None:
        prescale = ozaki2_prescale(xp, int_matmul, ar, ai, br, bi, mode)
    mu, nu = ozaki2_shifts(xp, prescale, c.L, c.Q_down)
    near = rounds_to_nearest(moduli, ar.shape[-1], mode)
    if a_planes is None:
        Ar, Ai = (split(xp, scale_to_integers(xp, x, mu, -1, near)) for x in (ar, ai))
    if b_planes is None:
        Br, Bi = (split(xp, scale_to_integers(xp, x, nu, -2, near)) for x in (br, bi))
    shape = ar.shape[:-1] + (br.shape[-1],)

    def W():  # one modulus's products at a time
        for ell, m in enumerate(c.moduli):
            rb = residues(xp, Br, Bi, m) if b_planes is None else b_planes[ell]
            ra = residues(xp, Ar, Ai, m) if a_planes is None else a_planes[ell]
            yield modular_products(xp, int_matmul, ra, rb, m)

    return from_residues(xp, c, W(), shape, 1 if ai is None else 2, mu, nu, out_dtype)


def entries(xp, ar, ai, br, bi, moduli, out_dtype, prescale, nearest, work=ENTRY_WORK):
    """Scheme II product of single entries: entry t is row t of ``ar`` (+ i ``ai``) (K, k) times
    row t of ``br`` (+ i ``bi``) (K, k), i.e. columns of B given as rows, with the shifts of
    the line bounds ``prescale = (s, t, e, f)`` restricted to those lines ((K,) each) and the
    scaled operands rounded as ``nearest`` says. Returns the parts (K,) as ``product`` does,
    computed with one length-k dot product of residues per entry and modulus (integers, exact)
    instead of GEMMs: the same integers, hence the same result, as those entries of ``product``
    with the same shifts. Several moduli per pass, with work arrays of at most about ``work``
    elements (at least one modulus's, (K, k))."""
    c = crt_constants(moduli)
    mu, nu = ozaki2_shifts(xp, prescale, c.L, c.Q_down)
    Ar, Ai = (split(xp, scale_to_integers(xp, x, mu, -1, nearest)) for x in (ar, ai))
    Br, Bi = (split(xp, scale_to_integers(xp, x, nu, -1, nearest)) for x in (br, bi))
    limbs, quotient = accumulators(xp, c, (ar.shape[0], 1), 1 if ai is None else 2)

    def dot(x, y):  # |residue products| <= 2**14: exact in float64 sums below 2**53
        return xp.expand_dims(xp.sum(x * y, axis=-1), axis=-1)

    # Several moduli per pass (a leading axis of moduli): a few array operations per group
    # instead of per modulus (each a kernel launch on a device).
    group = max(1, work // max(1, ar.shape[0] * ar.shape[-1]))
    for g0 in range(0, moduli, group):
        ms = c.moduli[g0 : g0 + group]
        mv = moduli_axis(xp, ms, ar.ndim, ar.device)
        ra, rb = residues(xp, Ar, Ai, mv), residues(xp, Br, Bi, mv)
        if ai is None:
            W = (symmetric_mod(xp, dot(ra[0], rb[0]), mv),)
        else:
            t1, t2, t3 = dot(ra[0], rb[0]), dot(ra[1], rb[1]), dot(ra[2], rb[2])
            W = (symmetric_mod(xp, t1 - t2, mv), symmetric_mod(xp, t3 - t1 - t2, mv))
        accumulate(xp, c, limbs, quotient, range(g0, g0 + len(ms)), W)
    zero = xp.zeros((1,), dtype=mu.dtype)
    parts = reconstruct(xp, c, limbs, quotient, mu + nu, zero, out_dtype)
    if out_dtype == "dd":
        return tuple((hi[:, 0], lo[:, 0]) for hi, lo in parts)
    return tuple(p[:, 0] for p in parts)
