"""A small cost model per backend: predicted seconds of the native and the emulated product.

``strategy="performant"`` (the default) emulates only where the model predicts emulation to be
faster than the native GEMM at the asked precision (cuBLAS's PERFORMANT choice, Schwarz et al.,
SCA/HPCAsia 2026). The model is deliberately coarse — three throughputs and a per-entry cost:

    native   = flops / native_flops[dtype]                flops = 2 m n k batch (x4 complex)
    emulated = gemms * 2 m n k batch / int_gemm_ops       the integer GEMMs
             + count * entries * batch * entry_seconds    residues/slices, CRT/shift-reduce
             + 2 m n k batch / stats_flops                the certificate's lower-bound GEMM
             + m n batch * stats_entry_seconds            the certificate's passes over C
             + fixed_seconds

with ``entries = m k + k n + m n`` (times the complex parts) and ``count`` the moduli or slices.
The figures are fitted from the project's own benchmark records (``calibrate``: the stage
breakdown of ``python -m emulinalg bench`` separates GEMM time from per-entry work) and can be
replaced per backend with ``set_cost_model``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._precision import REAL_DTYPE, OzakiI, OzakiII
from .algorithm.moduli import crt_constants


@dataclass(frozen=True)
class CostModel:
    """Throughputs of one backend on one machine.

    Attributes
    ----------
    native_flops : dict of str to float
        Effective flop/s of the native product per dtype name ("float64", "float32", and
        optionally "complex128"/"complex64", else the real dtype's rate; a complex product
        counts 4 real products' flops).
    int_gemm_ops : float
        Integer-GEMM operations per second (2 m n k per GEMM) as the scheme's GEMMs run.
    entry_seconds : float
        Seconds per matrix entry per modulus/slice of the memory-bound stages.
    stats_flops : float
        flop/s of the certificate's lower-bound GEMM of magnitudes (``math.inf``: free).
    stats_entry_seconds : float
        Seconds per output entry of the statistics' passes over the m x n output (the
        certificate's per-entry counts, its refinement): where the lower-bound GEMM runs as fast
        as the products (AMX), these, not the GEMM, make most of the statistics at N <= 8192.
    fixed_seconds : float
        Per-call overhead (launches, Python).
    source : str
        Where the figures come from (records file and command, or "user").
    native_curve : dict of str to tuple of (float, float)
        Where the native rate depends on the size: per dtype name, ``(flops, flop/s)`` points
        measured at several sizes (ascending flops); ``native_seconds`` interpolates the rate
        linearly in log(flops) between them and keeps the end points' rates beyond (``{}``:
        ``native_flops`` at every size). ``calibrate(..., native_by_size=True)`` fits it. Read
        from the top-level model only (as ``native_flops``), not from ``complex_model``.
    int_gemm_curve : tuple of (float, float)
        Where the integer GEMMs' rate depends on the size: ``(ops, ops/s)`` points per GEMM
        (2 m n k batch, ascending), interpolated as ``native_curve`` (``()``: ``int_gemm_ops`` at
        every size). ``calibrate(..., native_by_size=True)`` fits it where the records have
        several sizes (the AMX tile GEMMs: 13 Top/s at N = 2048, 17 at 8192).
    complex_model : CostModel or None
        The emulation figures of complex products where they were fitted apart from the real
        ones (``calibrate(..., split_complex=True)``: 3M runs three GEMMs per modulus over three
        parts, at rates of its own); None: the same figures for both. ``set_cost_model``
        changes keep it unless given (``complex_model=None`` applies the top level to both).
    """

    native_flops: dict[str, float]
    int_gemm_ops: float
    entry_seconds: float
    stats_flops: float = math.inf
    fixed_seconds: float = 0.0
    source: str = "user"
    stats_entry_seconds: float = 0.0
    int_gemm_curve: tuple[tuple[float, float], ...] = ()
    complex_model: CostModel | None = None
    native_curve: dict[str, tuple[tuple[float, float], ...]] = dataclasses.field(
        default_factory=dict
    )

    def native_seconds(self, dtype: str, m: int, n: int, k: int, batch: int = 1) -> float:
        """Predicted seconds of the native product of ``dtype`` ("float64", "complex64", ...)."""
        flops = _flops(dtype, m, n, k, batch)
        points = self.native_curve.get(dtype)
        if points:
            return flops / _interpolate_rate(points, flops)
        rate = self.native_flops.get(dtype) or self.native_flops[REAL_DTYPE[dtype]]
        return flops / rate

    def emulated_seconds(
        self, scheme: OzakiI | OzakiII, dtype: str, m: int, n: int, k: int, batch: int = 1
    ) -> float:
        """Predicted seconds of ``scheme`` (an ``OzakiI``/``OzakiII``) on this backend."""
        cplx = dtype.startswith("complex")
        if cplx and self.complex_model is not None:
            return self.complex_model.emulated_seconds(scheme, dtype, m, n, k, batch)
        # the accurate mode's bound GEMM: one more integer GEMM, unless a statistics term was
        # fitted (the records' statistics stage holds it)
        fitted_stats = not math.isinf(self.stats_flops) or self.stats_entry_seconds > 0
        if isinstance(scheme, OzakiII):
            count = scheme.moduli
            gemms = count * scheme.gemms_per_modulus(cplx) + (
                scheme.mode == "accurate" and not fitted_stats
            )
        else:
            count = scheme.slices
            gemms = scheme.gemms * (4 if cplx else 1)
        mnk = m * n * k * batch
        entries = (m * k + k * n + m * n) * batch * _entry_planes(scheme, cplx)
        rate = (_interpolate_rate(self.int_gemm_curve, 2.0 * mnk) if self.int_gemm_curve
                else self.int_gemm_ops)  # fmt: skip
        return (
            gemms * 2 * mnk / rate
            + count * entries * self.entry_seconds
            + 2 * mnk / self.stats_flops
            + m * n * batch * self.stats_entry_seconds
            + self.fixed_seconds
        )


def _entry_planes(scheme, cplx: bool) -> int:
    """Planes per modulus (or slice) that the per-entry stages write and read: Scheme II's
    GEMMs per modulus (3M's three, the Gaussian moduli's two), else 3 for complex."""
    if isinstance(scheme, OzakiII):
        return scheme.gemms_per_modulus(cplx)
    return 3 if cplx else 1


def _interpolate_rate(points: tuple[tuple[float, float], ...], flops: float) -> float:
    """The rate at ``flops`` from ``(flops, rate)`` points (ascending): linear in log(flops)
    between them, the end points' rates beyond."""
    if flops <= points[0][0]:
        return points[0][1]
    for (f0, r0), (f1, r1) in itertools.pairwise(points):
        if flops <= f1:
            t = math.log(flops / f0) / math.log(f1 / f0)
            return r0 + t * (r1 - r0)
    return points[-1][1]


def _flops(dtype: str, m: int, n: int, k: int, batch: int) -> int:
    return 2 * m * n * k * batch * (4 if dtype.startswith("complex") else 1)


@functools.lru_cache(maxsize=1024)  # asked before every performant product
def likely_count(
    family: str, bits: float, k: int, weight: float | None = None
) -> OzakiI | OzakiII:
    """The fewest moduli/slices a level of ``bits`` can need at inner dimension ``k`` (from the
    certificate with equal magnitudes). ``weight``: the native form's ``certificate.Target.weight``
    (its l2 terms put L_n about bits - log2(weight) + 1.5 on flat data; 1 less here, so as not to
    overestimate); None: the strict form (the rounding error must sit ~log2(k)/2 + 3 bits below
    the level). Used to skip the statistics when even that count loses to native."""
    if weight is not None and family == "ozaki2":
        need = bits - math.log2(weight) + 0.5
    else:
        need = bits + 3 + 0.5 * math.log2(max(k, 1))
    if family == "ozaki1":
        return OzakiI(slices=max(1, min(13, math.ceil((need + 2) / 8))))
    n = next((n for n in range(2, 21) if need <= crt_constants(n).L), 20)
    return OzakiII(moduli=n, mode="accurate")


# Fitted with ``calibrate`` from the committed records named in ``source``; the tests re-fit them.
_BUILTIN = {
    "numpy": CostModel(
        # 2-core CI machine, OpenBLAS: the integer GEMMs run in float BLAS at about the native
        # rate and the elementwise stages in numpy, so emulation is never faster here.
        native_flops={"float64": 1.1e10, "float32": 4.7e10},
        int_gemm_ops=1.9e10,
        entry_seconds=5.2e-8,
        source="docs/benchmarks/ci-cpu/square.jsonl",
    ),
    "cupy": CostModel(
        # H100, CUDA kernels of src_cuda/ (tensor-core residues, one-pass CRT, statistics
        # hooks) with the fused CUTLASS INT8 GEMM, the levels' refit in the kernels
        # (refit_pick); complex products modulo the Gaussian moduli (two fused GEMMs per
        # modulus). Fitted with split_complex=True from the eager levels' bench rows of
        # 2026-12-06 (float64 4096-16384, float32 16384, complex128 4096-8192), with a per-call
        # fixed cost (1.5 ms real, 3 ms complex: the least-squares choice over the rows'
        # relative errors) that keeps float64 N = 4096 native. Other GPUs move it by their
        # measured rates (``FITTED_ON``, ``_calibration``).
        native_flops={"float64": 5.55e13, "float32": 5.39e13, "complex128": 5.18e13},
        int_gemm_ops=1.54e15,
        entry_seconds=1.22e-12,
        stats_flops=5.74e14,
        fixed_seconds=1.5e-3,
        source="docs/benchmarks/h100/cost_fit_2026-12-06.jsonl",
        complex_model=CostModel(
            native_flops={"complex128": 5.18e13},
            int_gemm_ops=1.59e15,
            entry_seconds=1.55e-12,
            stats_flops=1.28e14,
            fixed_seconds=3e-3,
            source="docs/benchmarks/h100/cost_fit_2026-12-06.jsonl",
        ),
    ),
    "amx": CostModel(
        # 16-core AMX host (numpy arrays default to the amx backend there): Scheme II's stages
        # in C++, one mod-reducing INT8 tile GEMM per modulus, the certificate, refinement and
        # refit in C++ (one pass for the counts and the exact needs), the complex part check in
        # C++. native is numpy's OpenBLAS (torch's MKL is faster still). Fitted (``_FIT``) from
        # the eager bench rows of one start of the host (2026-12-07: float64 and float32 N =
        # 2048-8192 phi 0.5 and 1, float64 16384, complex128 4096 and 8192), whose rates were
        # measured in the same start (``FITTED_ON``): rates per size (OpenBLAS's; the tile
        # GEMMs' 11-19 Top/s), the statistics as a GEMM and a per-output-entry term, the stages
        # scaled to the timed medians. There it takes float64 emulated from N ~ 6000 (1.13x
        # predicted at 8192, 0.99-1.14x measured), float32 native (0.92x predicted at 8192,
        # 0.98-1.07x measured), complex128 emulated at 8192 (1.76x; 1.79x measured). Other
        # starts and hosts move it by their measured rates (``_calibration``).
        native_flops={"float64": 5.63e11, "float32": 1.10e12, "complex128": 5.74e11},
        native_curve={
            "complex128": ((5.50e11, 5.74e11), (4.40e12, 5.63e11)),
            "float64": ((1.72e10, 5.50e11), (1.37e11, 5.63e11), (1.10e12, 5.83e11),
                        (8.80e12, 6.19e11)),
            "float32": ((1.72e10, 1.06e12), (1.37e11, 1.15e12), (1.10e12, 1.16e12),
                        (8.80e12, 1.07e12)),
        },
        int_gemm_ops=1.50e13,
        int_gemm_curve=((1.72e10, 1.09e13), (1.37e11, 1.85e13), (1.10e12, 1.60e13),
                        (8.80e12, 1.50e13)),
        entry_seconds=1.06e-10,
        stats_flops=1.45e13,
        stats_entry_seconds=3.54e-9,
        source="docs/benchmarks/xeon-amx-16c/cost_fit_2026-12-07.jsonl",
        complex_model=CostModel(
            native_flops={"complex128": 5.74e11},
            int_gemm_ops=1.46e13,
            int_gemm_curve=((1.37e11, 1.21e13), (1.10e12, 1.50e13)),
            entry_seconds=9.44e-11,
            stats_entry_seconds=1.95e-8,
            source="docs/benchmarks/xeon-amx-16c/cost_fit_2026-12-07.jsonl (complex records)",
        ),
    ),
}
# How each built-in model is fitted from its source (``calibrate``'s options; the tests re-fit).
_FIT: dict[str, dict[str, Any]] = {
    "numpy": {},
    "cupy": {"split_complex": True, "fixed_seconds": _BUILTIN["cupy"].fixed_seconds,
             "complex_fixed_seconds": _BUILTIN["cupy"].complex_model.fixed_seconds},
    "amx": {"split_complex": True, "native_by_size": True, "stats_by_entry": True,
            "stages_to_seconds": True},
}
_USER: dict[str, CostModel] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class DeviceRates:
    """What a device does, measured (``emulinalg._calibration.measure``) or from its datasheet:
    the rates ``for_device`` moves a fitted model by.

    Attributes
    ----------
    name : str
        The device ("NVIDIA H200", a CPU model).
    native_flops : dict of str to float
        flop/s of the native GEMM per dtype name (at least "float64" and "float32").
    int8_ops : float
        INT8 GEMM operations per second (2 m n k per GEMM).
    bandwidth : float
        Bytes per second read and written by a device copy (on AMX hosts: by the residue pack,
        ``emulinalg._calibration.measure``).
    """

    name: str
    native_flops: dict[str, float]
    int8_ops: float
    bandwidth: float


# The device each built-in model was fitted on, its rates as ``_calibration.measure`` finds
# them, from the same machine and day as the model's records. cupy: the GEMMs' and the copy's from
# measure (docs/benchmarks/h100/calibration_2026-12-06.jsonl, the mean of two), the INT8 rate
# the schemes' path reaches at N = 8192 (levels_gemmul8_2026-12-06.jsonl, int8_gemm_s).
FITTED_ON = {
    "cupy": DeviceRates(
        "NVIDIA H100 80GB HBM3",
        {"float64": 5.84e13, "float32": 5.12e13, "complex128": 6.27e13, "complex64": 5.35e13},
        int8_ops=1.45e15,
        bandwidth=2.73e12,
    ),
    # the mean of three measurements (before, between and after the model's rows) on the same
    # start: docs/benchmarks/xeon-amx-16c/calibration_2026-12-07.jsonl
    "amx": DeviceRates(
        "Intel(R) Xeon(R) Processor (16 threads)",
        {"float64": 5.38e11, "float32": 1.11e12, "complex128": 5.92e11, "complex64": 1.18e12},
        int8_ops=1.56e13,
        bandwidth=5.43e10,
    ),
}


def for_device(backend_name: str, rates: DeviceRates, source: str | None = None) -> CostModel:
    """The backend's fitted model moved to another device of its kind: the native rates are
    the device's own; the integer GEMMs and the certificate's GEMM scale with its INT8 rate, the
    per-entry stages (memory-bound kernels) with its bandwidth, both relative to the device the
    model was fitted on (``FITTED_ON``); a native rate curve (``native_curve``) keeps its shape,
    scaled by the dtype's measured rate over the fitted device's. ``source``: the plan's note of
    where the figures come from (default: the rates' device).

    Raises
    ------
    ValueError
        For a backend without a fitted device, or rates that are not positive."""
    if backend_name not in FITTED_ON:
        raise ValueError(f"no fitted device for backend {backend_name!r}")
    ref, base = FITTED_ON[backend_name], _BUILTIN[backend_name]
    if not (rates.int8_ops > 0 and rates.bandwidth > 0):
        raise ValueError("DeviceRates.int8_ops and bandwidth must be positive")
    g, bw = rates.int8_ops / ref.int8_ops, rates.bandwidth / ref.bandwidth
    source = source or f"{rates.name}: {base.source} moved by its measured rates"

    def move(m: CostModel) -> CostModel:
        native = {d: rates.native_flops.get(d) or rates.native_flops[REAL_DTYPE[d]]
                  for d in m.native_flops}  # fmt: skip
        native.update({d: v for d, v in rates.native_flops.items() if v})
        # a native rate that changes with the size keeps its shape, moved by the measured rate
        # against the fitted device's (a dtype either did not measure: the measured rate alone)
        curve = {d: tuple((f, r * rates.native_flops[d] / ref.native_flops[d]) for f, r in pts)
                 for d, pts in m.native_curve.items()
                 if rates.native_flops.get(d) and ref.native_flops.get(d)}  # fmt: skip
        return dataclasses.replace(
            m, native_flops=native, native_curve=curve, int_gemm_ops=m.int_gemm_ops * g,
            int_gemm_curve=tuple((f, r * g) for f, r in m.int_gemm_curve),
            entry_seconds=m.entry_seconds / bw, stats_flops=m.stats_flops * g, source=source,
            complex_model=None if m.complex_model is None else move(m.complex_model),
        )  # fmt: skip

    model = move(base)
    _check(model)
    return model


def get_cost_model(backend_name: str, flops: float | None = None) -> CostModel | None:
    """The cost model used for ``backend_name`` ("numpy", "cupy", "amx"), or None: the one set
    with ``set_cost_model``; else, for a GPU other than the one the built-in model was fitted
    on and for any AMX host, the model moved to its measured rates
    (``emulinalg._calibration``: measured on first use, cached per device and library
    version); else the built-in one.

    Parameters
    ----------
    backend_name : str
        A backend's name, as ``Plan.backend`` gives it.
    flops : float, optional
        2 m n k (x4 complex) of the product asking: one too small for the emulation to win on
        any host of the backend (``_calibration.MEASURE_MIN_FLOPS``) does not start a
        measurement; it gets the measured model where the rates are known, else the built-in.

    Returns
    -------
    CostModel or None
        None for a backend without a model (its products run as the strategy's default says:
        native under "performant"). The model in force, not a copy: change it with
        ``set_cost_model`` (the verdicts made with a model are reused while it is in force).
    """
    with _LOCK:
        if backend_name in _USER:
            return _USER[backend_name]
    if backend_name in FITTED_ON:
        from . import _calibration

        moved = _calibration.device_model(backend_name, flops)
        if moved is not None:
            return moved
    return _BUILTIN.get(backend_name)


def _check(model: CostModel) -> None:
    rates = model.native_flops
    if not isinstance(rates, dict) or not all(rates.get(d, 0) > 0 for d in ("float64", "float32")):
        raise ValueError("CostModel.native_flops needs positive 'float64' and 'float32' rates")
    if not all(v > 0 for v in rates.values()):
        raise ValueError("CostModel.native_flops rates must be positive")
    if not isinstance(model.native_curve, dict):
        raise ValueError("CostModel.native_curve must be a dict (dtype name -> points)")
    for dt, points in model.native_curve.items():
        if not points or not _ascending_positive(points):
            raise ValueError(f"CostModel.native_curve[{dt!r}]: positive (flops, flop/s) points "
                             "in ascending flops")  # fmt: skip
    if not _ascending_positive(model.int_gemm_curve):
        raise ValueError("CostModel.int_gemm_curve: positive (ops, ops/s) points in ascending ops")
    if not (model.int_gemm_ops > 0 and model.stats_flops > 0):
        raise ValueError("CostModel.int_gemm_ops and stats_flops must be positive")
    if not (model.entry_seconds >= 0 and model.fixed_seconds >= 0
            and model.stats_entry_seconds >= 0):  # fmt: skip
        raise ValueError("CostModel.entry_seconds, stats_entry_seconds and fixed_seconds must "
                         "be >= 0")


def _ascending_positive(points) -> bool:
    """Whether a rate curve's ``(size, rate)`` points are positive, in strictly ascending size."""
    sizes = [f for f, _ in points]
    return sizes == sorted(set(sizes)) and all(f > 0 and r > 0 for f, r in points)


def set_cost_model(backend_name: str, model: CostModel | None = None, **changes: Any) -> None:
    """Replace (``model``) or adjust (``changes``: fields of :class:`CostModel`) the cost model
    of a backend ("numpy", "cupy", "amx") for this process; ``set_cost_model(name)`` restores
    the built-in one. The model's ``source`` becomes "user" unless ``source=`` is given. A
    ``native_flops`` change drops the ``native_curve`` of the dtypes it names (their rate is
    then the one given); ``native_curve=None`` drops every curve.

    Raises
    ------
    ValueError
        For an unknown backend name or a model with missing/non-positive rates.
    TypeError
        For a field name that :class:`CostModel` does not have, or a ``model`` that is not one.
    """
    if backend_name not in _BUILTIN:
        raise ValueError(
            f"unknown backend {backend_name!r}: expected one of {', '.join(sorted(_BUILTIN))}"
        )
    if model is not None and not isinstance(model, CostModel):
        raise TypeError(f"model must be an emulinalg.CostModel, got {type(model).__name__}")
    with _LOCK:
        if model is None and not changes:
            _USER.pop(backend_name, None)
            return
        base = model or _USER.get(backend_name) or _BUILTIN[backend_name]
        if changes.get("native_curve", {}) is None:
            changes["native_curve"] = {}
        if "native_flops" in changes and "native_curve" not in changes:
            # a rate given for a dtype replaces its measured curve
            given = changes["native_flops"] or {}
            changes["native_curve"] = {d: c for d, c in base.native_curve.items()
                                       if d not in given}  # fmt: skip
        new = dataclasses.replace(base, **{"source": "user", **changes})
        _check(new)
        # the model keeps its own rates: a caller's dict changed later does not change it
        # (decisions made with a model are reused while it is in force: emulinalg._api)
        new = dataclasses.replace(new, native_flops=dict(new.native_flops),
                                  native_curve=dict(new.native_curve))  # fmt: skip
        _USER[backend_name] = new


def emulation_faster(
    backend_name: str, scheme: OzakiI | OzakiII, dtype: str, m: int, n: int, k: int, batch: int = 1
) -> bool:
    """True when ``scheme`` is predicted faster than the native product (False without a
    model: native is the safe default)."""
    model = get_cost_model(backend_name, _flops(dtype, m, n, k, batch))
    if model is None:
        return False
    return model.emulated_seconds(scheme, dtype, m, n, k, batch) < model.native_seconds(
        dtype, m, n, k, batch
    )


def calibrate(
    records: str | Iterable[Mapping[str, Any]],
    source: str = "records",
    split_complex: bool = False,
    fixed_seconds: float = 0.0,
    complex_fixed_seconds: float | None = None,
    native_by_size: bool = False,
    stats_by_entry: bool = False,
    stages_to_seconds: bool = False,
) -> CostModel:
    """Fit a :class:`CostModel` from benchmark records (dicts or a JSON-lines path).

    Native rates: median native flop/s per dtype. Integer GEMMs: total GEMM operations over
    total ``products`` stage seconds. Per-entry cost: ``slicing + reconstruction + scaling``
    seconds over count x entries. Certificate: the ``statistics`` stage where recorded.
    Breakdown runs much slower than the timed median (first-call compilation) are skipped.
    ``split_complex=True`` fits the emulation figures of real and complex records apart (the
    complex ones become ``complex_model``), where both kinds are there.

    ``fixed_seconds``: a per-call cost measured apart (e.g. the device's idle time within one
    product: a kernel profile's wall minus device time), which the stage timers spread over
    the stages; each record's stages are scaled by ``(seconds - fixed_seconds) / seconds``
    before the fit and the model keeps it as its ``fixed_seconds``, so that the rates are not
    charged with it at the records' sizes and smaller products pay it in full.
    ``complex_fixed_seconds``: the complex records' own (default ``fixed_seconds``).
    ``native_by_size=True``: also the native rate per size (``native_curve``: the median rate
    of each size, for dtypes measured at several sizes), where the native library's rate
    changes with the size (OpenBLAS's ZGEMM on the AMX host: 0.81 TFLOP/s at N = 4096, 0.57 at
    8192), and the integer GEMMs' (``int_gemm_curve``, where the records have several sizes).
    ``stats_by_entry=True``: the ``statistics`` stage as a GEMM term plus a term per output entry
    (``stats_entry_seconds``), least squares on the records' relative errors (both terms >= 0;
    one term where the records' sizes cannot tell them apart), instead of the GEMM term alone.
    ``stages_to_seconds=True``: each record's stages scaled to sum to its ``seconds`` (the
    median of the timed runs; the stage breakdown comes from one more run with timers, which
    on a CPU host can run 10-30 % slower), so that the model predicts the timed medians.

    Returns
    -------
    CostModel
        With ``source`` as given.

    Raises
    ------
    ValueError
        Records without native times or without emulated stage breakdowns, or, with
        ``fixed_seconds``, an emulated record without its ``seconds``.
    OSError
        A path that cannot be read.
    """
    if isinstance(records, str):
        with open(records) as fh:
            records = [json.loads(line) for line in fh if line.strip()]
    if split_complex:
        complex_records = [r for r in records if r["dtype"].startswith("complex")]
        real_records = [r for r in records if not r["dtype"].startswith("complex")]
        if complex_records and real_records:
            real = calibrate(real_records, source, fixed_seconds=fixed_seconds,
                             native_by_size=native_by_size, stats_by_entry=stats_by_entry,
                             stages_to_seconds=stages_to_seconds)  # fmt: skip
            cfix = fixed_seconds if complex_fixed_seconds is None else complex_fixed_seconds
            cplx = calibrate(complex_records, source, fixed_seconds=cfix,
                             native_by_size=native_by_size, stats_by_entry=stats_by_entry,
                             stages_to_seconds=stages_to_seconds)  # fmt: skip
            return dataclasses.replace(
                real, native_flops={**cplx.native_flops, **real.native_flops},
                native_curve={**cplx.native_curve, **real.native_curve},
                complex_model=dataclasses.replace(cplx, native_curve={}),
            )  # fmt: skip
    native: dict[str, list[float]] = {}
    by_size: dict[str, dict[int, list[float]]] = {}
    ops = gemm_s = ent = ent_s = 0.0
    stats: list[tuple[float, float, float]] = []  # (2 m n k, m n, seconds) per record
    gemm_by_size: dict[float, list[float]] = {}  # per-GEMM ops -> each record's GEMM rate
    for r in records:
        flops = _flops(r["dtype"], r["m"], r["n"], r["k"], r.get("batch", 1))
        if r.get("native_seconds"):
            native.setdefault(r["dtype"], []).append(flops / r["native_seconds"])
            by_size.setdefault(r["dtype"], {}).setdefault(flops, []).append(
                flops / r["native_seconds"]
            )
        scheme = _parse_scheme(r.get("scheme", "native"))
        st = r.get("stages")
        if scheme is None or not st:
            continue
        if sum(st.values()) > 1.5 * r.get("seconds", math.inf):  # a cold run (compilation)
            continue
        if stages_to_seconds and r.get("seconds"):
            st = {key: v * r["seconds"] / sum(st.values()) for key, v in st.items()}
        if fixed_seconds:
            if not r.get("seconds"):
                raise ValueError("calibrate: fixed_seconds needs each record's 'seconds'")
            keep = max(0.0, 1.0 - fixed_seconds / r["seconds"])
            st = {key: v * keep for key, v in st.items()}
        cplx = r["dtype"].startswith("complex")
        m, n, k, b = r["m"], r["n"], r["k"], r.get("batch", 1)
        if isinstance(scheme, OzakiII):
            count, gemms = scheme.moduli, scheme.moduli * scheme.gemms_per_modulus(cplx)
        else:
            count, gemms = scheme.slices, scheme.gemms * (4 if cplx else 1)
        ops += gemms * 2 * m * n * k * b
        gemm_s += st.get("products", 0.0)
        if st.get("products"):
            gemm_by_size.setdefault(2.0 * m * n * k * b, []).append(
                gemms * 2 * m * n * k * b / st["products"])
        ent += count * (m * k + k * n + m * n) * b * _entry_planes(scheme, cplx)
        ent_s += st.get("slicing", 0.0) + st.get("reconstruction", 0.0) + st.get("scaling", 0.0)
        if st.get("statistics"):
            stats.append((2.0 * m * n * k * b, float(m * n * b), st["statistics"]))
    if not native or not gemm_s or not ent:
        raise ValueError("calibrate: records need native times and emulated stage breakdowns")
    median = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    curve = {
        d: tuple((float(f), median(v)) for f, v in sorted(sizes.items()))
        for d, sizes in by_size.items() if native_by_size and len(sizes) > 1
    }  # fmt: skip
    gemm_curve = tuple(
        (f, median(v)) for f, v in sorted(gemm_by_size.items())
    ) if native_by_size and len(gemm_by_size) > 1 else ()  # fmt: skip
    st_s = sum(sec for _, _, sec in stats)
    stats_flops, per_entry = (sum(f for f, _, _ in stats) / st_s) if st_s else math.inf, 0.0
    if stats_by_entry and stats:
        stats_flops, per_entry = _fit_statistics(stats)
    return CostModel(
        native_flops={d: median(v) for d, v in native.items()},
        native_curve=curve,
        int_gemm_ops=ops / gemm_s,
        entry_seconds=ent_s / ent,
        stats_flops=stats_flops,
        stats_entry_seconds=per_entry,
        int_gemm_curve=gemm_curve,
        fixed_seconds=fixed_seconds,
        source=source,
    )


def _fit_statistics(stats: list[tuple[float, float, float]]) -> tuple[float, float]:
    """``(stats_flops, stats_entry_seconds)`` of ``seconds = flops / stats_flops + entries *
    stats_entry_seconds`` over ``(flops, entries, seconds)`` rows: least squares on the relative
    errors, each term >= 0 (the better of the one-term fits where the two-term one would make a
    term negative, or where every row has the same flops per entry)."""
    rows = [(f / s, e / s) for f, e, s in stats if s > 0]  # 1 = x a + y b, relative
    sxx = sum(x * x for x, _ in rows)
    syy = sum(y * y for _, y in rows)
    sxy = sum(x * y for x, y in rows)
    sx, sy = sum(x for x, _ in rows), sum(y for _, y in rows)
    det = sxx * syy - sxy * sxy
    fits = [(sx / sxx, 0.0), (0.0, sy / syy)]  # GEMM term alone, per-entry term alone
    if det > 1e-12 * sxx * syy:
        a, b = (sx * syy - sy * sxy) / det, (sy * sxx - sx * sxy) / det
        if a >= 0 and b >= 0:
            fits.append((a, b))

    def residual(ab):
        return sum((1 - x * ab[0] - y * ab[1]) ** 2 for x, y in rows)

    a, b = min(fits, key=residual)
    return (1.0 / a if a > 0 else math.inf), b


def _parse_scheme(text: str) -> OzakiI | OzakiII | None:
    if text.startswith("OzakiII("):
        items = text[8:-1].split(", ")
        inner = dict(p.split("=") for p in items if "=" in p)
        return OzakiII(moduli=int(inner["moduli"]), mode=inner.get("mode", "accurate"),
                       gaussian="gaussian" in items)  # fmt: skip
    if text.startswith("OzakiI("):
        return OzakiI(slices=int(text[7:-1].split("=")[1]))
    return None


__all__ = [
    "CostModel",
    "DeviceRates",
    "calibrate",
    "emulation_faster",
    "for_device",
    "get_cost_model",
    "set_cost_model",
]
