"""Fused Scheme II INT8 GEMMs: the CUTLASS sm90a kernels of ``emulinalg._cuda`` (``src_cuda/``).

The cupy backend's Scheme II path writes every INT32 product to device memory (cuBLAS) and reads
it back in the CRT pass (``ozaki2_crt.cu``). Here one CUTLASS GEMM (TMA loads, int8 wgmma,
persistent warp-specialized schedule) over all moduli reduces the INT32 accumulator modulo m_l
in its epilogue and stores the symmetric residue as int8, and ``ozaki2_crt_s8.cu`` reconstructs
from those bytes: a quarter of the product traffic, the same integers, so the same bits.

- ``int8_mod_products(pa, pb, n, gaussian)``: the residue planes of the products (complex: 3M's
  three per modulus, or the Gaussian moduli's two), or None where the fused kernel does not
  apply (not built, no compute capability 9.0 device, K beyond 2**16, empty shapes); the caller
  then keeps the cuBLAS path.
- ``crt_s8(...)``: the CRT pass over those planes, with the arguments of
  ``emulinalg/backends/cupy/products.py``'s ``_crt``.
- ``int32_products(pa, pb)``: the same GEMM with an identity epilogue (INT32 out, cuBLAS's
  layout): the backend's other INT8 GEMMs (the prescale's bound GEMM, ``_int8_products``).

cupy is imported inside the functions, so this module imports anywhere (the CPU tests run
``crt_s8`` on a CPU stand-in for cupy). ``EMULINALG_FUSED=0`` in the environment turns the
fused path off.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from emulinalg import get_config
from emulinalg.algorithm.moduli import GAUSSIAN_MODULI, MODULI

from . import (
    OUT_KIND,
    compile_lock,
    crt_f64_table_arrays,
    crt_table_arrays,
    crt_words,
    out_pointers,
    source,
)

MAX_K = 1 << 16  # |r_a r_b| <= 2**14: exact INT32 sums, as the cuBLAS path's K-blocks
_ALIGN = 16  # TMA: 16-byte strides and rows of the int8 output
_MAX_GRID_Y = 65535
CRT_COLUMNS = 4  # ozaki2_crt_s8.cu's kCols: output columns per thread

# Tile configuration of emulinalg._cuda (src_cuda/gemm_s8_configs.cuh) and scheduler knobs;
# docs/benchmarks/tools/fused_bench.py measures them all. The cooperative 256x128 tile rastered
# along N with swizzle 4: within 1.5 % of the fastest of 36 at N = 16384 with 15 moduli and
# within 4 % at every swizzle along N (docs/benchmarks/h200/fused_sweep_2026-12-03.jsonl; the
# heuristic raster with swizzle 1 was 12 % slower; ping-pong 128x128 is 1.5 % faster along M
# but up to 1.6x slower along N).
config = 0
swizzle = 4
raster = 2  # 0: heuristic, 1: along M, 2: along N

_capable: dict = {}  # (cupy, device id) -> compute capability ("90")
_tables: dict = {}  # (cupy, device id, n, B, P, gaussian) -> device int32 moduli per batch index
_kernels: dict = {}  # (cupy, device id, expr) -> compiled CRT kernel


@cache
def _module():
    try:
        from emulinalg import _cuda
    except ImportError:
        return None
    return _cuda


def available() -> bool:
    """Whether the fused kernels can run: ``emulinalg._cuda`` was built (CUDA, CUTLASS headers at
    build time), cupy imports, the current device has compute capability 9.0 (the module holds
    sm_90a code only) and ``EMULINALG_FUSED`` is not "0"."""
    return not why_unavailable()


def why_unavailable() -> str:
    """Why the fused kernels cannot run here ("" where they can; ``available``)."""
    if not get_config().fused:
        return "EMULINALG_FUSED=0"
    if _module() is None:
        return "emulinalg._cuda is not built (CUDA and CUTLASS headers at build time)"
    try:
        import cupy as cp

        dev = cp.cuda.Device()
        key = (id(cp), dev.id)  # id(cp): never a CPU stand-in's answer for the real cupy
        if key not in _capable:
            _capable[key] = str(dev.compute_capability)
        cc = _capable[key]
    except Exception as e:
        return f"no CUDA device: {e}"
    return "" if cc == "90" else f"compute capability {cc[:-1]}.{cc[-1]}, the kernels are sm_90a"


def _moduli_table(cp, n, B, P=1, gaussian=False):
    """int32 device array: m_l for GEMM batch index (p * n + l) * B + b (the planes' order), of
    ``GAUSSIAN_MODULI`` with ``gaussian``."""
    key = (id(cp), cp.cuda.Device().id, n, B, P, gaussian)
    t = _tables.get(key)
    if t is None:
        mods = (GAUSSIAN_MODULI if gaussian else MODULI)[:n]
        t = cp.asarray(np.tile(np.repeat(np.asarray(mods, dtype=np.int32), B), P))
        # queued on the current stream; later GEMMs may run on another one
        cp.cuda.get_current_stream().synchronize()
        _tables[key] = t
    return t


def _planes_ok(cp, pa, pb):
    # device arrays only (the CPU tests drive emulinalg/backends/cupy/ with numpy stand-ins)
    if not (isinstance(pa, cp.ndarray) and isinstance(pb, cp.ndarray)):
        return False
    if pa.ndim != 5 or pb.ndim != 5 or pa.dtype != cp.int8 or pb.dtype != cp.int8:
        return False
    if pa.shape[:3] != pb.shape[:3] or pa.shape[-1] != pb.shape[-1]:
        return False
    if not (pa.flags.c_contiguous and pb.flags.c_contiguous):
        return False
    m, kp, n_p = pa.shape[-2], pa.shape[-1], pb.shape[-2]
    return min(pa.shape[1], pa.shape[2], m, kp, n_p) > 0 and kp % _ALIGN == 0


def int8_mod_products(pa, pb, moduli, gaussian=False):
    """INT8 residues of the products of the A planes (P, n, B, m, kp) and the B planes
    (P, n, B, n_p, kp) of ``emulinalg/backends/cupy/products.py``'s ``_residue_planes``: planes
    (P, n, B, m, ldc) whose entry (0, l, b, i, j), j < n_p, is symmetric((A B^T)[i, j] mod
    MODULI[l]) in [-(m_l // 2), (m_l - 1) // 2] (``moduli.symmetric_mod``); ldc is n_p rounded
    up to 16 (TMA rows), columns n_p.. are not written.

    One fused GEMM launch over all P * n * B matrices on the current stream (P = 3: complex
    3M's three products per modulus; ``gaussian``: P = 2, the planes u and v of the Gaussian
    moduli, reduced modulo ``GAUSSIAN_MODULI[l]``; both combined by ``crt_s8``). ``moduli`` is
    the count n of ``ozaki2_product`` (the planes must hold that many). Returns None, without
    launching anything, where the fused kernel does not apply: not ``available()``, kp > 2**16,
    or an empty or unexpected shape. Only for residue planes: other INT8 GEMMs of the backend (the
    prescale's bound operands) take ``int32_products``' INT32 sums.
    """
    if not available():
        return None
    import cupy as cp

    if not _planes_ok(cp, pa, pb) or pa.shape[0] not in ((2,) if gaussian else (1, 3)):
        return None
    P, n, B, m, kp = pa.shape
    if kp > MAX_K or moduli != n or n > len(MODULI):
        return None
    n_p = pb.shape[-2]
    ldc = -(-n_p // _ALIGN) * _ALIGN
    out = cp.empty((P, n, B, m, ldc), dtype=cp.int8)
    table = _moduli_table(cp, n, B, P, gaussian)
    _module().gemm_s8_mod_batched(
        pa.data.ptr, pb.data.ptr, out.data.ptr, m, n_p, kp, kp, kp, ldc, P * n * B,
        m * kp, n_p * kp, m * ldc, table.data.ptr, 1, cp.cuda.get_current_stream().ptr,
        config, swizzle, raster,
    )  # fmt: skip
    return out


def int32_products(pa, pb):
    """The fused kernel with its identity epilogue: INT32 products (P, n, B, m, n_p), the layout
    of one K-block of ``emulinalg/backends/cupy/gemm.py``'s ``_int8_products`` (all P planes; no K
    limit other than INT32 wrap-around). None where not available."""
    if not available():
        return None
    import cupy as cp

    if not _planes_ok(cp, pa, pb) or pb.shape[-2] % 4:
        return None
    P, n, B, m, kp = pa.shape
    n_p = pb.shape[-2]
    out = cp.empty((P, n, B, m, n_p), dtype=cp.int32)
    _module().gemm_s8_s32_batched(
        pa.data.ptr, pb.data.ptr, out.data.ptr, m, n_p, kp, kp, kp, n_p, P * n * B,
        m * kp, n_p * kp, m * n_p, cp.cuda.get_current_stream().ptr, config, swizzle, raster,
    )  # fmt: skip
    return out


def configs() -> list:
    """``emulinalg._cuda.config_info`` of every tile configuration (mod epilogue), [] without
    the module."""
    mod = _module()
    if mod is None:
        return []
    return [dict(mod.config_info(c, 1), index=c) for c in range(mod.num_configs)]


# ----------------------------------------------------------------------------------------------
# CRT from INT8 residues (ozaki2_crt_s8.cu, NVRTC)
# ----------------------------------------------------------------------------------------------


def _crt_kernel(cp, n, parts, gaussian=False):
    expr = f"ozaki2_crt_s8<{n}, {crt_words(n)}, {parts}{', true' if gaussian else ''}>"
    key = (id(cp), cp.cuda.Device().id, expr)  # id(cp): the CPU tests' stand-in keeps its own
    fn = _kernels.get(key)
    if fn is not None:
        return fn
    with compile_lock(key):
        fn = _kernels.get(key)
        if fn is None:
            # one program text: source() inlines ozaki2_crt.cu and the headers
            code = source("ozaki2_crt_s8.cu")
            mod = cp.RawModule(code=code, options=("--std=c++17",), name_expressions=(expr,))
            tables = {**crt_table_arrays(n, gaussian), **crt_f64_table_arrays(n, gaussian)}
            for sym, arr in tables.items():
                cp.ndarray(arr.shape, arr.dtype, memptr=mod.get_global(sym)).set(arr)
            # The copies are queued on the current stream; kernels may run on any other one.
            cp.cuda.runtime.deviceSynchronize()
            fn = mod.get_function(expr)
            _kernels[key] = fn
    return fn


def crt_s8(res, n, cplx, mu32, nu32, r0, outs, out_dtype, gaussian=False):
    """Rows r0.. of the outputs from the INT8 residue planes ``res`` (NP, n, B, mc, ldr) of one
    chunk (complex: NP = 2, the Re and Im residues, or with ``gaussian`` the Gaussian moduli's
    U and V, or NP = 3, 3M's three products as ``int8_mod_products`` gives them):
    ``ozaki2_crt_s8.cu``. Arguments and result as
    ``emulinalg/backends/cupy/products.py``'s ``_crt`` (``outs``: the (B, m, n) output arrays,
    hi[, lo] per part, in part order); bit-identical to it on the same products."""
    import cupy as cp

    NP, nmod, B, mc, ldr = res.shape
    parts = ((2,) if gaussian else (2, 3)) if cplx else (1,)
    if nmod != n or NP not in parts or res.dtype != cp.int8:
        raise ValueError("crt_s8: planes do not match the moduli / parts")
    m_full, ncols = outs[0].shape[-2:]
    fn = _crt_kernel(cp, n, NP, bool(gaussian and cplx))
    o = out_pointers(outs, out_dtype, cplx)
    rows = B * mc
    grid = (-(-ncols // (32 * CRT_COLUMNS)), min(-(-rows // 8), _MAX_GRID_Y))
    args = (
        res, np.int64(B * mc * ldr), np.int32(B), np.int32(mc), np.int32(ncols), np.int32(ldr),
        np.int32(m_full), np.int32(r0), mu32, nu32, np.int32(OUT_KIND[out_dtype]), *o,
    )  # fmt: skip
    fn(grid, (32, 8), args)
