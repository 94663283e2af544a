"""Ozaki Scheme II: residues modulo INT8-sized moduli, one integer GEMM per modulus, CRT.

Pipeline (named after the steps): scaling (``scaling.ozaki2_shifts``) -> residues
(``residues.residues``) -> modular products (``modular_products``) -> CRT accumulation and
unscaling (``crt.accumulate``, ``crt.reconstruct``). Complex inputs use 3M: T1 = Ar Br,
T2 = Ai Bi, T3 = (Ar+Ai)(Br+Bi) per modulus, Re = T1 - T2, Im = T3 - T1 - T2, exact in modular
arithmetic, so 3 GEMMs per modulus; or (``gaussian``) the Gaussian moduli's two, U = u_A u_B and
V = v_A v_B of the planes u = re + iota im, v = re - iota im, Re = (U + V) / 2,
Im = (U - V) / (2 iota) mod m (``moduli``).

References: Ozaki, Uchino, Imamura, "Ozaki Scheme II: A GEMM-oriented emulation of floating-point
matrix multiplication using an integer modular technique", arXiv:2504.08009; Uchino et al.,
SC-W 2025 (GEMMul8); Uchino et al., arXiv:2512.08321 (complex, 3M).
"""

from __future__ import annotations

from .._timing import staged
from .crt import accumulate, accumulators, from_residues, reconstruct
from .moduli import crt_constants
from .residues import iota_of, moduli_axis, residues, split, symmetric_mod
from .scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest, scale_to_integers

# ``entries`` takes several moduli per pass, its work arrays at most about this many elements
# (or ``work``'s)
ENTRY_WORK = 1 << 22
RESIDUE_PRODUCT_BOUND = 128 * 128  # |r_a * r_b| for residues in [-128, 127]


@staged("products")
def modular_products(xp, int_matmul, ra, rb, m, inv=None):
    """Real and imaginary parts of A'B' mod m, as int64 in the symmetric range, from the planes
    of ``residues``: one (real), three (3M) or two (Gaussian: ``inv`` = (1/2, 1/(2 iota)) mod
    m)."""
    if len(ra) == 1:
        return (symmetric_mod(xp, int_matmul(ra[0], rb[0], RESIDUE_PRODUCT_BOUND), m),)
    if len(ra) == 2:
        return parts_of_uv(xp, *(int_matmul(x, y, RESIDUE_PRODUCT_BOUND) for x, y in zip(ra, rb)),
                           m, inv)  # fmt: skip
    t1 = int_matmul(ra[0], rb[0], RESIDUE_PRODUCT_BOUND)
    t2 = int_matmul(ra[1], rb[1], RESIDUE_PRODUCT_BOUND)
    t3 = int_matmul(ra[2], rb[2], RESIDUE_PRODUCT_BOUND)
    return symmetric_mod(xp, t1 - t2, m), symmetric_mod(xp, t3 - t1 - t2, m)


def parts_of_uv(xp, U, V, m, inv):
    """The Gaussian moduli's Re = (U + V) / 2 and Im = (U - V) / (2 iota) mod m (symmetric),
    ``inv`` = (1/2, 1/(2 iota)) mod m (< 241), from the integer-valued products U, V of k
    residue products each (|U|, |V| <= k 120**2): the float64 sums and multiples are exact for
    k below 2**53 / (2 120**2 241), about 1.3e9."""
    U, V = xp.astype(U, xp.float64, copy=False), xp.astype(V, xp.float64, copy=False)
    return symmetric_mod(xp, (U + V) * inv[0], m), symmetric_mod(xp, (U - V) * inv[1], m)


def product(
    xp, int_matmul, ar, ai, br, bi, moduli, mode, out_dtype, prescale=None, b_planes=None,
    a_planes=None, gaussian=False,
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
    ``gaussian``: complex operands modulo ``moduli.GAUSSIAN_MODULI`` (two GEMMs per modulus;
    real ones ignore it).
    """
    cplx = ai is not None
    c = crt_constants(moduli, gaussian and cplx)
    if prescale is None:
        prescale = ozaki2_prescale(xp, int_matmul, ar, ai, br, bi, mode)
    mu, nu = ozaki2_shifts(xp, prescale, c.L, c.Q_down)
    near = rounds_to_nearest(moduli, ar.shape[-1], mode, c.gaussian)
    if a_planes is None:
        Ar, Ai = (split(xp, scale_to_integers(xp, x, mu, -1, near)) for x in (ar, ai))
    if b_planes is None:
        Br, Bi = (split(xp, scale_to_integers(xp, x, nu, -2, near)) for x in (br, bi))
    shape = ar.shape[:-1] + (br.shape[-1],)

    def W():  # one modulus's products at a time
        for ell, m in enumerate(c.moduli):
            iota = iota_of(c, ell, cplx)
            rb = residues(xp, Br, Bi, m, iota) if b_planes is None else b_planes[ell]
            ra = residues(xp, Ar, Ai, m, iota) if a_planes is None else a_planes[ell]
            yield modular_products(xp, int_matmul, ra, rb, m, _inverses(c, ell))

    return from_residues(xp, c, W(), shape, 1 if ai is None else 2, mu, nu, out_dtype)


def _inverses(c, ell):
    """(1/2, 1/(2 iota)) mod modulus ``ell`` of Gaussian constants ``c`` (None otherwise)."""
    return (c.inv2[ell], c.inv2iota[ell]) if c.gaussian else None


def entries(xp, ar, ai, br, bi, moduli, out_dtype, prescale, nearest, work=ENTRY_WORK,
            gaussian=False):  # fmt: skip
    """Scheme II product of single entries: entry t is row t of ``ar`` (+ i ``ai``) (K, k) times
    row t of ``br`` (+ i ``bi``) (K, k), i.e. columns of B given as rows, with the shifts of
    the line bounds ``prescale = (s, t, e, f)`` restricted to those lines ((K,) each) and the
    scaled operands rounded as ``nearest`` says. Returns the parts (K,) as ``product`` does,
    computed with one length-k dot product of residues per entry and modulus (integers, exact)
    instead of GEMMs: the same integers, hence the same result, as those entries of ``product``
    with the same shifts. Several moduli per pass, with work arrays of at most about ``work``
    elements (at least one modulus's, (K, k)). ``gaussian``: as ``product``'s."""
    cplx = ai is not None
    c = crt_constants(moduli, gaussian and cplx)
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
        iv = None
        if c.gaussian:
            iv = moduli_axis(xp, c.iota[g0 : g0 + group], ar.ndim, ar.device)
        ra, rb = residues(xp, Ar, Ai, mv, iv), residues(xp, Br, Bi, mv, iv)
        if ai is None:
            W = (symmetric_mod(xp, dot(ra[0], rb[0]), mv),)
        elif c.gaussian:
            inv = (moduli_axis(xp, t[g0 : g0 + group], ar.ndim, ar.device)
                   for t in (c.inv2, c.inv2iota))  # fmt: skip
            W = parts_of_uv(xp, dot(ra[0], rb[0]), dot(ra[1], rb[1]), mv, tuple(inv))
        else:
            t1, t2, t3 = dot(ra[0], rb[0]), dot(ra[1], rb[1]), dot(ra[2], rb[2])
            W = (symmetric_mod(xp, t1 - t2, mv), symmetric_mod(xp, t3 - t1 - t2, mv))
        accumulate(xp, c, limbs, quotient, range(g0, g0 + len(ms)), W)
    zero = xp.zeros((1,), dtype=mu.dtype)
    parts = reconstruct(xp, c, limbs, quotient, mu + nu, zero, out_dtype)
    if out_dtype == "dd":
        return tuple((hi[:, 0], lo[:, 0]) for hi, lo in parts)
    return tuple(p[:, 0] for p in parts)
