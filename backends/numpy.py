"""numpy backend: the CPU reference path (exact integer GEMMs through BLAS).

Integer GEMMs run in OpenBLAS on integer-valued floats, only while provably exact: float32 when
every partial sum stays below 2**24 (k-blocked to keep it so), float64 below 2**53. This is the
oracle the GPU and AMX kernels are tested against, not a fast path.
"""

from __future__ import annotations

import functools
import os

import numpy as np

name = "numpy"

_F32_EXACT = 2**24
_F64_EXACT = 2**53
_MIN_F32_BLOCK = 512  # below this a float32 block loop costs more than one float64 GEMM


@functools.cache
def plan_note():
    """Why the amx backend is not running this product, for the plan: said on CPUs with AMX
    (not opted in) and when ``EMULINALG_AMX=1`` asked for it but it is not usable; "" on CPUs
    without AMX. Computed once per process."""
    try:
        from emulinalg import _amx
    except ImportError:
        return ""
    cpu_has_amx = bool(_amx.features().get("amx_tile"))
    if os.environ.get("EMULINALG_AMX") == "1":
        return "" if _amx.available() else f"amx backend requested but not usable: {_amx.reason()}"
    if not cpu_has_amx:
        return ""
    return (
        "amx backend not selected (EMULINALG_AMX=1 opts in; on the 16-core AMX host its levels "
        "measured slower than native: docs/benchmarks/xeon-amx-16c/NOTES.md)"
    )


def k_block(k, term_bound):
    """K-block size used for an integer GEMM with this inner dimension and term bound, or None
    when one pass is exact."""
    if k * term_bound < _F32_EXACT:
        return None
    kb = (_F32_EXACT - 1) // term_bound
    if kb >= _MIN_F32_BLOCK:
        return kb
    if k * term_bound < _F64_EXACT:
        return None
    return (_F64_EXACT - 1) // term_bound


def int_matmul(a, b, term_bound):
    """Exact ``a @ b`` for integer-valued float arrays with ``|a_ih b_hj| <= term_bound``."""
    k = a.shape[-1]
    if k * term_bound < _F32_EXACT:
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float64)
    kb = k_block(k, term_bound)
    if kb is None:  # one float64 pass is exact
        return np.matmul(a, b)
    if k * term_bound >= _F64_EXACT:  # block sums would no longer add exactly in float64
        raise ValueError(f"inner dimension {k} too large for exact float64 accumulation")
    dt = np.float32 if kb * term_bound < _F32_EXACT and kb >= _MIN_F32_BLOCK else np.float64
    out = None
    for k0 in range(0, k, kb):
        part = np.matmul(a[..., k0 : k0 + kb].astype(dt), b[..., k0 : k0 + kb, :].astype(dt))
        out = part.astype(np.float64) if out is None else out + part  # exact: total < 2**53
    return out


def quiet():
    """Overflow/underflow inside the schemes is expected (it rounds to inf/0 like native)."""
    return np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore")


def native_matmul(a, b):
    return np.matmul(a, b)

