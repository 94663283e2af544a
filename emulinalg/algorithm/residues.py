"""Scheme II residues: the scaled integers reduced modulo each modulus, in the symmetric range.

A scaled operand X = round(2**mu A) (``scaling.scale_to_integers``; |X| < 2**83) is first split
exactly into two float64 parts below 2**53, X = hi 2**32 + lo, whose residues combine into X mod
m without any rounding; the residues lie in [-(m//2), (m-1)//2], which fits INT8 for every
modulus (``moduli.MODULI``). Complex operands get the 3M planes (re, im, re + im), or with the
Gaussian moduli (``moduli.GAUSSIAN_MODULI``) the two planes u = re + iota im, v = re - iota im.

References: Ozaki, Uchino, Imamura, arXiv:2504.08009 (Scheme II); Uchino et al., SC-W 2025
(GEMMul8); Uchino et al., arXiv:2512.08321 (complex, 3M).
"""

from __future__ import annotations

from .._timing import staged
from .moduli import crt_constants
from .scaling import ozaki2_shifts, rounds_to_nearest, scale_to_integers
from .xputil import floor_mod, ldexp

SPLIT_BITS = 32  # scaled integers reach ~2**83: split them into two exact parts below 2**53


def moduli_axis(xp, moduli, ndim, device=None):
    """Several moduli as one float64 array of shape (G, 1, ..., 1) (``ndim`` trailing ones): the
    ``m`` of ``symmetric_mod`` and ``residues`` for a leading axis of moduli."""
    return xp.reshape(xp.asarray(moduli, dtype=xp.float64, device=device), (-1,) + (1,) * ndim)


def symmetric_mod(xp, x, m):
    """Residue of integer-valued floats ``x`` (|x| < 2**53) modulo ``m``, in [-(m//2), (m-1)//2];
    ``m`` a Python int, or a float64 array of moduli broadcasting against ``x``
    (``moduli_axis``)."""
    if isinstance(m, int):
        r = floor_mod(xp, x, float(m))
        return xp.where(r > (m - 1) // 2, r - m, r)
    r = floor_mod(xp, x, m)
    return xp.where(r > xp.floor((m - 1) / 2), r - m, r)


def split(xp, X):
    """X = hi * 2**SPLIT_BITS + lo exactly, with lo in [0, 2**32) and |hi| < 2**53 (or None)."""
    if X is None:
        return None
    hi = xp.floor(ldexp(xp, X, -SPLIT_BITS))
    return hi, X - ldexp(xp, hi, SPLIT_BITS)


def _congruent(xp, parts, m):
    """An integer-valued float in [0, m**2) congruent to the split integer modulo m."""
    hi, lo = parts
    if isinstance(m, int):
        mf, p2 = float(m), float(pow(2, SPLIT_BITS, m))
    else:  # 2**SPLIT_BITS mod m, exact (< 2**53)
        mf, p2 = m, floor_mod(xp, xp.full_like(m, 2.0**SPLIT_BITS), m)
    return floor_mod(xp, hi, mf) * p2 + floor_mod(xp, lo, mf)


def _residue(xp, parts, m):
    return symmetric_mod(xp, _congruent(xp, parts, m), m)


@staged("slicing")
def residues(xp, Xr, Xi, m, iota=None):
    """Residue planes of a scaled integer operand (given ``split``): (re, im, re+im) for 3M,
    (re + iota im, re - iota im) with a Gaussian modulus's ``iota`` (iota**2 = -1 mod m), or
    (re,); ``m`` one modulus, or an array of several (``moduli_axis``) giving planes with a
    leading axis of moduli (``iota`` then an array of theirs)."""
    if iota is not None and Xi is not None:  # each part once: |iota ri| < 2**24, exact
        rr, t = _congruent(xp, Xr, m), _congruent(xp, Xi, m) * iota
        return symmetric_mod(xp, rr + t, m), symmetric_mod(xp, rr - t, m)
    rr = _residue(xp, Xr, m)
    if Xi is None:
        return (rr,)
    ri = _residue(xp, Xi, m)
    return rr, ri, symmetric_mod(xp, rr + ri, m)


def iota_of(c, ell, cplx):
    """Modulus ``ell``'s iota where the planes are Gaussian (complex, Gaussian constants ``c``),
    else None (``residues``' argument)."""
    return c.iota[ell] if cplx and c.gaussian else None


def b_residue_planes(xp, br, bi, prescale, moduli, mode="accurate", entries=None,
                     gaussian=False):  # fmt: skip
    """B's residue planes for every modulus, as int8 (``residues`` of the scaled B): made once
    and passed to ``products.product`` for each row block of A (``b_planes``) instead of once
    per block. n planes per entry of B (3n for complex, 2n with the Gaussian moduli).
    ``entries``: made by blocks of columns of about this many entries of B (None: at once), so
    the float64 work arrays stay that small; the planes are the same."""
    c = crt_constants(moduli, gaussian)
    _, nu = ozaki2_shifts(xp, prescale, c.L, c.Q_down)
    near = rounds_to_nearest(moduli, br.shape[-2], mode, gaussian)
    k, n = br.shape[-2:]
    cols = n if entries is None else min(n, max(1, entries // max(1, k)))
    planes = None
    for c0 in range(0, n, cols):
        sl = slice(c0, min(n, c0 + cols))
        im = None if bi is None else bi[..., sl]
        block = int8_planes(xp, br[..., sl], im, nu[..., sl], -2, moduli, near, gaussian)
        if cols >= n:
            return block
        if planes is None:
            planes = [
                tuple(xp.empty(br.shape, dtype=xp.int8, device=r.device) for r in rs)
                for rs in block
            ]
        for rs_all, rs in zip(planes, block):
            for r_all, r in zip(rs_all, rs):
                r_all[..., sl] = r
    return planes


def int8_planes(xp, re, im, shift, axis, moduli, nearest, gaussian=False):
    """The residue planes of an operand scaled by 2**shift along ``axis`` (``scale_to_integers``,
    rounded as ``nearest`` says) for every one of ``moduli`` moduli (``gaussian``: of
    ``moduli.GAUSSIAN_MODULI``), as int8: per modulus a tuple of ``residues``' planes (the dask
    layer's per chunk, with the whole operand's shifts)."""
    X = [split(xp, scale_to_integers(xp, x, shift, axis, nearest)) for x in (re, im)]
    c = crt_constants(moduli, gaussian)
    cplx = im is not None
    return [tuple(xp.astype(r, xp.int8) for r in residues(xp, *X, m, iota_of(c, ell, cplx)))
            for ell, m in enumerate(c.moduli)]  # fmt: skip


def kept_planes(xp, side, re, im, shift, axis, moduli, nearest, gaussian=False):
    """``int8_planes`` of a prepared operand (``side``: its ``operands.SideUse``), which keeps
    the planes of the last product's shifts: the lines whose shift, count of moduli and rounding
    are the same take their planes from there (a line's residues depend on its entries and its
    shift alone), the others are made anew. The shifts depend on both operands (the accurate
    mode's line bounds), so the planes are kept per shift, not per operand."""
    prev = side.side.peek(("residues",))
    lines = shift.shape[-1]
    changed = None
    key = (moduli, nearest, gaussian)
    if prev is not None and prev[0] == key and prev[1].shape == shift.shape:
        changed = prev[1] != shift
    if changed is not None and not bool(xp.any(changed)):
        side.record(f"residues of {lines}/{lines} lines", True)
        return prev[2]
    if changed is None or shift.ndim != 1:  # batched operands: all lines anew
        planes = int8_planes(xp, re, im, shift, axis, moduli, nearest, gaussian)
        side.record("residues", False)
    else:
        idx = xp.nonzero(changed)[0]
        line_axis = -2 if axis == -1 else -1
        sub = [None if x is None else xp.take(x, idx, axis=line_axis) for x in (re, im)]
        new = int8_planes(xp, *sub, xp.take(shift, idx), axis, moduli, nearest, gaussian)
        planes = []
        for old_planes, new_planes in zip(prev[2], new):
            block = []
            for old, p in zip(old_planes, new_planes):
                out = xp.asarray(old, copy=True)
                if line_axis == -2:
                    out[..., idx, :] = p
                else:
                    out[..., idx] = p
                block.append(out)
            planes.append(tuple(block))
        kept = lines - int(idx.shape[0])
        side.record(f"residues of {kept}/{lines} lines", True)
    side.side.put(("residues",), (key, shift, planes))
    return planes
