"""The complex part check's balance test (``emulinalg.algorithm.parts.balanced``) in two fused
kernels: the operands' sides in one pass per operand (``balance_sides``) and the test over the
output in one pass and cupy's all() (``balance_fine``), where the generic code makes a dozen
elementwise passes. The same float64 operations in the same order, each rounded on its own
(no FMA)."""

from __future__ import annotations

import functools

import cupy as cp

from .kernels import kernels_enabled


@functools.cache
def _sides_kernel():
    return cp.ElementwiseKernel(
        "T re, T im, int64 e",
        "float64 t, float64 d",
        """
        const int s = (int)(-e);
        const double x = ldexp(fabs((double)re), s), y = ldexp(fabs((double)im), s);
        t = __dadd_rn(x, y);
        d = __dsub_rn(x, y);
        """,
        "emulinalg_balance_sides",
    )


@functools.cache
def _fine_kernel():
    # terms: certificate.upper_terms, then parts.balance_terms' own (parts.balance_fine). An
    # elementwise pass and cupy's own all(): a ReductionKernel to one value runs in one block.
    return cp.ElementwiseKernel(
        "float64 t_lo, float64 s, bool rows, bool cols, raw float64 c",
        "bool ok",
        """
        const double t_hi = __dmul_rn(__ddiv_rn(__dadd_rn(__ddiv_rn(__dadd_rn(t_lo, c[0]), c[1]),
                                                          c[2]), c[3]), c[4]);
        const double d_hi = __dmul_rn(__dadd_rn(__dadd_rn(fabs(s), __dmul_rn(c[5], t_hi)), c[6]),
                                      c[7]);
        const double part_lo = __dmul_rn(__dsub_rn(__dmul_rn(t_lo, c[8]), __dmul_rn(d_hi, c[9])),
                                         c[10]);
        ok = rows || cols || part_lo >= __dmul_rn(t_hi, c[11]);
        """,
        "emulinalg_balance_fine",
    )


def _usable(*xs):
    return kernels_enabled() and all(isinstance(x, cp.ndarray) for x in xs)


def balance_sides(re, im, e):
    """``parts.balance_sides(cupy, re, im, e)``: (t, d) float64, or None to decline."""
    if not _usable(re, im, e) or re.dtype not in (cp.float32, cp.float64) or im.dtype != re.dtype:
        return None
    t = cp.empty(cp.broadcast_shapes(re.shape, im.shape, e.shape), dtype=cp.float64)
    d = cp.empty_like(t)
    _sides_kernel()(re, im, e.astype(cp.int64, copy=False), t, d)
    return t, d


def balance_fine(t_lo, s, terms, empty_rows, empty_cols):
    """``parts.balance_fine(cupy, t_lo, s, terms, empty_rows, empty_cols)``: bool, or None to
    decline."""
    if not _usable(t_lo, s, empty_rows, empty_cols):
        return None
    if t_lo.dtype != cp.float64 or s.dtype != cp.float64 or t_lo.size == 0:
        return None
    c = cp.asarray(terms, dtype=cp.float64)
    return bool(cp.all(_fine_kernel()(t_lo, s, empty_rows, empty_cols, c)))
