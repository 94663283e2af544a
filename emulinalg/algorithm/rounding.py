"""Exact integer accumulation in limbs, and one correctly rounded conversion to float.

Both schemes end with an integer that is wider than any machine word: the shift-reduce sum of
Scheme I and the CRT sum of Scheme II. Both are accumulated here exactly, as a list of int64
"limbs" of ``LIMB_BITS`` bits each (value = sum_i limbs[i] * 2**(LIMB_BITS*i)), and rounded once
to float64 or float32 with round-to-nearest-even, subnormals included. The result is therefore a
pure function of the integer products: any backend that reproduces those integers reproduces
the output bit for bit.

All functions take the array namespace ``xp`` and operate elementwise on same-shaped int64 arrays.
"""

from __future__ import annotations

from .moduli import LIMB_BITS
from .xputil import clip, frexp_exponent, ldexp, to_float32

_MASK = (1 << LIMB_BITS) - 1

# (significand bits, exponent of the smallest subnormal) per output dtype
_FORMATS = {"float64": (53, -1074), "float32": (24, -149)}


def zeros(xp, shape, n_limbs, device=None):
    return [xp.zeros(shape, dtype=xp.int64, device=device) for _ in range(n_limbs)]


def add_shifted(xp, limbs, v, shift):
    """``limbs += v * 2**shift`` for int64 ``v`` (|v| < 2**62) and a Python int ``shift >= 0``."""
    q, r = divmod(shift, LIMB_BITS)
    # Split v into limb-sized pieces first (the top one keeps the sign) so shifting by r < LIMB_BITS
    # cannot overflow int64.
    rest = v
    for t in range(3):
        if t < 2:
            piece = xp.bitwise_and(rest, _MASK)
            rest = xp.bitwise_right_shift(rest, LIMB_BITS)
        else:
            piece = rest
        i = q + t
        if i < len(limbs):
            limbs[i] = limbs[i] + xp.bitwise_left_shift(piece, r)
        else:
            # Above the top limb only the sign extension of a value that fits can remain (0 or
            # -1 pieces): fold it into the top limb, which is not bounded by LIMB_BITS.
            top = len(limbs) - 1
            limbs[top] = limbs[top] + xp.bitwise_left_shift(piece, r + LIMB_BITS * (i - top))


def add_multiple(xp, limbs, w, const_limbs):
    """``limbs += w * C`` for a small int64 array ``w`` and a constant given by its limbs."""
    for i, c in enumerate(const_limbs):
        if c:
            limbs[i] = limbs[i] + w * c


def _carry(xp, limbs):
    for i in range(len(limbs) - 1):
        c = xp.bitwise_right_shift(limbs[i], LIMB_BITS)  # arithmetic shift: floor division
        limbs[i] = xp.bitwise_and(limbs[i], _MASK)
        limbs[i + 1] = limbs[i + 1] + c


def normalize(xp, limbs):
    """Return ``(negative, magnitude_limbs)`` with every magnitude limb in ``[0, 2**LIMB_BITS)``
    (the top one unbounded above)."""
    limbs = list(limbs)
    _carry(xp, limbs)
    negative = limbs[-1] < 0
    limbs = [xp.where(negative, -x, x) for x in limbs]
    _carry(xp, limbs)
    return negative, limbs


def _round(xp, negative, limbs, exp_offset, dtype):
    """``round_to_float`` plus the rounded magnitude as ``keep * 2**d`` in units of V."""

    mant, emin_sub = _FORMATS[dtype]
    i64 = xp.int64
    # Exponent estimate from a float approximation (relative error ~1e-15): it is bitlen(V) or
    # bitlen(V)+1, so M = floor(V / 2**sh) below has 61 or 62 bits.
    approx = xp.astype(limbs[0], xp.float64)
    for i in range(1, len(limbs)):
        approx = approx + ldexp(xp, xp.astype(limbs[i], xp.float64), LIMB_BITS * i)
    sh = xp.astype(frexp_exponent(xp, approx), i64) - 62
    M = xp.zeros_like(limbs[0])
    sticky = xp.zeros(limbs[0].shape, dtype=xp.bool)
    for i, limb in enumerate(limbs):
        d = LIMB_BITS * i - sh
        up = clip(xp, d, 0, 62)
        down = clip(xp, -d, 0, 62)
        # floor(V / 2**sh) = sum_i floor(limb_i * 2**d_i) because the limbs are normalized.
        term = xp.where(d >= 0, xp.bitwise_left_shift(limb, up), xp.bitwise_right_shift(limb, down))
        M = M + term
        lost = xp.bitwise_and(limb, xp.bitwise_left_shift(xp.ones_like(limb), down) - 1)
        sticky = sticky | ((d < 0) & (lost != 0))
    M = xp.bitwise_or(M, xp.astype(sticky, i64))
    nbits = xp.where(M >= (1 << 61), 62, 61)
    e_res = nbits - 1 + sh + exp_offset  # V * 2**exp_offset lies in [2**e_res, 2**(e_res+1))
    q = clip(xp, e_res - emin_sub + 1, 0, mant)  # significand bits available at that exponent
    drop = nbits - q
    keep = xp.bitwise_right_shift(M, drop)
    rem = xp.bitwise_and(M, xp.bitwise_left_shift(xp.ones_like(M), drop) - 1)
    half = xp.bitwise_left_shift(xp.ones_like(M), drop - 1)
    round_up = (rem > half) | ((rem == half) & (xp.bitwise_and(keep, 1) == 1))
    keep = keep + xp.astype(round_up, i64)
    underflow = (e_res - emin_sub + 1) < 0  # below half the smallest subnormal: rounds to zero
    keep = xp.where(underflow | (M == 0), 0, keep)
    exponent = clip(xp, sh + drop + exp_offset, -2200, 2200)
    out = ldexp(xp, xp.astype(keep, xp.float64), exponent)
    out = xp.where(negative, -out, out)
    if dtype == "float32":
        out = to_float32(xp, out)  # exact: keep has <= 24 bits at a float32 exponent, or inf
    return out, keep, sh + drop


def round_to_float(xp, negative, limbs, exp_offset, dtype="float64"):
    """Correctly rounded ``(-1)**negative * V * 2**exp_offset`` where ``V`` is given by normalized
    non-negative ``limbs`` and ``exp_offset`` is an integer array (or int) broadcastable to them.

    Round-to-nearest-even at the precision of ``dtype`` ("float64" or "float32"), gradual underflow
    included; results beyond the range become inf.
    """
    return _round(xp, negative, limbs, exp_offset, dtype)[0]


def unscale(xp, limbs, mu, nu, dtype, shift=0):
    """The exact integer in (unnormalized) ``limbs`` times ``2**(shift - mu_i - nu_j)``, rounded
    once to ``dtype``: the common last step of both schemes (mu: (..., m), nu: (..., n)).
    ``dtype="dd"`` returns the double-double pair of ``unscale_dd``."""
    if dtype == "dd":
        return unscale_dd(xp, limbs, mu, nu, shift)
    exp_offset = shift - (xp.expand_dims(mu, axis=-1) + xp.expand_dims(nu, axis=-2))
    negative, mag = normalize(xp, limbs)
    return round_to_float(xp, negative, mag, exp_offset, dtype)


def _limbs_of_shifted(xp, keep, d, n_limbs):
    """Limbs of ``keep * 2**d`` (0 <= keep < 2**54, d >= 0 elementwise); the top limb is
    unbounded above like ``normalize``'s."""
    out = []
    for i in range(n_limbs):
        below = LIMB_BITS * i - d  # > 0: this limb starts above bit d of the value
        right = xp.bitwise_right_shift(keep, clip(xp, below, 0, 62))
        s = clip(xp, -below, 0, LIMB_BITS - 1)
        # Mask before shifting left so nothing leaves int64.
        left = xp.bitwise_left_shift(
            xp.bitwise_and(keep, xp.bitwise_left_shift(xp.ones_like(keep), LIMB_BITS - s) - 1), s
        )
        piece = xp.where(below >= 0, right, xp.where(-below < LIMB_BITS, left, 0))
        if i < n_limbs - 1:
            piece = xp.bitwise_and(piece, _MASK)
        elif n_limbs > 1:  # the top limb holds everything from its first bit up
            piece = xp.where(
                below >= 0, right, xp.bitwise_left_shift(keep, clip(xp, -below, 0, 62))
            )
        out.append(piece)
    return out


def unscale_dd(xp, limbs, mu, nu, shift=0):
    """Like ``unscale`` to float64, as a double-double ``(hi, lo)``: ``hi`` is the correctly
    rounded value (the same array ``unscale`` returns) and ``lo`` the correctly rounded
    remainder (exact - hi); ``lo`` is 0 where hi is infinite. Used where partial products are
    summed later (the dask layer's K-blocks) so the sum keeps the emulation's accuracy."""
    exp_offset = shift - (xp.expand_dims(mu, axis=-1) + xp.expand_dims(nu, axis=-2))
    negative, mag = normalize(xp, limbs)
    hi, keep, d = _round(xp, negative, mag, exp_offset, "float64")
    # d < 0: the dropped bits were zeros below the integer grid, so hi is exact.
    exact = d < 0
    pieces = _limbs_of_shifted(xp, xp.where(exact, 0, keep), xp.where(exact, 0, d), len(mag))
    neg_r, rmag = normalize(xp, [m - p for m, p in zip(mag, pieces)])
    lo = round_to_float(xp, negative ^ neg_r, rmag, exp_offset, "float64")
    lo = xp.where(exact | ~xp.isfinite(hi), 0.0, lo)
    return hi, lo
