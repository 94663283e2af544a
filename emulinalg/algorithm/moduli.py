"""Moduli for Ozaki Scheme II and their exact CRT constants.

The constants are computed once with Python integers, so they are exact for any number of moduli;
they reach the array code as limbs (small integers) and as float64 ratios used only to pick the
CRT quotient, never to form the result.

References: Ozaki, Uchino, Imamura, arXiv:2504.08009 (Scheme II); Uchino et al., SC-W 2025
(GEMMul8, same moduli).
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


def _limbs(x: int, n: int) -> tuple[int, ...]:
    mask = (1 << LIMB_BITS) - 1
    return tuple((x >> (LIMB_BITS * i)) & mask for i in range(n))


@cache
def crt_constants(n: int) -> CRTConstants:
    """Exact CRT constants for the first ``n`` moduli of :data:`MODULI` (2 <= n <= 20)."""
    if not MIN_MODULI <= n <= MAX_MODULI:
        raise ValueError(f"number of moduli must be in [{MIN_MODULI}, {MAX_MODULI}], got {n}")
    mods = MODULI[:n]
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
    )


def _float_down(q: int) -> float:
    f = float(q)
    return math.nextafter(f, 0.0) if int(f) > q else f


def check_pairwise_coprime() -> bool:
    return all(math.gcd(a, b) == 1 for i, a in enumerate(MODULI) for b in MODULI[i + 1 :])
