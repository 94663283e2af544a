"""cupy backend: the schemes' integer GEMMs on INT8 tensor cores through cuBLAS.

``int_matmul`` turns the integer-valued operands into int8 and calls ``cublasGemmEx`` (INT8
inputs, INT32 accumulation, ``CUBLAS_COMPUTE_32I``) through cupy's handle and current stream.
Everything else (scaling, residues, CRT, rounding) is the shared Array API code running on
cupy arrays, so the result equals the numpy reference bit for bit for the same scheme. The
fused kernels of ``src_cuda/`` will slot in behind the same ``int_matmul``/scheme surface.
"""

from __future__ import annotations

import contextlib

import cupy as cp
import numpy as np
from cupy.cuda import cublas

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


def emulation_faster(request, m, n, k, batch):
    """Not yet: the unfused path round-trips every product through memory (issue: fused
    Hopper kernels). ``strategy="eager"`` emulates anyway."""
    return False
