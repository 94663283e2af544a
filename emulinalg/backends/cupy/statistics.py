"""The cupy backend's Scheme II statistics in the kernels of ``src_cuda/ozaki2_stats.cu``: the
line scan (NaN/Inf check and line exponents), the accurate-mode prescale (the bound operands,
their INT8 GEMM F and its row and column maxima: ``scaling.ozaki2_prescale``'s values) and the
line passes the certificate reads (``certificate.py``).
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from emulinalg.algorithm.scaling import Prescale

from .gemm import _int8_products
from .kernels import (
    _MAX_GRID_YZ,
    _THREADS,
    _i32,
    _i64,
    _in_type,
    _interleaved,
    _Operands,
    _resident_blocks,
    _rows_contiguous,
    _stats_kernel,
    _tf,
    kernels_enabled,
)

# Columns per block of the line passes that reduce along k (a multiple of the 32-column tile):
# the sums over a line are taken chunk by chunk, in order, then the chunks in order.
_STAT_CHUNK = 512
# bound_operand's grid: one warp per block, each with an equal share of the 128-column chunks
# (any count >= 1 gives the same results). None: every block the device holds at once
# (_resident_blocks), so that all shares run side by side; the CPU tests set small counts.
_BOUND_WARPS = None
# bound_max's grid over F (128 columns by row chunks; any grid gives the same results): rows per
# block. Each thread streams its rows through a ring in shared memory, so longer chunks spread
# the ring's start over more rows.
_BOUND_MAX_ROWS = 256
_INT_MIN = -(2**31)


def _line_args(re, im, strides):
    sb, sr, sc = strides
    return (re, re if im is None else im, _i64(sb), _i64(sr), _i64(sc))


def _chunk_aligned(re, im, strides):
    """How bound_operand may copy 16-byte chunks along the operand's contiguous axis (as
    ``_rows_contiguous`` picks it): 1 where that axis has stride 1 and the parts' addresses and
    the other strides are multiples of 16 bytes; 2 where the parts are interleaved
    (``_interleaved``: the axis at stride 2) and the chunks of pairs so aligned; else 0."""
    sb, sr, sc = strides
    e = 16 // re.itemsize
    inner, outer = (sr, sc) if _rows_contiguous(re, im, strides) else (sc, sr)
    ptrs = [x.data.ptr for x in (re, im) if x is not None]
    aligned = outer % e == 0 and sb % e == 0 and ptrs[0] % 16 == 0
    if inner == 2 and _interleaved(re, im, strides):
        return 2 if aligned else 0
    return 1 if inner == 1 and aligned and all(p % 16 == 0 for p in ptrs) else 0


def _line_grid(cols, chunk, rows, B):
    return (-(-cols // chunk), min(-(-rows // 32), _MAX_GRID_YZ), min(B, _MAX_GRID_YZ))


def _line_max_exponent(re, im, strides, B, R, C):
    """int32 (B, R): floor(log2 max |x|) per line of the logical (B, R, C) operand, INT_MIN for a
    zero line."""
    emax = cp.full((B, R), _INT_MIN, dtype=cp.int32)
    fn = _stats_kernel(f"line_max_exponent<{_in_type(re)}, {_tf(im is not None)}>")
    args = _line_args(re, im, strides) + (
        _i32(B), _i32(R), _i32(C), _rows_contiguous(re, im, strides), _i32(_STAT_CHUNK),
        _i32(_interleaved(re, im, strides)), emax,
    )  # fmt: skip
    fn(_line_grid(C, _STAT_CHUNK, R, B), (_THREADS,), args)
    return emax


def line_scan(ar, ai, br, bi, prepare=False):
    """The engine's NaN/Inf check fused with the first pass of the Scheme II statistics: one
    pass per operand (``line_max_exponent``) gives floor(log2 max |x|) of every row of A and
    column of B, int32 (B, m) and (B, n) (INT_MIN for a zero line, 1024 for a line holding NaN
    or Inf: their exponent field is all ones). Returns ``(finite, exponents)``, the exponents
    for ``ozaki2_prescale(..., exponents=...)``, or None to decline (the engine's own check
    runs): operands the kernels do not take.

    ``prepare``: the engine's statistics follow (a precision level): the prescale's host work
    before its first launch (allocations, arguments: about 0.1 ms) is done here while the line
    passes run on the device, and travels with the exponents (``_Exponents.prep``)."""
    if not _usable(ar, ai, br, bi):
        return None
    ops = _Operands(ar, ai, br, bi)
    B, m, k, n = ops.B, ops.m, ops.k, ops.n
    if 0 in (B, m, k, n):
        return None
    ea, eb = _line_exponents(ops)
    top = cp.maximum(ea.max(), eb.max())
    exponents = _Exponents((ea, eb))
    if prepare:
        exponents.prep = _PrescalePrep(ops, (ar, ai, br, bi), ea, eb)
    return int(cp.asnumpy(top)) < 1024, exponents  # one read-back for both


class _Exponents(tuple):
    """``line_scan``'s exponents ``(ea, eb)``; ``prep``: the prescale's first launches prepared
    for the same operands (``_PrescalePrep``), or None."""

    prep = None


class _PrescalePrep:
    """The accurate prescale's work before its first launch: the zeroed targets of its atomics
    and both operands' ``bound_operand`` launches (``_BoundLaunch``), for the operands
    ``hook_ops`` (kept to check that the prescale is called with the same arrays)."""

    def __init__(self, ops, hook_ops, ea, eb):
        self.ops, self.hook_ops = ops, hook_ops
        B, m, k, n, kp, n_p = ops.B, ops.m, ops.k, ops.n, ops.kp, ops.n_p
        # one zeroed buffer (one launch) for the atomics' targets: both operands' line terms
        # and the row and column maxima of the bound
        zeroed = cp.zeros((4 * B * (m + n),), dtype=cp.uint64)
        ta, tb = zeroed[: 3 * B * m], zeroed[3 * B * m : 3 * B * (m + n)]
        self.ua = zeroed[3 * B * (m + n) : 3 * B * (m + n) + B * m].reshape(B, m)
        self.ub = zeroed[-B * n :].reshape(B, n)
        self.a = _BoundLaunch(*ops.a, ops.a_strides, B, m, m, k, kp, ea, ta.reshape(3, B, m))
        self.b = _BoundLaunch(*ops.b, ops.b_strides, B, n, n_p, k, kp, eb, tb.reshape(3, B, n))

    def matches(self, ar, ai, br, bi):
        return all(x is y for x, y in zip(self.hook_ops, (ar, ai, br, bi)))


def _line_exponents(ops):
    """``_line_max_exponent`` of A's rows and B's columns of ``_Operands`` ``ops``."""
    B, m, k, n = ops.B, ops.m, ops.k, ops.n
    return (
        _line_max_exponent(*ops.a, ops.a_strides, B, m, k),
        _line_max_exponent(*ops.b, ops.b_strides, B, n, k),
    )


def _bound_planes(re, im, strides, B, R, Rpad, C, Cp, emax, terms=None):
    """The shifts s (int64 (B, R)), the int8 bound operand floor(2**(s+1) |x|) as one plane set
    (1, 1, B, Rpad, Cp) for ``_int8_products``, its line sums, nonzero parts and entries with
    both parts nonzero (uint64 (B, R), added into ``terms`` (3, B, R), zeroed, when given) and
    the l1 and l2 partials (2, B, ceil(Cp / 128), R) of the normalized operand (sums, and sums
    of squares)."""
    return _BoundLaunch(re, im, strides, B, R, Rpad, C, Cp, emax, terms)()


class _BoundLaunch:
    """``_bound_planes``' launch of ``bound_operand``, its outputs allocated and its arguments
    made; calling it launches the kernel and returns ``_bound_planes``' result."""

    def __init__(self, re, im, strides, B, R, Rpad, C, Cp, emax, terms=None):
        shift = cp.empty((B, R), dtype=cp.int64)
        planes = cp.empty((1, 1, B, Rpad, Cp), dtype=cp.int8)
        if terms is None:
            terms = cp.zeros((3, B, R), dtype=cp.uint64)
        sums, nz, mixed = terms  # mixed (complex): entries with both parts nonzero
        partial = cp.empty((2, B, -(-Cp // 128), R), dtype=cp.float64)
        expr = f"bound_operand<{_in_type(re)}, {_tf(im is not None)}>"
        self.fn = _stats_kernel(expr)
        chunks = B * -(-Rpad // 32) * -(-Cp // 128)  # the kernel's units of work
        warps = _BOUND_WARPS or _resident_blocks(expr, 32)
        self.grid = (max(1, min(chunks, warps)),)
        self.args = _line_args(re, im, strides) + (
            _i32(B), _i32(R), _i32(C), _i32(Rpad), _i32(Cp), _rows_contiguous(re, im, strides),
            _i32(_chunk_aligned(re, im, strides)), emax, shift, planes, sums, nz, mixed, partial,
        )  # fmt: skip
        self.out = (shift, planes, sums, nz, mixed, partial)

    def __call__(self):
        self.fn(self.grid, (32,), self.args)
        out, self.out, self.args = self.out, None, None  # one launch; no references kept
        return out


class _Bound:
    """``Prescale.lower`` of this backend: the bound GEMM's sums F (B, m, n_p) (int32, int64
    when K was blocked), the l1 and l2 partials of both operands and their ``mixed_lines`` counts
    (B, m), (B, n) for the certificate."""

    def __init__(self, F, pa, pb, ma, mb):
        self.F, self.pa, self.pb, self.ma, self.mb = F, pa, pb, ma, mb


def _f_type(F):
    return "int" if F.dtype == cp.int32 else "long long"


def _usable(ar, ai, br, bi):
    """Whether the statistics kernels take these operands: all float64, or all float32
    (``narrow_statistics``)."""
    if not kernels_enabled():
        return False
    dts = {x.dtype for x in (ar, ai, br, bi) if x is not None}
    return dts == {np.dtype(np.float64)} or dts == {np.dtype(np.float32)}


def ozaki2_prescale(ar, ai, br, bi, mode, exponents=None):
    """``emulinalg.algorithm.scaling.ozaki2_prescale(cupy, int_matmul, ar, ai, br, bi, mode)``
    in the kernels of ``ozaki2_stats.cu``: same ``(s, t, e, f)``, dtypes and values (all
    exact), or None to decline ("fast" mode is left to the generic code).

    accurate: one pass per operand for the line exponents, one writing the int8 bound operand
    floor(2**(s+1) |x|) in the INT8 GEMM's layout with its line terms (sums, nonzero counts,
    norms' partials), one cuBLAS INT8 GEMM F (INT32 out, exact: terms are <= 127 * 127), and
    one pass over F for the row and column maxima of U (``scaling.bound_upper``). ``lower``
    keeps F and the norms' partials for ``ozaki2_certificate``. ``exponents``: ``line_scan``'s
    for these operands (finite), which saves the first pass.
    """
    prep = getattr(exponents, "prep", None)
    if prep is not None:  # taken once, used or not (its buffers are not kept past this call)
        exponents.prep = None
    if mode != "accurate" or not _usable(ar, ai, br, bi):
        return None
    if prep is None or not prep.matches(ar, ai, br, bi):
        ops = _Operands(ar, ai, br, bi)
        if 0 in (ops.B, ops.m, ops.k, ops.n):
            return None
        ea, eb = _line_exponents(ops) if exponents is None else exponents
        prep = _PrescalePrep(ops, (ar, ai, br, bi), ea, eb)
    ops, ua, ub = prep.ops, prep.ua, prep.ub
    B, m, n, n_p = ops.B, ops.m, ops.n, ops.n_p
    s, pa, ra, nza, ma, la = prep.a()
    t, pb, cb, nzb, mb, lb = prep.b()
    del prep
    prod = _int8_products(pa, pb)  # (nkb, 1, 1, B, m, n_p)
    del pa, pb
    F = prod[0] if prod.shape[0] == 1 else prod.sum(axis=0, dtype=cp.int64)
    F = F.reshape(B, m, n_p)
    grid = (-(-n // 128), min(-(-(B * m) // _BOUND_MAX_ROWS), _MAX_GRID_YZ))
    rows_per_block = -(-(B * m) // grid[1])
    args = (F, _i64(n_p), _i32(B), _i32(m), _i32(n), _i32(rows_per_block), ra, nza, cb, nzb,
            _i64(2 if ops.a[1] is not None else 1), ua, ub)  # fmt: skip
    _stats_kernel(f"bound_max<{_f_type(F)}>")(grid, (32, 8), args)
    e = ua * 0.25  # float64 (one kernel: the conversion and the exact scaling)
    f = ub * 0.25
    batch = ops.batch
    return Prescale(
        s.reshape(batch + (m,)), t.reshape(batch + (n,)),
        e.reshape(batch + (m,)), f.reshape(batch + (n,)),
        lower=_Bound(F, la, lb, ma, mb),
        mixed=None if ops.a[1] is None else (ma.reshape(batch + (m,)), mb.reshape(batch + (n,))),
    )  # fmt: skip


def _cert_operand(re, im, strides, B, R, Rpad, C, Cp, k_major, shift):
    """bf16 magnitudes (B, Rpad, Cp) (or (B, Cp, Rpad) when ``k_major``) of the line-normalized
    operand, truncated toward zero (its l1 partials are not used: the prescale has them);
    float64 operands only (the kernel's type)."""
    if re.dtype != cp.float64:
        raise TypeError("internal: cert_operand reads float64 operands")
    chunks = -(-Cp // _STAT_CHUNK)
    out = cp.empty((B, Cp, Rpad) if k_major else (B, Rpad, Cp), dtype=cp.uint16)
    partial = cp.empty((B, chunks, R), dtype=cp.float64)
    sh = cp.ascontiguousarray(shift.reshape(B, R).astype(cp.int64, copy=False))
    fn = _stats_kernel(f"cert_operand<{_tf(im is not None)}>")
    args = _line_args(re, im, strides) + (
        _i32(B), _i32(R), _i32(C), _i32(Rpad), _i32(Cp), _rows_contiguous(re, im, strides),
        _i32(k_major), _i32(_STAT_CHUNK), sh, partial, out,
    )  # fmt: skip
    fn(_line_grid(Cp, _STAT_CHUNK, Rpad, B), (_THREADS,), args)
    return out
