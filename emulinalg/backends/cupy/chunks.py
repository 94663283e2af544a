"""The dask shared graph's Scheme II steps on one cupy chunk in this backend's kernels
(``emulinalg/backends/dask/crt.py`` calls them through ``_stages``): the residue planes of a
chunk (``ozaki2_residues*.cu``), the modular products of a block (the fused GEMM with its mod-m
epilogue, else the INT32 GEMMs reduced here), the sum of K-blocks' residues modulo each
modulus, and the CRT of an output block (``ozaki2_crt_s8.cu``). The integers are those of
``residues.int8_planes``, ``products.modular_products`` and ``crt.from_residues``, so an output
block holds the generic graph's bits.

Layout of a block's residues: int8 (P, n, 1, rows, ldc), P = 1 (real) or 3 (complex: 3M's
three products, combined into the parts by the CRT kernel), n the moduli, ldc the columns
rounded up to 16 (columns beyond the block's are never read). Real and complex (3M) 2-D chunks
only; the Gaussian moduli are the in-core path's.
"""

from __future__ import annotations

import array_api_compat
import cupy as cp

from emulinalg.algorithm.moduli import MODULI
from emulinalg.algorithm.residues import moduli_axis, symmetric_mod
from emulinalg.algorithm.xputil import make_complex

from ..cuda import fused as _fused
from .gemm import _int8_products
from .kernels import _KP_ALIGN, _NP_ALIGN, _ceil, _strides, kernels_enabled
from .products import _residue_planes

_LDC_ALIGN = 16  # the fused GEMM's int8 rows (TMA): its ldc, kept for the cuBLAS path too


def _symmetric(x):
    """Integers ``x`` (P, n, ...; below 2**53) modulo the moduli along axis 1, symmetric
    (``residues.symmetric_mod``), as int8."""
    xp = array_api_compat.array_namespace(x)
    m = moduli_axis(xp, MODULI[: x.shape[1]], x.ndim - 2, device=x.device)
    return xp.astype(symmetric_mod(xp, xp.astype(x, xp.float64), m), xp.int8)


def chunk_residues(re, im, shift, axis, moduli, nearest):
    """int8 residue planes (P, n, 1, lines_pad, kp) of one 2-D chunk scaled by 2**shift along
    its lines (``axis`` -1: rows, as A's; -2: columns, as B's), rounded to nearest (``nearest``)
    or toward zero: ``residues.int8_planes``' integers in the fused GEMM's layout. ``re``/``im``
    float64 or float32 (im None for real), ``shift`` int (lines,). None to decline (the kernels
    off, other dtypes or dimensions): the generic steps then run for the whole graph."""
    if not kernels_enabled() or re.ndim != 2 or re.dtype not in (cp.float64, cp.float32):
        return None
    if im is not None and (im.dtype != re.dtype or im.strides != re.strides):
        re, im = cp.ascontiguousarray(re), cp.ascontiguousarray(im)
    x = re[None]
    sb, sr, sc = _strides(x)
    if axis == -1:
        k, lines = re.shape[1], re.shape[0]
        strides, pad = (sb, sr, sc), lines
    else:
        k, lines = re.shape
        strides, pad = (sb, sc, sr), _ceil(lines, _NP_ALIGN)
    kp = _ceil(k, _KP_ALIGN)
    mu = cp.ascontiguousarray(shift.reshape(1, lines).astype(cp.int32))
    return _residue_planes(re[None], None if im is None else im[None], strides, lines, pad, k, kp,
                           mu, lines, moduli, nearest)  # fmt: skip


def chunk_products(pa, pb, moduli):
    """int8 (P, n, 1, m, ldc): the products of the A planes (P, n, 1, m, kp) and the B planes
    (P, n, 1, n_p, kp) of ``chunk_residues`` modulo each modulus, symmetric (the fused GEMM's
    epilogue; where it does not run, the INT32 GEMMs' K-blocks added and reduced here)."""
    prod = _fused.int8_mod_products(pa, pb, moduli)
    if prod is not None:
        return prod
    s = _int8_products(pa, pb).astype(cp.float64).sum(axis=0)  # (P, n, 1, m, n_p), exact
    P, n, _, m, n_p = s.shape
    out = cp.zeros((P, n, 1, m, _ceil(n_p, _LDC_ALIGN)), dtype=cp.int8)
    out[..., :n_p] = _symmetric(s)
    return out


def chunk_residue_sum(ws):
    """The K-blocks' residues of one output block (``chunk_products``' arrays) added modulo each
    modulus: int8, the same layout."""
    total = ws[0].astype(cp.float64)
    for w in ws[1:]:
        total += w  # small integers: exact
    return _symmetric(total)


def chunk_crt(w, mu, nu, moduli, cplx, out_dtype, cols):
    """The output block (rows, ``cols``) from its K-summed residues ``w`` (``chunk_products``'
    layout) and its line shifts ``mu`` (rows,), ``nu`` (cols,): real float64/float32, complex
    of those parts, or "dd" (real products: hi + i lo as complex128, ``rounding.unscale_dd``),
    rounded as ``crt.from_residues`` rounds (``ozaki2_crt_s8.cu``)."""
    rows = w.shape[3]
    dt = cp.float32 if out_dtype == "float32" else cp.float64
    outs = [cp.empty((1, rows, cols), dtype=dt) for _ in range((2 if cplx else 1) * (
        2 if out_dtype == "dd" else 1))]  # fmt: skip
    mu32 = cp.ascontiguousarray(mu.reshape(1, rows).astype(cp.int32))
    nu32 = cp.ascontiguousarray(nu.reshape(1, cols).astype(cp.int32))
    _fused.crt_s8(cp.ascontiguousarray(w), moduli, cplx, mu32, nu32, 0, outs, out_dtype)
    outs = [x[0] for x in outs]
    if out_dtype == "dd" or cplx:
        cdt = cp.complex64 if dt == cp.float32 else cp.complex128
        return make_complex(cp, outs[0], outs[1], cdt)
    return outs[0]
