"""The cupy backend's Scheme II product in the CUDA kernels of ``src_cuda/``: one pass from
float64 to the int8 residues of every modulus in the GEMM's layout (``ozaki2_residues.cu`` or
``ozaki2_residues_mma.cu``, ``RESIDUE_KERNEL``), one
strided-batched INT8 GEMM per K-block over all moduli (and batch, and 3M products), or the fused
CUTLASS GEMM with its mod-m epilogue (``backends.cuda.fused``), and one pass from the products
to the correctly rounded result (``ozaki2_crt.cu``): the same integers and the same exact
reconstruction as ``emulinalg.algorithm.products.product``, so bit-identical results. Complex
products take 3M's three GEMMs per modulus, or modulo the Gaussian moduli two (``gaussian``: the
residue kernels write the planes u = re + iota im and v = re - iota im, the CRT kernels combine
U and V into the parts).
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from emulinalg._precision import gemms_per_modulus
from emulinalg._timing import stage
from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import rounds_to_nearest

from .. import cuda as _cuda
from ..cuda import fused as _fused
from . import gemm as _gemm
from .gemm import _int8_products
from .kernels import (
    _KP_ALIGN,
    _MAX_GRID_YZ,
    _NP_ALIGN,
    _THREADS,
    _ceil,
    _i32,
    _i64,
    _kernel,
    _Operands,
    _resident,
    _rows_contiguous,
    _stats_kernel,
    _tf,
    kernels_enabled,
)

# Bytes of A residues and INT32 products held at once: larger row blocks are done in chunks of
# rows (B's residues are made once per call).
chunk_bytes = 6 << 30
# line_shifts' blocks (grid-stride over the lines; any count gives the same shifts)
_SHIFT_BLOCKS = 1024


# The residue kernels (both write the same planes for every input): "ozaki2_residues" (|X| in
# 16-bit words, one 32-bit reduction per modulus; 32 x 32 tiles, one per block) and
# "ozaki2_residues_mma" (|X| in digit bytes, one INT8 tensor-core MMA per 16 moduli x 8 entries;
# 16 x 64 tiles, as many blocks as fit at once, each walking every grid-th tile).
RESIDUE_KERNELS = ("ozaki2_residues", "ozaki2_residues_mma")


# The residue kernel the backend runs, for every source dtype and count: the tensor-core one (the
# word kernel stays beside it as its bit-for-bit twin: tests, ``kernel=``). On the H200
# (docs/benchmarks/h200/kernels_residues_2026-12-03.jsonl, planes bit-identical) it was 1.40x the
# word kernel at float64 N = 16384 with 15 moduli, 1.49x at float32 with 12, 2.0x with 8, 1.52x
# at complex128 N = 8192 with 16 and 1.97x at complex64 with 8 (its 8-moduli build used to
# reload its MMA fragment from constant memory before every MMA, 0.38x; a shuffle keeps it in a
# register now: src_cuda/ozaki2_residues_mma.cu).
RESIDUE_KERNEL = "ozaki2_residues_mma"


def _residue_planes(re, im, strides, rows, rows_pad, k, kp, shift, shift_sb, n, nearest,
                    kernel=None, gaussian=False):  # fmt: skip
    """int8 planes (P, n, B, rows_pad, kp) of the logical operand (B, rows, k) given by ``re``
    (and ``im``) with element ``strides``, lines scaled by ``shift`` (B lines of ``rows``, batch
    stride ``shift_sb``) and rounded to nearest (``nearest``) or toward zero, as
    ``scaling.scale_to_integers``, by ``kernel`` (one of ``RESIDUE_KERNELS``; default
    ``RESIDUE_KERNEL``). P: 1 (real), 3 (complex: re, im, re + im) or 2 (complex with
    ``gaussian``: u, v modulo the Gaussian moduli)."""
    kernel = kernel or RESIDUE_KERNEL
    B = re.shape[0]
    cplx = im is not None
    gauss = gaussian and cplx
    planes = cp.empty((_planes_per_modulus(cplx, gauss), n, B, rows_pad, kp), dtype=cp.int8)
    In = "float" if re.dtype == cp.float32 else "double"  # the kernels' In (default double)
    targs = f"{n}, {_tf(cplx)}, {_tf(nearest)}"
    targs += f", {In}, true" if gauss else (", float" if In == "float" else "")
    fn = _kernel(f"{kernel}.cu", f"{kernel}<{targs}>")
    sb, sr, sc = strides
    if kernel == "ozaki2_residues_mma":
        # tiles of 16 rows x 64 columns, each block every grid-th: as many blocks as fit at once
        tiles = B * -(-rows_pad // 16) * -(-kp // 64)
        if tiles == 0:
            return planes
        grid = (min(tiles, _resident(fn, _THREADS)),)
    else:
        grid = (-(-kp // 32), min(-(-rows_pad // 32), _MAX_GRID_YZ), min(B, _MAX_GRID_YZ))
    args = (
        re, im if cplx else re, _i64(sb), _i64(sr), _i64(sc),
        _i32(B), _i32(rows), _i32(k), _i32(rows_pad), _i32(kp),
        _rows_contiguous(re, im, strides), shift, _i64(shift_sb), planes,
    )  # fmt: skip
    fn(grid, (_THREADS,), args)
    return planes


def _planes_per_modulus(cplx, gaussian):
    """Residue planes per modulus: its INT8 GEMMs (``_precision.gemms_per_modulus``)."""
    return gemms_per_modulus(cplx, gaussian)


def _crt(prod, n, cplx, mu32, nu32, r0, outs, out_dtype, gaussian=False):
    """Rows r0.. of the outputs from the INT32 products of one chunk: ``ozaki2_crt.cu``.
    ``outs``: the (B, m, n) output arrays (hi[, lo] per part, in part order); ``gaussian``: the
    products are the Gaussian moduli's U and V."""
    nkb, _, _, B, mc, n_p = prod.shape
    m_full, ncols = outs[0].shape[-2:]
    nw = _cuda.crt_words(n)
    gauss = bool(gaussian and cplx)
    fn = _kernel(
        "ozaki2_crt.cu",
        f"ozaki2_crt<{n}, {nw}, {_tf(cplx)}{', true' if gauss else ''}>",
        tables=lambda: _cuda.crt_table_arrays(n, gauss),
    )
    o = _cuda.out_pointers(outs, out_dtype, cplx)
    rows = B * mc
    grid = (-(-ncols // 32), min(-(-rows // 8), _MAX_GRID_YZ))
    args = (
        prod, _i64(prod[0].size), _i32(nkb), _i64(B * mc * n_p),
        _i32(B), _i32(mc), _i32(ncols), _i32(n_p), _i32(m_full), _i32(r0),
        mu32, nu32, _i32(_cuda.OUT_KIND[out_dtype]), *o,
    )  # fmt: skip
    fn(grid, (32, 8), args)


def _shifts(prescale, c):
    """``scaling.ozaki2_shifts(cupy, prescale, c.L, c.Q_down)`` in one launch per side
    (``line_shifts`` of ``ozaki2_stats.cu``: its half_log_shift is the generic one, exact
    comparisons and all), int64 like the generic shifts; on the device, so the product waits for
    no host round trip (8 copies and the host's arithmetic left the GPU idle ~1 ms)."""
    out = []
    for s, v in zip(prescale[:2], prescale[2:]):
        s = cp.ascontiguousarray(s.astype(cp.int64, copy=False))
        v = cp.ascontiguousarray(v.astype(cp.float64, copy=False))
        shift = cp.empty(s.shape, dtype=cp.int64)
        if s.size:
            grid = (min(-(-s.size // _THREADS), _SHIFT_BLOCKS),)
            args = (s, v, _i64(s.size), np.float64(c.Q_down), shift)
            _stats_kernel("line_shifts")(grid, (_THREADS,), args)
        out.append(shift)
    return tuple(out)


def _chunking(B, m, n_p, kp, moduli, P):
    """(rows per chunk of A, bytes per row of A's chunk, whether the fused GEMM runs) of
    ``ozaki2_product``: A's residue planes and the chunk's products (INT8 residues from the fused
    GEMM, else INT32 per K-block) held at once stay below ``chunk_bytes``. The chunks are equal
    (to a multiple of 256 rows, the GEMM's tile, where that fits): a short last chunk is a GEMM
    of a few waves that leaves SMs idle."""
    fused_ok = kp <= _fused.MAX_K and _fused.available()
    nkb = -(-kp // _gemm._K_BLOCK)  # the K-blocks of _int8_products
    row_bytes = P * moduli * B * (kp + (-(-n_p // 16) * 16 if fused_ok else 4 * nkb * n_p))
    most = max(1, min(m, chunk_bytes // row_bytes))
    rows = -(-m // -(-m // most))  # as many chunks as ``most`` needs, equal
    tiled = -(-rows // 256) * 256
    return (tiled if tiled <= most else rows), row_bytes, fused_ok


def product_workspace(ar, ai, br, bi, moduli, gaussian=False):
    """Device bytes ``ozaki2_product`` allocates besides its inputs and outputs for these
    operands (``ar`` (..., m, k), ``br`` (..., k, n)): B's residue planes, made once, and one
    chunk of A's planes with its products (``_chunking``); None where it would decline."""
    if not kernels_enabled():
        return None
    B = 1
    for d in ar.shape[:-2]:
        B *= d
    m, k, n = ar.shape[-2], ar.shape[-1], br.shape[-1]
    kp, n_p = _ceil(k, _KP_ALIGN), _ceil(n, _NP_ALIGN)
    P = _planes_per_modulus(ai is not None, gaussian)
    rows, row_bytes, _ = _chunking(B, m, n_p, kp, moduli, P)
    return P * moduli * B * n_p * kp + rows * row_bytes


def ozaki2_product(ar, ai, br, bi, moduli, mode, out_dtype, prescale, gaussian=False):
    """Scheme II product in the CUDA kernels: same contract and bit-identical output as
    ``emulinalg.algorithm.products.product(cupy, int_matmul, ar, ai, br, bi, moduli, mode,
    out_dtype, prescale, gaussian=gaussian)`` (``gaussian``: a complex product modulo
    ``moduli.GAUSSIAN_MODULI``, two INT8 GEMMs per modulus).

    ``ar``/``br`` are float64 (or, all of them, float32: ``narrow_products``) cupy arrays
    (..., m, k)/(..., k, n), ``ai``/``bi`` the imaginary parts or None, ``prescale`` from
    ``scaling.ozaki2_prescale``; ``out_dtype`` is "float64", "float32" or "dd" (each part a
    (hi, lo) float64 pair, as ``rounding.unscale_dd``). Returns the tuple of parts, or None to
    decline (the caller then runs the generic path).
    """
    if not kernels_enabled() or out_dtype not in _cuda.OUT_KIND or prescale is None:
        return None
    if ar.dtype not in (cp.float64, cp.float32) or any(
        x is not None and x.dtype != ar.dtype for x in (ai, br, bi)
    ):
        return None
    cplx = ai is not None
    gaussian = bool(gaussian and cplx)
    c = crt_constants(moduli, gaussian)
    mu, nu = _shifts(prescale, c)
    ops = _Operands(ar, ai, br, bi, mu, nu)
    B, m, k, n, kp, n_p = ops.B, ops.m, ops.k, ops.n, ops.kp, ops.n_p
    P = _planes_per_modulus(cplx, gaussian)
    near = rounds_to_nearest(moduli, k, mode, gaussian)
    with stage("slicing"):
        pb = _residue_planes(
            ops.b[0], ops.b[1], ops.b_strides, n, n_p, k, kp, ops.nu, n, moduli, near,
            gaussian=gaussian,
        )
    dt = cp.float32 if out_dtype == "float32" else cp.float64
    per_part = 2 if out_dtype == "dd" else 1
    outs = [cp.empty((B, m, n), dtype=dt) for _ in range((2 if cplx else 1) * per_part)]
    # The fused CUTLASS GEMM (src_cuda/) writes INT8 residues: 1 byte per product entry, not 4
    # (complex: 3M's three products per modulus, or the Gaussian moduli's two, combined in the
    # CRT pass).
    rows, _, fused_ok = _chunking(B, m, n_p, kp, moduli, P)
    for r0 in range(0, m, rows):
        r1 = min(m, r0 + rows)
        a_re, a_im = (None if x is None else x[:, r0:r1] for x in ops.a)
        with stage("slicing"):
            pa = _residue_planes(
                a_re, a_im, ops.a_strides, r1 - r0, r1 - r0, k, kp, ops.mu[:, r0:], m, moduli, near,
                gaussian=gaussian,
            )  # fmt: skip
        with stage("products"):
            prod = _fused.int8_mod_products(pa, pb, moduli, gaussian) if fused_ok else None
            if prod is None:
                prod = _int8_products(pa, pb)
        del pa
        with stage("reconstruction"):
            if prod.dtype == cp.int8:
                _fused.crt_s8(prod, moduli, cplx, ops.mu, ops.nu, r0, outs, out_dtype, gaussian)
            else:
                _crt(prod, moduli, cplx, ops.mu, ops.nu, r0, outs, out_dtype, gaussian)
        del prod
    shape = ops.batch + (m, n)
    outs = [x.reshape(shape) for x in outs]
    if out_dtype == "dd":
        return tuple((outs[2 * p], outs[2 * p + 1]) for p in range(len(outs) // 2))
    return tuple(outs)
