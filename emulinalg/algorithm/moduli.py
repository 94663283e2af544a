"""Moduli for Ozaki Scheme II and their exact CRT constants.

The constants are computed once with Python integers, so they are exact for any number of moduli;
they reach the array code as limbs (small integers) and as float64 ratios used only to pick the
CRT quotient, never to form the result.

Complex products may take the Gaussian moduli instead (``GAUSSIAN_MODULI``): odd, every prime
factor 1 mod 4, so that -1 has a square root iota modulo each. Modulo such an m the complex
product diagonalizes: with u = re + iota im and v = re - iota im (mod m),

    U = u_A u_B = C_re + iota C_im,   V = v_A v_B = C_re - iota C_im   (mod m),
    C_re = (U + V) / 2,               C_im = (U - V) / (2 iota)          (mod m),

two INT8 GEMMs per modulus where 3M takes three. Their moduli are smaller (at most 241, a mean
of ~7.4 bits against ~7.9), so a complex product needs about one modulus more for the same P
(16 Gaussian moduli hold 117.7 bits, the first 15 of ``MODULI`` 117.8): 32 GEMMs instead of 45.

References: Ozaki, Uchino, Imamura, arXiv:2504.08009 (Scheme II); Uchino et al., SC-W 2025
(GEMMul8, same moduli). The diagonalization is the ring isomorphism Z_m[i] = Z_m x Z_m that
holds where -1 is a square modulo m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

# Pairwise coprime, each at most 256, so every residue fits INT8 in [-128, 127].
MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227,
          223, 217, 211, 199, 197, 193, 191, 181, 179, 173)  # fmt: skip
MAX_MODULI = len(MODULI)
MIN_MODULI = 2

# Complex products' Gaussian moduli: odd, pairwise coprime, at most 241 (residues in
# [-120, 120]), every prime factor 1 mod 4 (221 = 13 * 17, 205 = 5 * 41), in decreasing order:
# the largest product for every count (greedy over the odd numbers below 256 of that form).
GAUSSIAN_MODULI = (241, 233, 229, 221, 205, 197, 193, 181, 173, 157,
                   149, 137, 113, 109, 101, 97, 89, 73, 61, 53)  # fmt: skip

LIMB_BITS = 24  # limb width of the exact integer accumulators (see rounding.py)


@dataclass(frozen=True)
class CRTConstants:
    """Exact constants for the first ``n`` moduli.

    ``weights[l] = (P/m_l) * ((P/m_l)^-1 mod m_l)`` so that ``X = sum_l W_l * weights[l]`` is
    congruent to ``W_l`` modulo every ``m_l``; the symmetric representative of ``X mod P`` is the
    reconstructed integer.
    """

    moduli: tuple[int, ...]
    P: int
    weights: tuple[int, ...]
    weight_limbs: tuple[tuple[int, ...], ...]  # weights[l] in base 2**LIMB_BITS, little-endian
    P_limbs: tuple[int, ...]
    weight_ratios: tuple[float, ...]  # float(weights[l] / P) in [0, 1), for the quotient only
    n_limbs: int
    log2_P: float
    # Largest L with 2**(2L) <= (P - 1) / 4: |A'B'| <= 2**(2L) keeps the symmetric
    # representative unique with a factor-2 margin, so the float quotient can't be off by one.
    L: float
    # The largest double <= floor((P - 1) / 4): shifts are decided by exact comparisons against
    # it, so every backend chooses the same shifts (a log2 may differ in its last bit).
    Q_down: float
    # Gaussian moduli (``crt_constants(n, gaussian=True)``): per modulus iota (iota**2 = -1 mod
    # m), and the inverses of 2 and of 2 iota that turn U, V back into the parts; () otherwise.
    iota: tuple[int, ...] = ()
    inv2: tuple[int, ...] = ()
    inv2iota: tuple[int, ...] = ()

    @property
    def gaussian(self) -> bool:
        return bool(self.iota)


def _limbs(x: int, n: int) -> tuple[int, ...]:
    mask = (1 << LIMB_BITS) - 1
    return tuple((x >> (LIMB_BITS * i)) & mask for i in range(n))


def sqrt_minus_one(m: int) -> int:
    """The smallest iota in [1, m) with iota**2 = -1 (mod m); ValueError where none exists."""
    for x in range(1, m):
        if (x * x + 1) % m == 0:
            return x
    raise ValueError(f"-1 is not a square modulo {m}")


@cache
def crt_constants(n: int, gaussian: bool = False) -> CRTConstants:
    """Exact CRT constants for the first ``n`` moduli of :data:`MODULI` (2 <= n <= 20), or of
    :data:`GAUSSIAN_MODULI` with ``gaussian`` (complex products, two GEMMs per modulus)."""
    if not MIN_MODULI <= n <= MAX_MODULI:
        raise ValueError(f"number of moduli must be in [{MIN_MODULI}, {MAX_MODULI}], got {n}")
    mods = (GAUSSIAN_MODULI if gaussian else MODULI)[:n]
    iota = tuple(sqrt_minus_one(m) for m in mods) if gaussian else ()
    P = math.prod(mods)
    weights = []
    for m in mods:
        Pm = P // m
        weights.append(Pm * pow(Pm, -1, m))
    # Room for sum_l |W_l| * weights[l] < n * 128 * P plus the sign and carries.
    n_limbs = (P.bit_length() + 8 + n.bit_length() + LIMB_BITS) // LIMB_BITS + 1
    return CRTConstants(
        moduli=mods,
        P=P,
        weights=tuple(weights),
        weight_limbs=tuple(_limbs(w, n_limbs) for w in weights),
        P_limbs=_limbs(P, n_limbs),
        weight_ratios=tuple(w / P for w in weights),  # Python's int/int is correctly rounded
        n_limbs=n_limbs,
        log2_P=math.log2(P),
        L=0.5 * math.log2((P - 1) / 4),
        Q_down=_float_down((P - 1) // 4),
        iota=iota,
        inv2=tuple(pow(2, -1, m) for m in mods) if gaussian else (),
        inv2iota=tuple(pow(2 * i, -1, m) for m, i in zip(mods, iota)),
    )


def _float_down(q: int) -> float:
    f = float(q)
    return math.nextafter(f, 0.0) if int(f) > q else f


def check_pairwise_coprime(moduli=MODULI) -> bool:
    return all(math.gcd(a, b) == 1 for i, a in enumerate(moduli) for b in moduli[i + 1 :])
