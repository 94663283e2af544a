"""numpy backend: the CPU reference path (exact integer GEMMs through BLAS).

Integer GEMMs run in OpenBLAS on integer-valued floats, only while provably exact: float32 when
every partial sum stays below 2**24 (k-blocked to keep it so), float64 below 2**53. This is the
oracle the GPU and AMX kernels are tested against, not a fast path.
"""

from __future__ import annotations

import functools

import numpy as np

from emulinalg import get_config

# the refit's choice of entries by blocks of rows (the generic code's entries, fewer passes)
from .host_refit import refit_pick as refit_pick

name = "numpy"

_F32_EXACT = 2**24
_F64_EXACT = 2**53
_MIN_F32_BLOCK = 512  # below this a float32 block loop costs more than one float64 GEMM


def plan_note():
    """Why the amx backend is not running this product, for the plan: said on CPUs with AMX
    (where it is off or not usable) and when ``EMULINALG_AMX=1`` asked for it on a CPU without;
    "" on CPUs without AMX."""
    setting = get_config().amx
    if setting == "0":  # CPUID only: no tile-state request from a process that turned AMX off
        return "amx backend off (EMULINALG_AMX=0)" if _cpu_has_amx() else ""
    has_amx, usable, why = _amx_state()
    if usable or not (has_amx or setting == "1"):
        return ""
    return f"amx backend not usable: {why}"


@functools.cache
def _cpu_has_amx():
    try:
        from emulinalg import _cpu
    except ImportError:
        return False
    return bool(_cpu.features().get("amx_tile"))


@functools.cache
def _amx_state():
    """(CPU has AMX, AMX usable, why not): asked once per process."""
    try:
        from emulinalg import _amx
    except ImportError:
        return False, False, "emulinalg._amx is not built"
    return bool(_amx.features().get("amx_tile")), bool(_amx.available()), _amx.reason()


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


# OpenBLAS's GEMM kernels add the products of a K-block in one FMA chain and the blocks' sums
# into C, so beyond one block their rounding errors shrink like sqrt(block / k); the dtype's
# level asks as much of the emulation (``emulinalg.algorithm.certificate.native_error``; the
# figures are measured: docs/precision.md).
native_error_rms = 0.29
native_chain_k = 256
# Its complex GEMMs are more accurate per part: rms 0.153 at k = 256 (the modulus error's 0.216
# over sqrt 2), then as the real ones' chains (docs/benchmarks/ci-cpu/native_error_*.jsonl)
native_error_rms_complex = 0.15
# The generic Scheme II product and certificate take complex products modulo the Gaussian
# moduli: two integer GEMMs per modulus instead of 3M's three (``algorithm.moduli``)
gaussian_moduli = True
