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

This module is the measuring loop (:func:`run`); the array families are in :mod:`.devices`,
the records' tables in :mod:`.records`, the command's options and body in :mod:`.bench_cli`.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emulinalg._timing import STAGES, recording

from .devices import DEVICES, Device, missing

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
    fast)``, ``OzakiII(14)``: accurate mode; ``OzakiII(16, gaussian)`` or ``gaussian=true``:
    complex products modulo the Gaussian moduli) and ``OzakiI(slices=7)`` (also ``OzakiI(7)``).

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
                gaussian = "gaussian" in (p.lower() for p in pos)
                pos = [p for p in pos if p.lower() != "gaussian"]
                vals = dict(zip(("moduli", "mode"), pos)) | kw
                flag = str(vals.get("gaussian", gaussian)).lower()
                if flag not in ("true", "false"):
                    raise ValueError(f"gaussian={vals['gaussian']!r}: true or false")
                spec = emulinalg.OzakiII(
                    moduli=int(vals["moduli"]), mode=vals.get("mode", "accurate").lower(),
                    gaussian=flag == "true",
                )  # fmt: skip
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
    # GEMMul8 beside the levels (cupy): the library built by ../shared/peers/build.sh, loaded
    # through the ``gemmul8`` ctypes wrapper on sys.path (a measuring stick, not a dependency)
    gemmul8: str | None = None
    quick: bool = False
    command: str = ""

    def methods_for(self, dtype: str) -> list[Method]:
        if self.methods is not None:
            return self.methods
        table = QUICK_METHODS if self.quick else DEFAULT_METHODS
        return [parse_method(t) for t in table[_LEVEL[dtype]]]

    def sizes_for(self, family: str) -> list[int]:
        return list(self.sizes or DEFAULT_SIZES[family])


def measure(dev: Device, fn, repeat: int, warmup: int, budget: float, board=None):
    """Median seconds of ``repeat`` runs of ``fn`` after ``warmup`` runs; stops early (after at
    least one timed run) once the timed runs have taken ``budget`` seconds. ``board``: a record
    (dict) that gets the board's clock and power over the timed runs (``board.Monitor``'s
    fields) where the device can read them.

    Returns ``(last result, median seconds, number of timed runs)``.
    """
    for _ in range(warmup):
        dev.run(fn)
    times: list[float] = []
    out = None
    spent = 0.0
    monitor = dev.monitor() if board is not None and dev.monitor is not None else None
    with monitor or nullcontext():
        while len(times) < max(1, repeat):
            out, t = dev.run(fn)
            times.append(t)
            spent += t
            if spent >= budget:
                break
    if monitor is not None:
        board.update(monitor.summary())
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
                devices[group.family] = DEVICES[group.family](settings.chunks)
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
    nat_board: dict = {}
    c, t_nat, runs = measure(
        dev,
        lambda: dev.xp.matmul(a, b),
        max(settings.repeat, NATIVE_MIN_RUNS),
        max(settings.warmup, 1),
        settings.case_seconds,
        nat_board,
    )
    acc_nat = grade(c)
    del c
    t_int8 = None  # one INT8 GEMM of the product's shape: the zero-overhead bound's unit
    if dev.int8_gemm is not None:
        gemm = dev.int8_gemm(m, n, k)
        _, t_int8, _ = measure(dev, gemm, settings.repeat, 1, settings.case_seconds)
        del gemm
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
        **{f"native_{key}": v for key, v in nat_board.items()},
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
            **nat_board,
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
                    dev, fn, settings.repeat, settings.warmup, settings.case_seconds, rec
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
        if t_int8 is not None and rec["gemms"]:  # the scheme's INT8 GEMMs and nothing else
            bound = rec["gemms"] * batch * t_int8
            rec.update(int8_gemm_seconds=t_int8, bound_seconds=bound,
                       bound_speedup=t_nat / bound if bound > 0 else None,
                       share_of_bound=bound / t if t > 0 else None)  # fmt: skip
        if "torch_seconds" in base and t > 0:  # against the faster of numpy and torch
            rec["speedup_best_native"] = min(t_nat, base["torch_seconds"]) / t
        if rec["backend"] == "amx":  # the mod GEMMs' K chunk this process timed
            from emulinalg.backends import amx

            rec["amx_mod_chunk"] = amx.mod_chunk()
        if stages is not None:
            rec["stages"] = stages
        count = re.search(r"OzakiII\(moduli=(\d+)", rec["scheme"] or "")
        if settings.gemmul8 and count and isinstance(method.precision, (str, int)):  # levels
            _gemmul8_rows(settings, dev, a, b, grade, group.dtype, int(count.group(1)), rec,
                          base, emit, flops, t_nat)  # fmt: skip
        emit(rec)
    if settings.gemmul8 or group.family == "cupy":  # the board drifts: native again after them
        after: dict = {}
        _, t_after, runs = measure(dev, lambda: dev.xp.matmul(a, b),
                                   max(settings.repeat, NATIVE_MIN_RUNS), 1,
                                   settings.case_seconds, after)  # fmt: skip
        emit({**base, **after, "backend": group.family, "precision": "native", "method": "native",
              "when": "after", "scheme": "native", "seconds": t_after, "runs": runs,
              "tflops": flops / t_after / 1e12 if t_after > 0 else None,
              "speedup": t_nat / t_after if t_after > 0 else None,
              "bits_maxrel": base["native_bits_maxrel"],
              "bits_cw": base["native_bits_cw"]})  # fmt: skip


# GEMMul8's counts per dtype (its float32 path stops at 13; it has no complex64)
GEMMUL8_MODULI = {"float64": (2, 20), "float32": (2, 13), "complex128": (2, 20)}


def fewest_matching(bits_at, start: int, lo: int, hi: int, native) -> tuple[int | None, dict]:
    """The fewest count in [lo, hi] whose bits ``bits_at(count)`` (maxrel, componentwise; None
    where the count failed) are both at least ``native``'s, searched from ``start``: down while
    the count below still matches, else up until one does (the bits grow with the count).
    Returns ``(count or None, {count: bits} of every count tried)``."""
    tried: dict = {}

    def ok(c):
        if c not in tried:
            tried[c] = bits_at(c)
        b = tried[c]
        return b is not None and b[0] >= native[0] and b[1] >= native[1]

    c = min(max(start, lo), hi)
    if ok(c):
        while c - 1 >= lo and ok(c - 1):
            c -= 1
        return c, tried
    while c + 1 <= hi:
        c += 1
        if ok(c):
            return c, tried
    return None, tried


_PEERS: dict = {}  # library path -> the loaded GEMMul8 wrapper, or why it did not load


def _gemmul8(settings):
    """The GEMMul8 wrapper loaded from ``settings.gemmul8`` (once per process), or the error
    text."""
    if settings.gemmul8 not in _PEERS:
        try:
            import gemmul8  # ../shared/peers' ctypes wrapper, on sys.path for the run

            _PEERS[settings.gemmul8] = gemmul8.load(settings.gemmul8)
        except Exception as exc:  # reported in the records, the run goes on
            _PEERS[settings.gemmul8] = f"{type(exc).__name__}: {exc}"
    return _PEERS[settings.gemmul8]


def _gemmul8_rows(settings, dev, a, b, grade, dtype, count, rec, base, emit, flops, t_nat):
    """GEMMul8 (accurate mode) beside a level's record ``rec`` of ``count`` moduli (the
    group's common fields ``base``): the same
    count, then the fewest count whose bits match the native product's (``fewest_matching``),
    one record per count tried (method ``GEMMul8(moduli=c)``); ``rec`` gets the summary
    (``gemmul8_same_count_*``, ``gemmul8_best_moduli``, ``gemmul8_best_*``)."""
    g8 = _gemmul8(settings)
    if isinstance(g8, str):
        rec["gemmul8_error"] = g8
        return
    lo, hi = GEMMUL8_MODULI.get(dtype, (0, -1))
    if lo > hi:
        rec["gemmul8_error"] = f"GEMMul8 has no {dtype} product"
        return
    native = (rec["native_bits_maxrel"] or -math.inf, rec["native_bits_cw"] or -math.inf)
    rows = {}

    def bits_at(c):
        name = f"GEMMul8(moduli={c})"
        row = {**base, "backend": "gemmul8", "precision": name, "method": name,
               "scheme": f"GEMMul8 accurate, {c} moduli", "peer": True}  # fmt: skip
        try:
            out, t, runs = measure(dev, lambda: g8.matmul(a, b, c, False)[0], settings.repeat,
                                   settings.warmup, settings.case_seconds, row)  # fmt: skip
            acc = grade(out)
            del out
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
            emit(row)
            return None
        finally:
            getattr(g8, "_work", {}).clear()  # its workspace, not held beside the next count's
        row.update(seconds=t, runs=runs, tflops=flops / t / 1e12 if t > 0 else None,
                   speedup=t_nat / t if t > 0 else None, bits_maxrel=_finite(acc["bits_maxrel"]),
                   bits_cw=_finite(acc["bits_cw"]))  # fmt: skip
        rows[c] = row
        emit(row)
        return (acc["bits_maxrel"], acc["bits_cw"])

    best, _ = fewest_matching(bits_at, count, lo, hi, native)
    same = rows.get(min(max(count, lo), hi))
    if same is not None:
        rec["gemmul8_same_count_moduli"] = min(max(count, lo), hi)
        rec["gemmul8_same_count_speedup"] = same["speedup"]
    rec["gemmul8_best_moduli"] = best
    if best is not None:
        rec["gemmul8_best_speedup"] = rows[best]["speedup"]
        rec["gemmul8_best_bits_maxrel"] = rows[best]["bits_maxrel"]
        rec["gemmul8_best_bits_cw"] = rows[best]["bits_cw"]


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
