"""The cost model on the device it runs on: a short calibration of a GPU's rates, cached.

The built-in cupy model (``_cost``) was fitted on one device (``_cost.FITTED_ON``). On any other
GPU the first product that asks the cost model measures the device here (``measure``: the
native GEMM's flop/s per dtype, the INT8 GEMM's rate, a device copy's bandwidth; about a
second), moves the fitted model to those rates (``_cost.for_device``) and caches the rates on
disk per device and library version (``cache_path``: the user cache directory of platformdirs),
so later processes read them. ``python -m emulinalg calibrate`` measures explicitly (and
rewrites the cache); ``emulinalg.set_cost_model`` overrides all of it; the plan's verdict line
names the model's source.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import threading

from . import _cost

_MEMO: dict = {}  # (backend, device) -> CostModel, per process
_LOCK = threading.Lock()
N_NATIVE = 4096  # square sizes of the timed GEMMs: big enough to run at the device's rate
N_INT8 = 8192
COPY_BYTES = 1 << 28
# What ``measure`` times, in the cache's file name: rates an earlier form measured differently
# (r1: the INT8 rate of a cuBLAS GEMM with padding copies) are measured again
RATES_FORMAT = "r2"


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


_NAMES: dict = {}  # device id -> name


def device_name(backend_name):
    """The current device of a backend ("cupy": the current GPU's name), or None."""
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


def measure(backend_name="cupy"):
    """``_cost.DeviceRates`` of the current device, measured: cuBLAS's GEMM per dtype at
    N_NATIVE, the INT8 GEMM the schemes run (``backends.cupy.gemm._int8_products`` on one pair
    of full-range residue planes: the fused kernel where it runs, else cuBLAS) at N_INT8, and a
    device copy of COPY_BYTES.

    Raises
    ------
    ValueError
        For a backend other than "cupy" (the CPU backends keep their fitted models)."""
    if backend_name != "cupy":
        raise ValueError(f"calibration measures GPUs (cupy), not {backend_name!r}")
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
    """Measure the current device, cache the rates and return the moved model (its source
    names the device, the date and the cache file)."""
    model = _measured(backend_name)
    with _LOCK:
        _MEMO[(backend_name, device_name(backend_name))] = model
    return model


def _measured(backend_name):
    """The moved model of the current device, measured now and cached on disk."""
    rates = measure(backend_name)
    path = save(backend_name, rates)
    return _model(backend_name, rates, datetime.date.today().isoformat(), path)


def _model(backend_name, rates, date, path):
    where = f"cached in {path}" if path else "not cached"
    return _cost.for_device(
        backend_name, rates, source=f"{rates.name}, rates measured {date} ({where})"
    )


def device_model(backend_name):
    """The cost model of the current device (``_cost.get_cost_model``): None where it is the
    device the built-in model was fitted on, or where there is none; else the fitted model
    moved to the device's cached rates, measured now if not cached (once per process and
    device, under a lock: concurrent first calls measure once)."""
    device = device_name(backend_name)
    if device is None or device == _cost.FITTED_ON[backend_name].name:
        return None
    key = (backend_name, device)
    with _LOCK:
        if key not in _MEMO:
            got = load(backend_name, device)
            if got is not None:
                _MEMO[key] = _model(backend_name, got[0], got[1], cache_path(backend_name, device))
            else:
                try:
                    _MEMO[key] = _measured(backend_name)
                except Exception:  # measurement failed (memory): the built-in model stands
                    _MEMO[key] = None
        return _MEMO[key]
