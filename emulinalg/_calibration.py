"""The cost model on the device it runs on: a short calibration of its rates, cached.

The built-in cupy and amx models (``_cost``) were each fitted on one device
(``_cost.FITTED_ON``). On any other GPU, and on every AMX host (CPUs of one model run their AMX
GEMMs at rates up to 2.3x apart from one cloud host to another), the first product that asks the
cost model measures the device here (``measure``: the native GEMM's flop/s per dtype, the INT8
GEMM's rate, a bandwidth: a device copy's, the residue pack's on AMX; about a second), moves the
fitted model to those rates (``_cost.for_device``) and caches the rates on disk per device and
library version (``cache_path``: the user cache directory of platformdirs), so later processes
read them.
Products too small for the emulation to win on any host of the backend (``MEASURE_MIN_FLOPS``)
do not measure a device that has no rates yet. ``python -m emulinalg calibrate`` measures
explicitly (and rewrites the cache); ``emulinalg.set_cost_model`` overrides all of it; the
plan's verdict line names the model's source.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
import threading
import time

from . import _cost

_MEMO: dict = {}  # (backend, device) -> CostModel, per process
_LOCK = threading.Lock()
N_NATIVE = 4096  # square sizes of the timed GEMMs: big enough to run at the device's rate
N_INT8 = 8192
COPY_BYTES = 1 << 28
# The amx backend's sizes: OpenBLAS/MKL reach their rate from N ~ 2048 on 16 cores, and the mod
# GEMM of one modulus at 4096 runs ~10 ms (long enough to time, short enough for a first call)
N_NATIVE_CPU = 2048
N_INT8_CPU = 4096
# What ``measure`` times, in the cache's file name: rates an earlier form measured differently
# (r1: the INT8 rate of a cuBLAS GEMM with padding copies; r2: an AMX host's medians of 3) are
# measured again
RATES_FORMAT = "r3"
# Backends whose device name does not pin its rates: measured even on the fitted device's name
MEASURE_SAME_NAME = {"amx"}
# 2 m n k below which a product does not start a device's measurement (the built-in model
# decides it): the amx level measured 0.32-0.57x numpy at N = 2048 on two starts of the host
MEASURE_MIN_FLOPS = {"amx": 2.0 * 2048**3}


def cache_dir():
    """The directory of the cached rates (platformdirs' user cache directory)."""
    import platformdirs

    return platformdirs.user_cache_dir("emulinalg")


def cache_path(backend_name, device):
    """The cache file of a backend's rates on ``device`` for this library version."""
    from . import __version__

    slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower()
    return os.path.join(cache_dir(),
                        f"rates-{backend_name}-{slug}-{__version__}-{RATES_FORMAT}.json")


_NAMES: dict = {}  # GPU id -> name; "amx" -> the CPU's (None: AMX not usable)
_UNMEASURED: set = set()  # (backend, device) with no cached rates, left unmeasured so far
_MEASURING: set = set()  # (backend, device) being measured now (small products do not wait)


def cpu_model():
    """The CPU's model name (/proc/cpuinfo's, else the platform's)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            names = (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
            model = next(names, "")
    except OSError:
        model = ""
    return model or platform.processor() or platform.machine()


def device_name(backend_name):
    """The current device of a backend, or None: "cupy", the current GPU's name; "amx", the
    CPU model and the OpenMP threads its kernels run on, where AMX is usable."""
    if backend_name == "amx":
        if "amx" not in _NAMES:
            name = None
            try:
                from .backends import amx

                if amx.usable():
                    threads = amx._module().features()["max_threads"]
                    name = f"{cpu_model()} ({threads} threads)"
            except Exception:  # no usable AMX: the built-in model stands
                pass
            _NAMES["amx"] = name
        return _NAMES["amx"]
    if backend_name != "cupy":
        return None
    try:
        import cupy as cp

        dev = cp.cuda.Device().id
        if dev not in _NAMES:
            name = cp.cuda.runtime.getDeviceProperties(dev)["name"]
            _NAMES[dev] = name.decode() if isinstance(name, bytes) else name
        return _NAMES[dev]
    except Exception:  # no GPU, no driver: the built-in model stands
        return None


def _median_seconds(fn, repeat=3):
    import cupy as cp

    fn()  # warm-up (cuBLAS heuristics, allocation)
    times = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return sorted(times)[len(times) // 2]


def _fastest_wall(fn, repeat=5):
    # The fastest, not the median: a host's shared vCPUs and other jobs only ever add time, and
    # the rates are taken as ratios to the fitted host's, measured the same way.
    fn()  # warm-up (thread team, first touch of the output)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(backend_name="cupy"):
    """``_cost.DeviceRates`` of the current device, measured.

    "cupy": cuBLAS's GEMM per dtype at N_NATIVE, the INT8 GEMM the schemes run
    (``backends.cupy.gemm._int8_products`` on one pair of full-range residue planes: the fused
    kernel where it runs, else cuBLAS) at N_INT8, and a device copy of COPY_BYTES. "amx":
    numpy.matmul per dtype at N_NATIVE_CPU (the native product numpy users get), one modulus's
    mod-reducing tile GEMM (``_amx.ozaki2_multiply`` on packed panels; the faster K chunk, as
    products choose) at N_INT8_CPU, and as the bandwidth the bytes of the residue pack
    (``_amx.ozaki2_pack``: float64 operands read, two moduli's panels written) per second.
    Each time is the median of 3 CUDA-event timings after a warm-up on a GPU, the fastest of 5
    wall times after a warm-up on an AMX host.

    Raises
    ------
    ValueError
        For a backend other than "cupy" and "amx" (the numpy backend keeps its fitted model).
    RuntimeError
        "amx" where AMX is not usable here."""
    if backend_name == "amx":
        return _measure_amx()
    if backend_name != "cupy":
        raise ValueError(f"calibration measures GPUs (cupy) and AMX hosts (amx), not "
                         f"{backend_name!r}")  # fmt: skip
    import cupy as cp

    from .backends.cupy.gemm import _int8_products

    rng = cp.random.default_rng(0)
    native = {}
    n = N_NATIVE
    for dt in ("float64", "float32", "complex128", "complex64"):
        a = rng.standard_normal((n, n)).astype(dt)
        b = rng.standard_normal((n, n)).astype(dt)
        flops = 2 * n**3 * (4 if dt.startswith("complex") else 1)
        native[dt] = flops / _median_seconds(lambda a=a, b=b: a @ b)
        del a, b
    n = N_INT8
    # the planes' layout (P, moduli, batch, rows, k) as the products read them
    pa = rng.integers(-128, 128, (1, 1, 1, n, n)).astype(cp.int8)
    pb = rng.integers(-128, 128, (1, 1, 1, n, n)).astype(cp.int8)
    int8 = 2 * n**3 / _median_seconds(lambda pa=pa, pb=pb: _int8_products(pa, pb))
    del pa, pb
    x = cp.empty(COPY_BYTES // 8, dtype=cp.uint64)  # word-wide: a byte copy runs at ~1/10
    bandwidth = 2 * COPY_BYTES / _median_seconds(lambda: x.copy())
    cp.get_default_memory_pool().free_all_blocks()
    return _cost.DeviceRates(device_name(backend_name), native, int8, bandwidth)


def _measure_amx():
    import numpy as np

    from .backends import amx

    name = device_name("amx")
    if name is None:
        raise RuntimeError(f"amx calibration: AMX is not usable here: {amx.reason()}")
    mod = amx._module()
    rng = np.random.default_rng(0)
    native = {}
    n = N_NATIVE_CPU
    for dt in ("float64", "float32", "complex128", "complex64"):
        a = rng.standard_normal((n, n))
        if dt.startswith("complex"):
            a = a + 1j * rng.standard_normal((n, n))
        a = a.astype(dt)
        b = np.ascontiguousarray(a.T)
        flops = 2 * n**3 * (4 if dt.startswith("complex") else 1)
        native[dt] = flops / _fastest_wall(lambda a=a, b=b: np.matmul(a, b))
    n = N_INT8_CPU
    # integer-valued operands with zero shifts: residues of full range, as the level's are
    a = rng.integers(-(2**20), 2**20, (n, n)).astype(np.float64)
    b = rng.integers(-(2**20), 2**20, (n, n)).astype(np.float64)
    zeros = np.zeros(n, dtype=np.int32)
    chunked = amx.chunked_panels(mod, n)

    def pack():
        return mod.ozaki2_pack(a, b, zeros, zeros, 2, chunked=chunked)

    # the stages' memory rate: the residue pack's bytes (A and B read as float64, two moduli's
    # int8 panels written) over its time, its panels from the warm panel cache as in products
    bandwidth = (2 * 8 + 2 * 2) * n * n / _fastest_wall(pack)
    panels = pack()
    out = panels.residues[0, 0]
    # the mod GEMM at both K chunks where products time them (``amx.mod_chunks``): the faster
    kcs = (0, amx.CHUNK_KC) if chunked and mod.blocking()["kc"] == 0 else (0,)
    seconds = min(_fastest_wall(lambda kc=kc: mod.ozaki2_multiply(panels, 0, out, kc=kc))
                  for kc in kcs)  # fmt: skip
    panels.release_operands()
    return _cost.DeviceRates(name, native, 2 * n**3 / seconds, bandwidth)


def save(backend_name, rates):
    """Write ``rates`` to the cache; returns the path (None where the cache is not writable:
    the rates then live for this process only)."""
    path = cache_path(backend_name, rates.name)
    record = {**dataclasses.asdict(rates), "date": datetime.date.today().isoformat()}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)  # atomic: concurrent processes never read a partial file
    except OSError:
        return None
    return path


def load(backend_name, device):
    """``(rates, date)`` from the cache, or None (absent or unreadable)."""
    try:
        with open(cache_path(backend_name, device)) as fh:
            r = json.load(fh)
        rates = _cost.DeviceRates(r["name"], r["native_flops"], r["int8_ops"], r["bandwidth"])
        return rates, r.get("date", "?")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def calibrate_device(backend_name="cupy"):
    """Measure the current device and cache the rates: ``(rates, model)``, the model moved to
    them (its source names the device, the date and the cache file), or None for a backend
    without the fitted device's rates (``_cost.FITTED_ON``: nothing to move its model by)."""
    rates, model = _measured(backend_name)
    with _LOCK:
        _MEMO[(backend_name, device_name(backend_name))] = model
    return rates, model


def _measured(backend_name):
    """``(rates, moved model or None)`` of the current device, measured now, cached on disk."""
    rates = measure(backend_name)
    path = save(backend_name, rates)
    if backend_name not in _cost.FITTED_ON:
        return rates, None
    return rates, _model(backend_name, rates, datetime.date.today().isoformat(), path)


def _model(backend_name, rates, date, path):
    where = f"cached in {path}" if path else "not cached"
    return _cost.for_device(
        backend_name, rates, source=f"{rates.name}, rates measured {date} ({where})"
    )


def device_model(backend_name, flops=None):
    """The cost model of the current device (``_cost.get_cost_model``): None where it is the
    device the built-in model was fitted on (by name, except for ``MEASURE_SAME_NAME``), or
    where there is none; else the fitted model moved to the device's cached rates, measured
    now if not cached (once per process and device, under a lock: concurrent first calls
    measure once). ``flops``: 2 m n k of the product asking; below the backend's
    ``MEASURE_MIN_FLOPS`` a device without rates yet is not measured (None)."""
    device = device_name(backend_name)
    if device is None or (device == _cost.FITTED_ON[backend_name].name
                          and backend_name not in MEASURE_SAME_NAME):  # fmt: skip
        return None
    key = (backend_name, device)
    small = flops is not None and flops < MEASURE_MIN_FLOPS.get(backend_name, 0)
    if small and key in _MEASURING and key not in _MEMO:  # the built-in model meanwhile
        return None
    with _LOCK:
        if key not in _MEMO:
            if small and key in _UNMEASURED:  # looked for cached rates once: none
                return None
            got = load(backend_name, device)
            if got is not None:
                _MEMO[key] = _model(backend_name, got[0], got[1], cache_path(backend_name, device))
            elif small:
                _UNMEASURED.add(key)
                return None
            else:
                _MEASURING.add(key)
                try:
                    _MEMO[key] = _measured(backend_name)[1]
                except Exception:  # measurement failed (memory): the built-in model stands
                    _MEMO[key] = None
                finally:
                    _MEASURING.discard(key)
        return _MEMO[key]
