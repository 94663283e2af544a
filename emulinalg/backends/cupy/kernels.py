"""The cupy backend's kernels: NVRTC compilation of ``src_cuda/``, launch helpers and the
operands as the kernels see them.

Every kernel is compiled at first use (cupy caches the binaries on disk) and kept per device in
``_modules``; ``EMULINALG_CUPY_KERNELS=0`` turns all of them off (``kernels_enabled``).
"""

from __future__ import annotations

import math

import cupy as cp
import numpy as np

from emulinalg import get_config

from .. import cuda as _cuda

_KP_ALIGN = 16  # int8 rows start 16-byte aligned: cuBLAS IMMA's vectorized loads
_NP_ALIGN = 4  # INT32 output rows 16-byte aligned (ldc, and the TN GEMM's m, multiple of 4)
# (and the statistics kernels read 4 entries of F per 16-byte load)
_BF16_ALIGN = 8  # bf16 rows 16-byte aligned
_MAX_GRID_YZ = 65535  # grid.y/z limit; the kernels loop over what lies beyond
_MAX_BATCH = 65535  # matrices per cuBLAS batched call, kept below the grid limit it may use
_THREADS = 256

_modules: dict = {}


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
    if fn is not None:
        return fn
    with _cuda.compile_lock(key):
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


def first_use(what):
    """The cupy backend's ``first_use``: ``backends.cuda.first_use`` of ``what`` on the current
    device (each device loads its own modules)."""
    return _cuda.first_use((cp.cuda.Device().id, *what))


def _strides(x):
    return tuple(s // x.itemsize for s in x.strides)


def _i32(v):
    return np.int32(v)


def _i64(v):
    return np.int64(v)


def _stats_kernel(expr):
    """Kernel ``expr`` of ``ozaki2_stats.cu``; one NVRTC module holds all its kernels."""
    dev = cp.cuda.Device().id
    fn = _modules.get((dev, "ozaki2_stats.cu", expr))
    if fn is not None:
        return fn
    with _cuda.compile_lock((dev, "ozaki2_stats.cu")):  # one module holds every kernel
        fn = _modules.get((dev, "ozaki2_stats.cu", expr))
        if fn is None:
            mod = _modules.get((dev, "ozaki2_stats.cu"))
            if mod is None:
                mod = cp.RawModule(
                    code=_cuda.source("ozaki2_stats.cu"),
                    options=("--std=c++17",),
                    name_expressions=_cuda.STATS_KERNELS,
                )
                _modules[(dev, "ozaki2_stats.cu")] = mod
            fn = _modules[(dev, "ozaki2_stats.cu", expr)] = mod.get_function(expr)
    return fn


def _tf(flag):
    return "true" if flag else "false"


def _in_type(x):
    """The kernels' operand type for ``x`` (float64 or float32: ``narrow_statistics``)."""
    return "float" if x.dtype == cp.float32 else "double"


_RESIDENT: dict = {}


def _resident(fn, threads):
    """How many blocks of kernel ``fn`` (``threads`` threads each, no dynamic shared memory) the
    device runs at once: its SMs times the blocks an SM holds by shared memory (1 KB reserved
    per block), registers and its block limit."""
    dev = cp.cuda.Device()
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


def _resident_blocks(expr, threads):
    """``_resident`` of ``ozaki2_stats.cu``'s kernel ``expr``."""
    _stats_kernel(expr)
    # the kernel itself (tools wrap the lookup)
    return _resident(_modules[(cp.cuda.Device().id, "ozaki2_stats.cu", expr)], threads)


def _interleaved(re, im, strides):
    """Whether the parts are a complex array's, interleaved: im one entry after re, every entry
    aligned to its pair (even element ``strides``). The kernels then load both parts of an
    entry at once (a complex array's parts are views at stride 2: one load each would take two
    accesses per entry, and entry by entry where chunks are copied)."""
    if im is None:
        return False
    size = re.itemsize
    return (im.data.ptr == re.data.ptr + size and im.strides == re.strides
            and re.data.ptr % (2 * size) == 0 and all(s % 2 == 0 for s in strides))  # fmt: skip


def _rows_contiguous(re, im, strides):
    """int32 1 where the kernels walk an operand's lines (the rows of the logical (B, R, C)
    operand with element ``strides``) along memory: their axis has stride 1, or 2 for a complex
    array's interleaved parts (``_interleaved``), and the contraction axis does not; else 0 (the
    kernels' loads then walk the contraction axis)."""
    _, sr, sc = strides
    unit = 2 if _interleaved(re, im, strides) else 1
    return _i32(sr == unit and sc != unit)


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
