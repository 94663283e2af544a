"""The complex part check's balance test (``emulinalg.algorithm.parts.balanced``) in fused
kernels: the whole stage (``balance_stage``: per operand one pass writing the two bf16 GEMMs'
operands, the GEMMs, one pass over their sums for the test and the certificate's bound,
``src_cuda/balance.cu``), or, where it declines, the operands' sides in one pass per operand
(``balance_sides``) and the test over the output in one pass and cupy's all()
(``balance_fine``), where the generic code makes a dozen elementwise passes. The same float64
operations in the same order, each rounded on its own (no FMA)."""

from __future__ import annotations

import functools
import math

import cupy as cp
import numpy as np

from emulinalg.algorithm import certificate

from .gemm import _bf16_gemm
from .kernels import (
    _BF16_ALIGN,
    _MAX_GRID_YZ,
    _THREADS,
    _ceil,
    _i32,
    _i64,
    _in_type,
    _kernel,
    _strides,
    kernels_enabled,
)


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


def balance_stage(ar, ai, br, bi, ea, eb, terms):
    """``parts.balanced(cupy, lower, signed, ...)``'s result ``(fine, pl)`` with this backend's
    bf16 ``lower`` and ``signed`` (``gemm.magnitude_lower_matmul``), from the line exponents
    ``ea`` (..., m, 1), ``eb`` (..., 1, n) and ``parts.balance_terms``: one pass per operand
    writes the truncated bf16 sides the GEMMs read (no float64 sides), and one pass over the two
    GEMMs' FP32 sums makes the test and ``certificate.parts_lower``'s FP32 bound in rows padded
    as the GEMM's output (the certificate's kernels read it as they read that GEMM's sums).
    None declines: operands of other types or batches, k beyond the bf16 bound's range."""
    if not kernels_enabled() or ar.dtype not in (cp.float32, cp.float64):  # the backend's arrays
        return None
    if any(x.dtype != ar.dtype for x in (ai, br, bi)) or ar.ndim != br.ndim or ar.ndim < 2:
        return None
    batch = ar.shape[:-2]
    m, k = ar.shape[-2:]
    n = br.shape[-1]
    if br.shape[:-2] != batch or ai.shape != ar.shape or bi.shape != br.shape or 0 in (m, k, n):
        return None
    if ea.shape != batch + (m, 1) or eb.shape != batch + (1, n):
        return None
    cc = certificate.cert_constants(k)
    if k > certificate.LOWER_K_MAX or cc.factor <= 0:
        return None
    B = math.prod(batch)
    kp, n_p = _ceil(k, _BF16_ALIGN), _ceil(n, _BF16_ALIGN)
    a_t, a_d, nz_a = _sides(ar, ai, ea, B, m, k, m, kp, True)
    b_t, b_d, nz_b = _sides(br, bi, eb, B, k, n, kp, n_p, False)
    c_t, c_d = _bf16_gemm(a_t, b_t), _bf16_gemm(a_d, b_d)  # (B, m, n_p) each
    del a_t, a_d, b_t, b_d
    pl = cp.empty((B, m, n_p), dtype=cp.float32)
    bad = cp.zeros((1,), dtype=cp.uint32)
    grid = _grid(n_p, B * m)
    args = (c_t, c_d, _i64(n_p), _i32(B), _i32(m), _i32(n), nz_a, nz_b,
            cp.asarray(np.asarray(terms, dtype=np.float64)), np.float64(cc.factor),
            np.float64(cc.abs_term),
            pl, bad)  # fmt: skip
    _kernel("balance.cu", "balance_out")(grid, (_THREADS,), args)
    return not bool(bad.get()[0]), pl[..., :n].reshape(batch + (m, n))


# balance.cu's blocks per launch (a few waves of the H200's 132 SMs; any grid gives the same
# result): a block takes 1024 entries of a row (4 per thread), block rows every grid.y-th row
_BLOCKS = 132 * 16
_BLOCK_SPAN = 4 * _THREADS


def _grid(cols, rows):
    """balance.cu's grid for ``rows`` rows of ``cols`` entries."""
    gx = -(-cols // _BLOCK_SPAN)
    return (gx, max(1, min(rows, _BLOCKS // gx, _MAX_GRID_YZ)))


def _sides(re, im, e, B, R, C, Rpad, Cp, rows_are_lines):
    """balance.cu's sides of one operand (B, R, C): the bf16 bits of t and d (B, Rpad, Cp) and
    whether each line holds a nonzero t (int32)."""
    re3, im3 = (x.reshape((B, R, C)) for x in (re, im))
    t16 = cp.empty((B, Rpad, Cp), dtype=cp.uint16)
    d16 = cp.empty_like(t16)
    nonzero = cp.zeros((B * (R if rows_are_lines else C),), dtype=cp.int32)
    if _strides(re3) != _strides(im3):  # the kernel takes one set of strides for both parts
        re3, im3 = cp.ascontiguousarray(re3), cp.ascontiguousarray(im3)
    sb, sr, sc = _strides(re3)
    lines = cp.ascontiguousarray(e, dtype=cp.int64).reshape(-1)
    fn = _kernel("balance.cu", f"balance_sides<{_in_type(re3)}>")
    grid = _grid(Cp, B * Rpad)
    args = (re3, im3, _i64(sb), _i64(sr), _i64(sc), _i32(B), _i32(R), _i32(C), _i32(Rpad),
            _i32(Cp), _i32(rows_are_lines), lines, t16, d16, nonzero)  # fmt: skip
    fn(grid, (_THREADS,), args)
    return t16, d16, nonzero
