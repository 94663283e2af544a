"""The cupy backend's GEMMs in cuBLAS: the exact integer GEMM (``int_matmul``: INT8 inputs,
INT32 accumulation, ``CUBLAS_COMPUTE_32I``, through cupy's handle and current stream), the
strided-batched INT8 products of the Scheme II kernels (in the fused CUTLASS kernel where it
applies: ``emulinalg.backends.cuda.fused``), and the certificate's bfloat16 GEMM
(``magnitude_lower_matmul``).
"""

from __future__ import annotations

import functools
import math

import cupy as cp
import numpy as np
from cupy.cuda import cublas

from emulinalg.algorithm import certificate
from emulinalg.backends.cuda import fused

from .kernels import (
    _BF16_ALIGN,
    _MAX_BATCH,
    _MAX_GRID_YZ,
    _THREADS,
    _ceil,
    _i32,
    _i64,
    _kernel,
    _strides,
    kernels_enabled,
)

_R_8I, _R_32I = 3, 10  # cudaDataType CUDA_R_8I, CUDA_R_32I
_COMPUTE_32I = getattr(cublas, "CUBLAS_COMPUTE_32I", 72)
_GEMM_DEFAULT = -1
_OP_N, _OP_T = 0, 1
_ONE = np.array(1, dtype=np.int32)
_ZERO = np.array(0, dtype=np.int32)
# |v_a v_b| <= 2**14 for int8 operands: INT32 sums stay exact below 2**17 terms.
_K_BLOCK = 1 << 16
_R_16BF, _R_32F = 14, 0  # cudaDataType CUDA_R_16BF, CUDA_R_32F
_COMPUTE_32F = getattr(cublas, "CUBLAS_COMPUTE_32F", 68)
_ONE_F32 = np.array(1, dtype=np.float32)
_ZERO_F32 = np.array(0, dtype=np.float32)


def k_block(k, term_bound):
    """K-block of the INT32 GEMMs (None when one pass is exact)."""
    return None if k <= _K_BLOCK else _K_BLOCK


def _ceil4(n):
    return (n + 3) // 4 * 4


def gemm_s8(a8, b8):
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
        part = gemm_s8(va[:, k0 : k0 + _K_BLOCK], vb[k0 : k0 + _K_BLOCK]).astype(cp.float64)
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


def _int8_products(pa, pb):
    """INT32 products (nkb, P, n, B, m, n_p) of the A planes (P, n, B, m, kp) and the B planes
    (P, n, B, n_p, kp), exact (|r_a r_b| <= 2**14 per term, at most ``_K_BLOCK`` terms per
    K-block): the fused kernel's identity epilogue where it applies (one K-block; the same
    integers as cuBLAS, faster: docs/performance.md), else ``_cublas_int8_products``."""
    if pa.shape[-1] <= _K_BLOCK:
        try:
            out = fused.int32_products(pa, pb)
        except RuntimeError:  # the kernel refused these arguments (nothing ran): cuBLAS does
            out = None
        if out is not None:
            return out[None]
    return _cublas_int8_products(pa, pb)


def _cublas_int8_products(pa, pb):
    """``_int8_products`` in cuBLAS: one strided-batched INT8 "TN" GEMM per K-block of at most
    ``_K_BLOCK`` columns, over all planes."""
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


def magnitude_lower_matmul(xa, xb):
    """Certified lower bound ``L <= xa @ xb`` (elementwise, exact arithmetic) for non-negative
    float64 ``xa`` (..., m, k) and ``xb`` (..., k, n) with entries <= 2, as one bfloat16
    tensor-core GEMM.

    The entries are truncated toward zero to bfloat16 (``bf16_lower.cu``), multiplied by cuBLAS
    (``CUDA_R_16BF`` inputs, FP32 output, ``CUBLAS_COMPUTE_32F``), and the FP32 sums scaled by
    ``1 - (k + 2) 2**-22`` in float64: every term is >= 0, so truncation only lowers the sum and
    the factor covers the accumulation's rounding in any rounding mode (0 where it is <= 0).
    Operands of either sign are truncated toward zero too (``certificate.signed_estimate``).
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
    return _scaled_sums()(c[..., :n], factor).reshape(batch + (m, n))


@functools.cache
def _scaled_sums():
    """float64(c) * factor of FP32 sums, rounded once: one pass (astype, then a product, is two)."""
    return cp.ElementwiseKernel(
        "float32 c, float64 f", "float64 out", "out = __dmul_rn((double)c, f)",
        "emulinalg_scaled_sums",
    )


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
