"""The dask shared graph's Scheme II steps on one numpy chunk in ``emulinalg._amx``'s C++ (the
amx backend's ``chunk_*`` stages, ``emulinalg/backends/dask/crt.py``): a chunk's residues
(``ozaki2_residues``, ``ozaki2_residues3``), a block's modular products
(``products.modular_products`` with one tile GEMM per modulus and 3M product), the K-blocks'
sum modulo each modulus, and an output block's CRT (``ozaki2_crt``). The integers are those of
``residues.int8_planes``, ``products.modular_products`` and ``crt.from_residues``, so an output
block holds the generic graph's bits.

Layouts: a chunk's planes int8 (P, n, rows, cols) as the chunk, P = 1 (real) or 3 (3M: re,
im, re + im); a block's residues int8 (parts, n, rows, cols), parts 1 or 2 (Re, Im).
"""

from __future__ import annotations

import numpy as np

from emulinalg.algorithm.moduli import MODULI
from emulinalg.algorithm.products import modular_products
from emulinalg.algorithm.residues import moduli_axis, symmetric_mod
from emulinalg.algorithm.xputil import make_complex

from .cuda import OUT_KIND


def residues(amx, re, im, shift, axis, moduli, nearest):
    """int8 planes (P, n, rows, cols) of one 2-D float64 chunk scaled by 2**shift along its
    lines (``axis`` -1: rows; -2: columns), rounded as ``nearest`` says: the GEMM's operands as
    they are."""
    rows = axis == -1
    shape = re.shape
    if not rows:  # the C++ scales its operand's rows: B's columns as rows (a view), the planes
        re, im = re.T, None if im is None else im.T  # written back as (k, cols)
    s = np.ascontiguousarray(shift, dtype=np.int32)
    if re.size == 0:
        return np.zeros((1 if im is None else 3, moduli) + shape, dtype=np.int8)
    if im is None:
        return amx.ozaki2_residues(re, s, moduli, rows, nearest=nearest)[None]
    return amx.ozaki2_residues3(re, im, s, moduli, rows, nearest=nearest)


def products(gemm, pa, pb, moduli):
    """int8 (parts, n, rows, cols): ``products.modular_products`` of the A planes and the B
    planes (``residues``' layouts) per modulus, its GEMMs ``gemm`` (int8 (m, k) @ int8 (k, n),
    exact integers)."""

    def int_matmul(a, b, _bound):  # float64: 3M's differences of int32 sums stay exact
        return np.asarray(gemm(a, b), dtype=np.float64)

    return np.stack([np.stack(modular_products(np, int_matmul, tuple(pa[:, ell]),
                                               tuple(pb[:, ell]), m))
                     for ell, m in enumerate(MODULI[:moduli])], axis=1).astype(np.int8)  # fmt: skip


def residue_sum(ws):
    """The K-blocks' residues of one output block added modulo each modulus (int8, the same
    layout)."""
    total = ws[0].astype(np.float64)
    for w in ws[1:]:
        total += w  # small integers: exact
    return symmetric_mod(np, total, moduli_axis(np, MODULI[: total.shape[1]], 2)).astype(np.int8)


def crt(amx, tables, w, mu, nu, moduli, cplx, out_dtype, cols):
    """The output block (rows, ``cols``) from its K-summed residues ``w`` and its line shifts:
    real float64/float32, complex of those parts, or "dd" (hi + i lo as complex128), rounded
    as ``crt.from_residues`` rounds. ``tables``: ``ozaki2_crt``'s digit tables for ``moduli``."""
    rows = w.shape[2]
    dt = np.float32 if out_dtype == "float32" else np.float64
    hi = [np.empty((rows, cols), dtype=dt) for _ in range(2 if cplx else 1)]
    lo = [np.empty((rows, cols), dtype=np.float64) if out_dtype == "dd" else None for _ in hi]
    if w.size:  # else the outputs are empty
        mu32 = np.ascontiguousarray(mu, dtype=np.int32)
        nu32 = np.ascontiguousarray(nu, dtype=np.int32)
        amx.ozaki2_crt(np.ascontiguousarray(w if cplx else w[0]), mu32, nu32, OUT_KIND[out_dtype],
                       *tables, hi[0], lo[0], hi[-1] if cplx else None,
                       lo[-1] if cplx else None)  # fmt: skip
    if out_dtype == "dd":
        return make_complex(np, hi[0], lo[0], np.complex128)
    if cplx:
        return make_complex(np, hi[0], hi[1], np.complex64 if dt == np.float32 else np.complex128)
    return hi[0]
