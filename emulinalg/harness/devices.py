"""The array families ``python -m emulinalg bench`` measures on (numpy, cupy, dask, and numpy
arrays on the AMX backend): moving host inputs there and back, timing a call, naming the device
and its native product, and saying why a family cannot run here."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulinalg import _extras

from . import board
from .machine import backend_env, blas, cpu_description

FAMILIES = ("numpy", "cupy", "dask", "amx")
# The module each family imports (the optional ones: _extras.EXTRAS names their extra).
MODULES = {"numpy": "numpy", "cupy": "cupy", "dask": "dask.array"}


@dataclass
class Device:
    """One array family as the harness sees it.

    ``put``/``get`` move host numpy arrays there and back (``get`` of a finished result);
    ``run(fn) -> (result, seconds)`` calls ``fn`` once with the result complete when the clock
    stops (device events on cupy; lazy dask graphs are computed inside); ``sync`` makes host
    clocks see device work (stage timings). ``int8_gemm(m, n, k)``, where the family has one:
    a function that runs one m x k by k x n INT8 GEMM of full-range operands as the backend's
    Scheme II products run theirs (the zero-overhead bound's unit). ``monitor()``, where the
    board can be read: a ``board.Monitor`` sampling its clock and power around timed runs.
    """

    family: str
    xp: Any
    put: Callable[[np.ndarray], Any]
    get: Callable[[Any], np.ndarray]
    run: Callable[[Callable[[], Any]], tuple[Any, float]]
    sync: Callable[[], object] | None
    description: str
    native: str
    int8_gemm: Callable[[int, int, int], Callable[[], Any]] | None = None
    monitor: Callable[[], Any] | None = None


def _wall(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _numpy_device(chunks):
    def run(fn):  # the numpy backend, also on CPUs where numpy arrays default to AMX
        with backend_env("numpy"):
            return _wall(fn)

    return Device(
        "numpy",
        np,
        np.asarray,
        np.asarray,
        run,
        None,
        cpu_description(),
        f"numpy.matmul (numpy {np.__version__}, BLAS: {blas()})",
    )


def _cupy_device(chunks):
    import cupy

    def run(fn):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return out, cupy.cuda.get_elapsed_time(start, end) / 1e3

    def sync():
        cupy.cuda.get_current_stream().synchronize()

    def int8_gemm(m, n, k):
        """One INT8 GEMM of full-range planes as the level's modular GEMMs see them (the fused
        kernel's INT32 epilogue where it runs, else cuBLAS: ``gemm._int8_products``)."""
        from emulinalg.backends.cupy.gemm import _int8_products
        from emulinalg.backends.cupy.kernels import _KP_ALIGN, _NP_ALIGN, _ceil

        rng = cupy.random.default_rng(0)
        pa = rng.integers(-128, 128, size=(1, 1, 1, m, _ceil(k, _KP_ALIGN)), dtype=cupy.int32)
        pb = rng.integers(-128, 128, size=(1, 1, 1, _ceil(n, _NP_ALIGN), _ceil(k, _KP_ALIGN)),
                          dtype=cupy.int32)  # fmt: skip
        pa, pb = pa.astype(cupy.int8), pb.astype(cupy.int8)
        return lambda: _int8_products(pa, pb)

    readings = board.reader(cupy.cuda.Device().pci_bus_id)
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    v = cupy.cuda.runtime.runtimeGetVersion()
    return Device(
        "cupy",
        cupy,
        cupy.asarray,
        cupy.asnumpy,
        run,
        sync,
        f"{name} (CUDA runtime {v // 1000}.{v % 1000 // 10})",
        f"cupy.matmul (cupy {cupy.__version__}, cuBLAS)",
        int8_gemm,
        None if readings is None else (lambda: board.Monitor(readings)),
    )


def _dask_device(chunks):
    import dask
    import dask.array as da

    def put(x):
        # Two blocks along every axis unless told otherwise, so the products really are graphs.
        return da.from_array(x, chunks=tuple(min(s, chunks or max(1, s // 2)) for s in x.shape))

    def run(fn):
        return _wall(lambda: np.asarray(fn().compute()))

    return Device(
        "dask",
        da,
        put,
        np.asarray,
        run,
        None,
        f"{cpu_description()}, dask {dask.__version__} (default scheduler)",
        f"dask.array.matmul (dask {dask.__version__})",
    )


def _amx_device(chunks):
    """numpy arrays on the AMX backend (``EMULINALG_AMX=1`` while a product runs, as
    ``python -m emulinalg grade --backend amx`` does); the native figures stay numpy's."""

    def run(fn):
        with backend_env("amx"):
            return _wall(fn)

    d = _numpy_device(chunks)
    d.family, d.run = "amx", run
    return d


DEVICES = {"numpy": _numpy_device, "cupy": _cupy_device, "dask": _dask_device, "amx": _amx_device}


def missing(family: str) -> str | None:
    """Why the array family cannot run here, or None when it can."""
    if family == "amx":
        from emulinalg.backends import amx

        return None if amx.usable() else f"AMX is not usable here: {amx.reason()}"
    module = MODULES[family]
    if module in _extras.EXTRAS:  # an optional family: the one line naming its extra
        hint = _extras.missing(module, needed_by=f"--backend {family}")
        if hint:
            return hint
    try:
        mod = importlib.import_module(module)
        if family == "cupy" and mod.cuda.runtime.getDeviceCount() < 1:
            return "cupy found no CUDA device"
    except Exception as exc:  # cupy without a driver
        return f"{module} is not usable here ({type(exc).__name__}: {exc})"
    return None
