"""``python -m emulinalg bench``: emulated products against the native one, as benchmark records.

For every array family asked for and present (numpy, cupy, dask), every shape and size, input
dtype and φ, the harness draws φ-matrices on the host (``emulinalg.inputs.phi_matrix``), moves
them to the device, and measures in one run, on the same inputs:

- the native product (``xp.matmul``: OpenBLAS/MKL through numpy, cuBLAS through cupy);
- each requested method (a precision level, optionally with a scheme family, or an explicit
  scheme) through ``emulinalg.matmul`` under ``emulinalg.config(strategy=...)`` ("eager" by
  default, so the emulation runs even where the backend would choose native);
- accuracy of both against the exact product (``emulinalg.reference.exact_matmul``) of a subset
  of rows (``--ref-rows``, evenly spaced, of the first batch entry) against all of B;
- for each method, one extra run with the stage recorder on (``emulinalg._timing``): where the
  time goes.

Times are medians of ``--repeat`` runs after ``--warmup`` runs (the stage-recording run comes
after them; native gets at least 10 runs), timed with device events on cupy. Each measurement
is one JSON object in the format of docs/performance.md, written as it is made (``--out``).
``--plot`` draws the records (:mod:`.plots`); ``--records`` re-plots saved ones.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emulinalg._timing import STAGES, recording

from .machine import backend_env, blas, cpu_description

# --------------------------------------------------------------------------------------------
# What is measured
# --------------------------------------------------------------------------------------------

# (batch, m, n, k) from the size N; every shape does N**3 multiply-adds, so the effective
# throughput of different shapes at one N compares like with like.
SHAPES: dict[str, Callable[[int], tuple[int, int, int, int]]] = {
    "square": lambda N: (1, N, N, N),
    "tall-skinny": lambda N: (1, 16 * N, N // 4, N // 4),  # tall A times a narrow B
    "inner": lambda N: (1, N // 4, N // 4, 16 * N),  # Gram-type: long inner dimension
    "batched": lambda N: (8, N // 2, N // 2, N // 2),
}
DTYPES = ("float64", "float32", "complex128", "complex64")
_LEVEL = {
    "float64": "float64",
    "float32": "float32",
    "complex128": "float64",
    "complex64": "float32",
}

# Default methods per precision level: the level itself with each scheme family, and explicit
# schemes near it (about 53 bits: 14-16 moduli, 7 slices; about 24 bits: 8 moduli, 4 slices).
DEFAULT_METHODS = {
    "float64": (
        "float64",
        "float64[ozaki1]",
        "OzakiII(moduli=14, mode=fast)",
        "OzakiII(moduli=16, mode=accurate)",
        "OzakiI(slices=7)",
    ),
    "float32": ("float32", "float32[ozaki1]", "OzakiII(moduli=8, mode=fast)", "OzakiI(slices=4)"),
}
QUICK_METHODS = {
    "float64": ("float64", "OzakiII(moduli=14, mode=fast)", "OzakiI(slices=7)"),
    "float32": ("float32", "OzakiII(moduli=8, mode=fast)"),
}
NATIVE_MIN_RUNS = 10  # the native product is cheap beside the emulation: always time it well
DEFAULT_SIZES = {
    "numpy": (256, 512, 1024),
    "cupy": (4096, 8192, 16384),
    "dask": (512, 1024),
    "amx": (2048, 4096, 8192),
}


@dataclass(frozen=True)
class Method:
    """One way of computing the product: what ``precision=`` gets and under which family.

    ``label`` names it in records and plots: the level (``"float64"``, ``"40 bits"``) with the
    family in brackets when one is forced (``"float64 [ozaki1]"``), or the explicit scheme.
    """

    label: str
    precision: Any
    family: str | None = None


_SCHEME = re.compile(r"(ozakiii|ozakii|ozaki2|ozaki1|bf16x3|bf16xn)\((.*)\)", re.IGNORECASE)


def parse_method(text: str) -> Method:
    """A :class:`Method` from its command-line form.

    Accepted: ``float64``, ``float32``, a bit count (``40``), any of them with a family in
    brackets (``float64[ozaki1]``), ``OzakiII(moduli=14, mode=fast)`` (also ``OzakiII(14,
    fast)``, ``OzakiII(14)``: accurate mode) and ``OzakiI(slices=7)`` (also ``OzakiI(7)``).

    Raises
    ------
    ValueError
        For anything else, or parameters emulinalg rejects.
    """
    import emulinalg
    from emulinalg._config import SCHEMES
    from emulinalg._precision import parse

    raw = text.strip()
    family = None
    m = re.fullmatch(r"(.+?)\s*\[\s*(\w+)\s*\]", raw)
    if m:
        raw, family = m.group(1), m.group(2).lower()
        if family not in SCHEMES:
            raise ValueError(f"unknown scheme family {family!r} in {text!r}; one of {SCHEMES}")
    compact = raw.replace(" ", "")
    m = _SCHEME.fullmatch(compact)
    try:
        if compact in ("float64", "float32"):
            precision, label = compact, compact
        elif compact.isdigit():
            precision = int(compact)
            label = f"{precision} bits"
        elif m:
            name = m.group(1).lower()
            args = [a for a in m.group(2).split(",") if a]
            kw = dict(a.split("=", 1) for a in args if "=" in a)
            pos = [a for a in args if "=" not in a]
            if name == "bf16x3":
                spec = emulinalg.BF16x3()
            elif name == "bf16xn":  # missing arguments take BF16xN's defaults
                vals = dict(zip(("slices", "products"), pos)) | kw
                spec = emulinalg.BF16xN(**{key: int(v) for key, v in vals.items()})
            elif name in ("ozakiii", "ozaki2"):
                keys = ("moduli", "mode")
                vals = dict(zip(keys, pos)) | kw
                spec = emulinalg.OzakiII(
                    moduli=int(vals["moduli"]), mode=vals.get("mode", "accurate").lower()
                )
            else:
                vals = dict(zip(("slices",), pos)) | kw
                spec = emulinalg.OzakiI(slices=int(vals["slices"]))
            precision, label = spec, str(spec)
        else:
            raise ValueError("not a level, a bit count or a scheme")
        parse(precision)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"cannot read method {text!r} ({exc}); expected e.g. float64, float64[ozaki1], 40, "
            "OzakiII(moduli=14, mode=fast), OzakiI(slices=7), BF16x3(), "
            "BF16xN(slices=6, products=10)"
        ) from None
    if family is not None and not isinstance(precision, (str, int)):
        raise ValueError(f"{text!r}: a family applies to levels only, not to explicit schemes")
    if family in (None, "auto"):
        return Method(label, precision, None)
    return Method(f"{label} [{family}]", precision, family)


# --------------------------------------------------------------------------------------------
# Array families: moving inputs, timing, naming the machine
# --------------------------------------------------------------------------------------------

INSTALL_HINT = {
    "numpy": "pip install numpy",
    "cupy": "pip install 'emulinalg[cuda]' on a machine with an NVIDIA GPU",
    "dask": "pip install 'emulinalg[dask]'",
    "amx": "a CPU with Intel AMX (AMX-TILE/INT8/BF16) and emulinalg built with a C++ compiler",
}
FAMILIES = tuple(INSTALL_HINT)


@dataclass
class Device:
    """One array family as the harness sees it.

    ``put``/``get`` move host numpy arrays there and back (``get`` of a finished result);
    ``run(fn) -> (result, seconds)`` calls ``fn`` once with the result complete when the clock
    stops (device events on cupy; lazy dask graphs are computed inside); ``sync`` makes host
    clocks see device work (stage timings).
    """

    family: str
    xp: Any
    put: Callable[[np.ndarray], Any]
    get: Callable[[Any], np.ndarray]
    run: Callable[[Callable[[], Any]], tuple[Any, float]]
    sync: Callable[[], object] | None
    description: str
    native: str


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


_DEVICES = {"numpy": _numpy_device, "cupy": _cupy_device, "dask": _dask_device, "amx": _amx_device}


def missing(family: str) -> str | None:
    """Why the array family cannot run here, or None when it can."""
    if family == "amx":
        from emulinalg.backends import amx

        return None if amx.usable() else f"AMX is not usable here: {amx.reason()}"
    module = "dask.array" if family == "dask" else family
    try:
        mod = importlib.import_module(module)
        if family == "cupy" and mod.cuda.runtime.getDeviceCount() < 1:
            return "cupy found no CUDA device"
    except Exception as exc:  # ImportError, or cupy without a driver
        return f"{module} is not usable here ({type(exc).__name__}: {exc}); {INSTALL_HINT[family]}"
    return None


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


@dataclass
class Settings:
    """Everything a benchmark run depends on (the command line, parsed)."""

    backends: list[str] = field(default_factory=lambda: ["numpy"])
    sizes: list[int] | None = None  # None: DEFAULT_SIZES of the family
    shapes: list[str] = field(default_factory=lambda: ["square", "tall-skinny", "batched"])
    dtypes: list[str] = field(default_factory=lambda: ["float64", "float32"])
    phis: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0])
    methods: list[Method] | None = None  # None: DEFAULT_METHODS of the dtype's level
    repeat: int = 10
    warmup: int = 1
    case_seconds: float = 30.0
    ref_rows: int = 32
    ref_cols: int = 0  # 0: every column of B
    strategy: str = "eager"
    stages: bool = True
    seed: int = 0
    chunks: int | None = None
    ref_workers: int = 0  # processes computing exact references while the device measures
    torch: bool = False  # also time torch.matmul on the same host inputs (numpy, amx)
    quick: bool = False
    command: str = ""

    def methods_for(self, dtype: str) -> list[Method]:
        if self.methods is not None:
            return self.methods
        table = QUICK_METHODS if self.quick else DEFAULT_METHODS
        return [parse_method(t) for t in table[_LEVEL[dtype]]]

    def sizes_for(self, family: str) -> list[int]:
        return list(self.sizes or DEFAULT_SIZES[family])


def measure(dev: Device, fn, repeat: int, warmup: int, budget: float):
    """Median seconds of ``repeat`` runs of ``fn`` after ``warmup`` runs; stops early (after at
    least one timed run) once the timed runs have taken ``budget`` seconds.

    Returns ``(last result, median seconds, number of timed runs)``.
    """
    for _ in range(warmup):
        dev.run(fn)
    times: list[float] = []
    out = None
    spent = 0.0
    while len(times) < max(1, repeat):
        out, t = dev.run(fn)
        times.append(t)
        spent += t
        if spent >= budget:
            break
    return out, statistics.median(times), len(times)


def best_of(fn: Callable[[], object], repeat: int = 1, sync: Callable[[], object] | None = None):
    """``(seconds, stages)`` of the fastest of ``repeat`` recorded calls of ``fn`` (after one
    untimed call): wall time with ``sync`` after the call, and the exclusive seconds per stage
    of that call (device-synchronised at every boundary when ``sync`` is given)."""
    sync = sync or (lambda: None)
    fn()
    sync()
    best = None
    for _ in range(max(1, repeat)):
        with recording(sync=sync) as rec:
            t0 = time.perf_counter()
            fn()
            sync()
            t = time.perf_counter() - t0
        if best is None or t < best[0]:
            best = (t, dict(rec.seconds))
    return best


def _finite(x: float | None) -> float | None:
    # JSON has no inf/nan: null means "exact" for bits (error 0) and "unknown" elsewhere.
    return None if x is None or not math.isfinite(x) else float(x)


def _ref_rows(m: int, count: int) -> slice:
    """``count`` evenly spaced rows of ``m`` (all of them when m <= count or count <= 0).

    A strided slice, not an index array: it selects the rows on the device (numpy, cupy and
    dask index it alike), so only they travel to the host for grading.
    """
    if count <= 0 or m <= count:
        return slice(0, m)
    step = m // count
    return slice(0, step * count, step)


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on every platform
        return None


def _first(x):
    return x[0] if x.ndim == 3 else x


def _stage_times(rec, seconds: float) -> dict[str, float]:
    out = {name: float(rec.seconds.get(name, 0.0)) for name in STAGES}
    out.update({k: float(v) for k, v in rec.seconds.items() if k not in out})
    out["other"] = max(0.0, seconds - sum(out.values()))
    return out


class Progress:
    """A progress bar on stderr (one line per step when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool = True, stream=None, width: int = 24):
        self.total = max(1, total)
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()

    def step(self, what: str) -> None:
        """Announce the next step (``what`` is running now)."""
        if not self.enabled:
            return
        filled = round(self.width * self.done / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        text = f"bench [{bar}] {self.done}/{self.total} {elapsed:4.0f}s  {what}"
        if self.tty:
            self.stream.write("\r\033[K" + text[:160])
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.done += 1

    def note(self, text: str) -> None:
        if self.enabled:
            self.stream.write(("\r\033[K" if self.tty else "") + text + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write(
                f"\r\033[Kbench: {self.done} steps in {time.perf_counter() - self.start:.0f}s\n"
            )
            self.stream.flush()


@dataclass
class Group:
    """The measurements on one set of inputs: a family, shape, size, dtype and φ."""

    family: str
    shape: str
    size: int
    dims: tuple[int, int, int, int]  # batch, m, n, k
    dtype: str
    phi: float

    def where(self) -> str:
        return f"{self.family} {self.shape} N={self.size} {self.dtype} phi={self.phi:g}"


def _groups(settings: Settings, families: list[str]) -> list[Group]:
    out = []
    for family in families:
        sizes = settings.sizes_for(family)
        for shape in settings.shapes:
            for size in sizes:
                dims = SHAPES[shape](size)
                if min(dims) < 1:
                    continue
                if settings.quick and shape != "square" and size != max(sizes):
                    continue  # --quick: the sweep over N on square shapes only
                for dtype in settings.dtypes:
                    out += [Group(family, shape, size, dims, dtype, phi) for phi in settings.phis]
    return out


def operands(dims, phi: float, dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The host inputs A (m, k) or (batch, m, k) and B of a group: φ-matrices of seeds
    ``seed`` and ``seed + 1``."""
    from emulinalg.inputs import phi_matrix

    batch, m, n, k = dims
    lead = () if batch == 1 else (batch,)
    a = phi_matrix(lead + (m, k), phi, dtype=dtype, seed=seed)
    return a, phi_matrix(lead + (k, n), phi, dtype=dtype, seed=seed + 1)


def exact_reference(dims, phi: float, dtype: str, seed: int, ref_rows: int, ref_cols: int = 0):
    """``(hi, lo)`` of :func:`emulinalg.reference.exact_matmul` for the graded rows (and
    columns) of the first batch entry of a group's inputs (rebuilt from the seed: runs in a
    worker process too)."""
    from emulinalg.reference import exact_matmul

    a, b = operands(dims, phi, dtype, seed)
    cols = _ref_rows(dims[2], ref_cols)
    return exact_matmul(_first(a)[_ref_rows(dims[1], ref_rows)], _first(b)[:, cols])


def _reference_pool(settings: Settings, groups: list[Group]):
    """With ``ref_workers``, start every group's exact reference in worker processes now, so
    that the host computes them while the device measures (futures, in group order)."""
    if settings.ref_workers <= 0 or not groups:
        return None, None
    import concurrent.futures
    import multiprocessing

    # spawn: the parent may hold a CUDA context, which forked children must not inherit
    pool = concurrent.futures.ProcessPoolExecutor(
        settings.ref_workers, mp_context=multiprocessing.get_context("spawn")
    )
    args = (settings.seed, settings.ref_rows, settings.ref_cols)
    return pool, [pool.submit(exact_reference, g.dims, g.phi, g.dtype, *args) for g in groups]


def run(
    settings: Settings,
    sink: Callable[[dict], None] | None = None,
    progress: Progress | None = None,
    notify: Callable[[str], None] | None = None,
) -> list[dict]:
    """Measure everything ``settings`` asks for; returns the records (also passed to ``sink``).

    A family that is not installed is skipped with a message to ``notify``. A method whose
    product raises gets a record with an ``error`` key instead of figures.
    """
    notify = notify or (lambda text: print(text, file=sys.stderr))
    families = []
    for family in settings.backends:
        why = missing(family)
        if why:
            notify(f"bench: skipping backend {family}: {why}")
        else:
            families.append(family)
    groups = _groups(settings, families)
    if progress is not None:
        progress.total = max(1, sum(1 + len(settings.methods_for(g.dtype)) for g in groups))
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    records: list[dict] = []
    devices: dict[str, Device] = {}

    def emit(rec):
        records.append(rec)
        if sink:
            sink(rec)

    pool, futures = _reference_pool(settings, groups)
    try:
        for i, group in enumerate(groups):
            if group.family not in devices:
                devices[group.family] = _DEVICES[group.family](settings.chunks)
            if progress:
                progress.step(f"{group.where()}: exact reference and native")
            ref = futures[i].result() if futures else None
            _measure_group(settings, devices[group.family], group, ref, date, emit, progress)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if progress:
        progress.close()
    return records


def _measure_group(settings, dev, group, ref, date, emit, progress):
    """Native and every method on one group's inputs (see :func:`run`)."""
    import emulinalg
    from emulinalg import reference

    batch, m, n, k = group.dims
    a_h, b_h = operands(group.dims, group.phi, group.dtype, settings.seed)
    a, b = dev.put(a_h), dev.put(b_h)
    rows = _ref_rows(m, settings.ref_rows)
    cols = _ref_rows(n, settings.ref_cols)
    a_ref, b_ref = _first(a_h)[rows], _first(b_h)[:, cols]
    del a_h, b_h
    if ref is None:
        ref = reference.exact_matmul(a_ref, b_ref)

    def grade(c):
        acc = reference.accuracy(dev.get(_first(c)[rows][:, cols]), a_ref, b_ref, ref=ref)
        if acc["nonfinite_mismatch"]:  # a wrong inf/nan is no accuracy at all
            return {"bits_maxrel": -math.inf, "bits_cw": -math.inf}
        return acc

    flops = 2.0 * batch * m * n * k * (4 if group.dtype.startswith("complex") else 1)
    c, t_nat, runs = measure(
        dev,
        lambda: dev.xp.matmul(a, b),
        max(settings.repeat, NATIVE_MIN_RUNS),
        max(settings.warmup, 1),
        settings.case_seconds,
    )
    acc_nat = grade(c)
    del c
    extra = {}
    if settings.torch and group.family in ("numpy", "amx"):
        extra = _torch_native(settings, dev, a, b, grade)
    base = {
        "family": group.family,
        "op": "matmul",
        "shape": group.shape,
        "size": group.size,
        "dtype": group.dtype,
        "m": m,
        "n": n,
        "k": k,
        "batch": batch,
        "phi": float(group.phi),
        "strategy": settings.strategy,
        # other work on the machine makes CPU timings noisy: keep the evidence
        "load_average": _load_average(),
        "native_seconds": t_nat,
        "native_tflops": flops / t_nat / 1e12 if t_nat > 0 else None,
        "native_bits_maxrel": _finite(acc_nat["bits_maxrel"]),
        "native_bits_cw": _finite(acc_nat["bits_cw"]),
        **extra,
        "reference": "exact",
        "ref_rows": len(range(m)[rows]),
        "ref_cols": len(range(n)[cols]),
        "native": dev.native,
        "device": dev.description,
        "emulinalg": getattr(emulinalg, "__version__", "?"),
        "date": date,
        "command": settings.command,
    }
    emit(
        {
            **base,
            "backend": group.family,
            "precision": "native",
            "method": "native",
            "scheme": "native",
            "seconds": t_nat,
            "runs": runs,
            "tflops": base["native_tflops"],
            "speedup": 1.0,
            "bits_maxrel": base["native_bits_maxrel"],
            "bits_cw": base["native_bits_cw"],
        }
    )

    for method in settings.methods_for(group.dtype):
        if progress:
            progress.step(f"{group.where()}: {method.label}")
        rec = {
            **base,
            "backend": group.family,
            "precision": method.label.split(" [")[0],
            "scheme_family": method.family or "auto",
            "method": method.label,
        }
        cfg = {"strategy": settings.strategy}
        if method.family:
            cfg["scheme"] = method.family

        def fn(p=method.precision):
            return emulinalg.matmul(a, b, precision=p)

        try:
            with emulinalg.config(**cfg):
                c, t, runs = measure(
                    dev, fn, settings.repeat, settings.warmup, settings.case_seconds
                )
                plan = emulinalg.last_plan()
                acc = grade(c)
                del c
                stages = None
                if settings.stages:  # one more run, warm (kernels compiled, pools grown)
                    with recording(sync=dev.sync) as timer:
                        _, t_staged = dev.run(fn)
                    stages = _stage_times(timer, t_staged)
        except Exception as exc:  # a failing method is reported, not hidden
            rec["error"] = f"{type(exc).__name__}: {exc}"
            emit(rec)
            continue
        rec.update(
            {
                "backend": getattr(plan, "backend", group.family),
                "scheme": getattr(plan, "scheme", "?"),
                "gemms": getattr(plan, "gemms", None),
                "fallback": getattr(plan, "fallback", None),
                "native_entries": getattr(plan, "native_entries", None),
                "seconds": t,
                "runs": runs,
                "tflops": flops / t / 1e12 if t > 0 else None,
                "speedup": t_nat / t if t > 0 else None,
                "bits_maxrel": _finite(acc["bits_maxrel"]),
                "bits_cw": _finite(acc["bits_cw"]),
            }
        )
        if "torch_seconds" in base and t > 0:  # against the faster of numpy and torch
            rec["speedup_best_native"] = min(t_nat, base["torch_seconds"]) / t
        if stages is not None:
            rec["stages"] = stages
        emit(rec)


def _torch_native(settings, dev, a, b, grade) -> dict:
    """torch.matmul (MKL/oneDNN) on the same host arrays (shared memory, no copy): its median
    seconds and bits, or why it did not run."""
    try:
        import torch
    except ImportError as exc:
        return {"torch_error": f"{type(exc).__name__}: {exc}"}
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    c, t, _ = measure(
        dev,
        lambda: torch.matmul(ta, tb).numpy(),
        max(settings.repeat, NATIVE_MIN_RUNS),
        max(settings.warmup, 1),
        settings.case_seconds,
    )
    acc = grade(c)
    return {
        "torch_seconds": t,
        "torch_threads": torch.get_num_threads(),
        "torch_bits_maxrel": _finite(acc["bits_maxrel"]),
        "torch_bits_cw": _finite(acc["bits_cw"]),
    }


# --------------------------------------------------------------------------------------------
# Records: reading, tables
# --------------------------------------------------------------------------------------------


def load_records(paths: Iterable[str]) -> list[dict]:
    """Records from JSON-lines files (blank lines skipped).

    Raises
    ------
    ValueError
        A line that is not a JSON object (the message names the file and line).
    """
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{i}: not JSON ({exc})") from None
                if not isinstance(rec, dict):
                    raise ValueError(f"{path}:{i}: not a JSON object")
                out.append(rec)
    return out


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def _bits(x):
    return "exact" if x is None else f"{x:.1f}"


def table(records: list[dict], markdown: bool = False) -> str:
    """The records as a text (or Markdown) table: one row per measurement."""
    head = (
        "backend",
        "shape",
        "m×n×k",
        "batch",
        "dtype",
        "φ",
        "method",
        "scheme ran",
        "bits maxrel/cw",
        "native bits",
        "TFLOP/s",
        "× native",
    )
    rows = []
    for r in records:
        dims = f"{r['m']}×{r['n']}×{r['k']}"
        cells = [
            r.get("backend", "?"),
            r.get("shape", "?"),
            dims,
            str(r.get("batch", 1)),
            r["dtype"],
            f"{r['phi']:g}",
            r.get("method", r.get("precision", "?")),
        ]
        native = f"{_bits(r.get('native_bits_maxrel'))}/{_bits(r.get('native_bits_cw'))}"
        if "error" in r:
            rows.append(cells + ["ERROR " + r["error"][:50], "", native, "", ""])
            continue
        scheme = str(r.get("scheme", "?"))
        if r.get("fallback"):
            scheme += " (fallback)"
        rows.append(
            cells
            + [
                scheme,
                f"{_bits(r.get('bits_maxrel'))}/{_bits(r.get('bits_cw'))}",
                native,
                _fmt(r.get("tflops"), ".3g"),
                _fmt(r.get("speedup"), ".3g"),
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _schemes_text(recs: list[dict]) -> str:
    """The schemes of records in order (φ), numbers that differ joined with '/'."""
    texts = [str(r.get("scheme", "?")) for r in recs]
    shapes = {re.sub(r"\d+", "#", t) for t in texts}
    if len(set(texts)) == 1:
        out = texts[0]
    elif len(shapes) == 1:
        numbers = zip(*(re.findall(r"\d+", t) for t in texts))
        parts = iter(["/".join(col) if len(set(col)) > 1 else col[0] for col in numbers])
        out = re.sub(r"\d+", lambda _: next(parts), texts[0])
    else:
        out = " / ".join(texts)
    native = [f"{r['native_entries']} at φ={r['phi']:g}" for r in recs if r.get("native_entries")]
    return out + (f"; native entries: {', '.join(native)}" if native else "")


def bits_table(records: list[dict], markdown: bool = True) -> str:
    """Effective bits per method (rows, native first) and φ (columns), per dtype and size.

    Each cell is ``bits_maxrel / bits_cw`` of the measurement ("exact" for an error of 0); the
    last column gives the scheme that ran, with the counts per φ where a level chose different
    ones (``OzakiII(moduli=17/17/19, ...)``), and the entries computed natively.
    """
    groups: dict[tuple, dict] = {}
    for r in records:
        if "error" in r:
            continue
        dims = f"{r['m']}×{r['n']}×{r['k']}"
        key = (r.get("family", r.get("backend")), r.get("shape"), dims, r["dtype"])
        rows = groups.setdefault(key, {})
        rows.setdefault(r["method"], {})[r["phi"]] = r
    out = []
    for (family, shape, dims, dtype), rows in groups.items():
        phis = sorted({phi for cells in rows.values() for phi in cells})
        head = ["method", *(f"φ={p:g}" for p in phis), "scheme"]
        body = []
        for method in sorted(rows, key=lambda m: (m != "native", list(rows).index(m))):
            cells = rows[method]
            bits = [
                f"{_bits(cells[p].get('bits_maxrel'))} / {_bits(cells[p].get('bits_cw'))}"
                if p in cells
                else ""
                for p in phis
            ]
            scheme = (
                "" if method == "native" else _schemes_text([cells[p] for p in phis if p in cells])
            )
            body.append([method, *bits, scheme])
        title = f"{family}, {shape} {dims}, {dtype} (bits maxrel / componentwise)"
        if markdown:
            lines = [f"**{title}**", "", "| " + " | ".join(head) + " |"]
            lines += ["|" + "---|" * len(head)] + ["| " + " | ".join(b) + " |" for b in body]
        else:
            widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
            lines = [title] + [
                "  ".join(c.ljust(w) for c, w in zip(x, widths)) for x in [head, *body]
            ]
        out.append("\n".join(lines))
    return "\n\n".join(out)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _split_top(text: str) -> list[str]:
    """Split at commas outside parentheses/brackets: 'float64,OzakiII(14, fast)' -> 2 items."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x.strip() for x in out if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in _split_top(text)]


def _floats(text: str) -> list[float]:
    return [float(x) for x in _split_top(text)]


def _flat(values) -> list | None:
    """Append-actions give lists of lists (or, after :func:`.cli.main`, flat lists)."""
    if not values:
        return None
    out = []
    for v in values:
        out.extend(v if isinstance(v, list) else [v])
    return out


# --quick: square at both sizes, the other shapes at the larger; the stage-recording run is the
# warm-up; repeats stop after a second of timed runs.
QUICK = {
    "sizes": [128, 256],
    "shapes": ["square", "tall-skinny", "batched"],
    "dtypes": ["float64", "float32"],
    "phis": [1.0],
    "repeat": 5,
    "warmup": 0,
    "case_seconds": 1.0,
}


def add_parser(sub) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to ``python -m emulinalg``'s subparsers."""
    p = sub.add_parser(
        "bench",
        help="benchmark emulated against native products: throughput, bits, plots",
        description="Time emulated and native products side by side on phi-matrices, grade "
        "both against the exact product, write JSON-lines records (format: docs/performance.md) "
        "and draw plots. Lists are comma-separated or repeated options.",
    )
    many = {"action": "append"}
    p.add_argument(
        "--backend",
        type=_split_top,
        metavar="B[,B...]",
        help="numpy (default: numpy arrays on the numpy backend), cupy, dask, amx (numpy "
        "arrays on the Intel AMX backend), or all (every one installed)",
        **many,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small sweep, about a minute on 2 CPU cores: square N=128,256, tall-skinny and "
        "batched N=256, float64 and float32, phi=1, the levels and a few explicit schemes, "
        "5 repeats (options given explicitly override these)",
    )
    p.add_argument(
        "--sizes",
        "-N",
        type=_ints,
        metavar="N[,N...]",
        help="sizes N (default per "
        "backend: numpy 256,512,1024; cupy 4096,8192,16384; dask 512,1024)",
        **many,
    )
    p.add_argument(
        "--shape",
        type=_split_top,
        metavar="S[,S...]",
        help="square, tall-skinny "
        "(16N x N/4 x N/4), inner (N/4 x N/4, k=16N), batched (8 x N/2); "
        "default square,tall-skinny,batched",
        **many,
    )
    p.add_argument(
        "--dtype",
        type=_split_top,
        metavar="D[,D...]",
        help="float64, float32, complex128, complex64 (default float64,float32)",
        **many,
    )
    p.add_argument(
        "--precision",
        type=_split_top,
        metavar="P[,P...]",
        help="methods: float64, "
        "float32, bit counts, LEVEL[ozaki1|ozaki2], OzakiII(moduli=n, mode=fast|"
        "accurate), OzakiI(slices=p), BF16x3(), BF16xN(slices=s, products=p) (default: the "
        "dtype's level with both families "
        "and explicit schemes near it)",
        **many,
    )
    p.add_argument(
        "--phi",
        type=_floats,
        metavar="X[,X...]",
        help="exponent spread phi of the inputs (default 0.5,1,2)",
        **many,
    )
    p.add_argument("--repeat", type=int, help="timed runs per measurement, median (default 10)")
    p.add_argument("--warmup", type=int, help="untimed runs before them (default 1)")
    p.add_argument(
        "--case-seconds",
        type=float,
        metavar="S",
        help="stop repeating once the timed runs of one measurement took S seconds (default 30)",
    )
    p.add_argument(
        "--ref-rows",
        type=int,
        default=32,
        metavar="R",
        help="rows of A graded against the exact product (default 32; 0 = all)",
    )
    p.add_argument(
        "--ref-cols",
        type=int,
        default=0,
        metavar="C",
        help="columns of B graded (evenly spaced; default 0 = all): large N needs both",
    )
    p.add_argument(
        "--strategy",
        choices=("eager", "performant"),
        default="eager",
        help="eager (default) always emulates; performant lets emulinalg run native "
        "where that is faster",
    )
    p.add_argument(
        "--no-stages",
        action="store_true",
        help="skip the extra run per method that records where the time goes",
    )
    p.add_argument(
        "--ref-workers",
        type=int,
        default=0,
        metavar="W",
        help="compute the exact references in W processes while the device measures (for "
        "GPU sweeps: the host is idle meanwhile; default 0: inline)",
    )
    p.add_argument("--chunks", type=int, help="dask: block size (default half of each axis)")
    p.add_argument(
        "--torch",
        action="store_true",
        help="numpy/amx: also time torch.matmul (MKL/oneDNN) on the same inputs; records get "
        "torch_seconds, torch_bits_* and speedup_best_native (against the faster native)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs (default 0)")
    p.add_argument(
        "--out",
        "-o",
        metavar="FILE.jsonl",
        help="write the records, one JSON object per line, as they are measured",
    )
    p.add_argument("--append", action="store_true", help="append to --out instead of replacing")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="draw the plots into FILE (png, svg, pdf); a "
        "FILE containing {panel} gets one file per panel (plane, speedup, stages)",
    )
    p.add_argument(
        "--records",
        nargs="+",
        metavar="FILE.jsonl",
        help="measure nothing: read these records (for --plot and the table)",
    )
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument(
        "--by-phi",
        action="store_true",
        help="print effective bits per method (rows) and phi (columns) instead",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=main)
    return p


def settings_from_args(args) -> Settings:
    """The :class:`Settings` of parsed ``bench`` arguments (``--quick`` fills what is unset)."""
    quick = bool(args.quick)
    q = QUICK if quick else {}
    backends = _flat(args.backend) or ["numpy"]
    if "all" in backends:
        backends = list(FAMILIES)
    bad = set(backends) - set(FAMILIES)
    if bad:
        raise ValueError(f"unknown backend(s) {sorted(bad)}; expected {FAMILIES} or all")
    shapes = _flat(args.shape) or q.get("shapes") or ["square", "tall-skinny", "batched"]
    bad = set(shapes) - set(SHAPES)
    if bad:
        raise ValueError(f"unknown shape(s) {sorted(bad)}; expected {tuple(SHAPES)}")
    dtypes = _flat(args.dtype) or q.get("dtypes") or ["float64", "float32"]
    bad = set(dtypes) - set(DTYPES)
    if bad:
        raise ValueError(f"unknown dtype(s) {sorted(bad)}; expected {DTYPES}")
    methods = _flat(args.precision)
    s = Settings(
        backends=backends,
        sizes=_flat(args.sizes) or q.get("sizes"),
        shapes=shapes,
        dtypes=dtypes,
        phis=_flat(args.phi) or q.get("phis") or [0.5, 1.0, 2.0],
        methods=[parse_method(t) for t in methods] if methods else None,
        repeat=args.repeat if args.repeat is not None else q.get("repeat", 10),
        warmup=args.warmup if args.warmup is not None else q.get("warmup", 1),
        case_seconds=args.case_seconds or q.get("case_seconds", 30.0),
        ref_rows=args.ref_rows,
        ref_cols=args.ref_cols,
        strategy=args.strategy,
        stages=not args.no_stages,
        seed=args.seed,
        chunks=args.chunks,
        ref_workers=args.ref_workers,
        torch=bool(args.torch),
        quick=quick,
    )
    if any(n < 1 for n in s.sizes or []) or s.repeat < 1 or s.warmup < 0:
        raise ValueError("sizes and --repeat must be positive, --warmup non-negative")
    s.command = command_line(s)
    return s


def command_line(s: Settings) -> str:
    """The full command that reproduces ``s`` (every setting spelled out)."""
    parts = ["python", "-m", "emulinalg", "bench", "--backend", ",".join(s.backends)]
    if s.quick:
        parts.append("--quick")
    if s.sizes:
        parts += ["--sizes", ",".join(map(str, s.sizes))]
    parts += ["--shape", ",".join(s.shapes), "--dtype", ",".join(s.dtypes)]
    if s.methods is not None:
        parts += ["--precision", ",".join(m.label.replace(" [", "[") for m in s.methods)]
    parts += ["--phi", ",".join(f"{p:g}" for p in s.phis), "--repeat", str(s.repeat)]
    parts += ["--warmup", str(s.warmup), "--case-seconds", f"{s.case_seconds:g}"]
    parts += ["--ref-rows", str(s.ref_rows)]
    if s.ref_cols:
        parts += ["--ref-cols", str(s.ref_cols)]
    parts += ["--strategy", s.strategy, "--seed", str(s.seed)]
    if not s.stages:
        parts.append("--no-stages")
    if s.chunks:
        parts += ["--chunks", str(s.chunks)]
    if s.ref_workers:
        parts += ["--ref-workers", str(s.ref_workers)]
    if s.torch:
        parts.append("--torch")
    return " ".join(shlex.quote(p) for p in parts)


def main(args) -> int:
    """Entry point of the ``bench`` subcommand (``args`` from :mod:`.cli`)."""
    if args.records:
        try:
            records = load_records(args.records)
        except (OSError, ValueError) as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
    else:
        try:
            settings = settings_from_args(args)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        out = open(args.out, "a" if args.append else "w", encoding="utf-8") if args.out else None  # noqa: SIM115
        try:

            def sink(rec):
                if out:
                    out.write(json.dumps(rec, allow_nan=False) + "\n")
                    out.flush()

            progress = Progress(0, enabled=not args.quiet)
            records = run(settings, sink=sink, progress=progress)
        finally:
            if out:
                out.close()
        if not records:
            print("bench: nothing measured (no requested backend is available)", file=sys.stderr)
            return 1
    if args.by_phi:
        print(bits_table(records, markdown=args.markdown))
    else:
        print(table(records, markdown=args.markdown))
    if args.plot:
        try:
            from . import plots
        except ImportError as exc:
            print(
                f"bench: --plot needs matplotlib ({exc}); pip install 'emulinalg[bench]'",
                file=sys.stderr,
            )
            return 1
        paths = plots.plot(records, args.plot)
        print("bench: plots written to " + ", ".join(paths), file=sys.stderr)
    failed = [r for r in records if "error" in r]
    if failed:
        print(f"bench: {len(failed)} measurement(s) failed (see ERROR rows)", file=sys.stderr)
    return 1 if failed else 0
