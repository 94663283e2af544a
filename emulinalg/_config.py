"""Scoped defaults (``emulinalg.config``), safe across threads and asyncio tasks (contextvars),
and the environment variables, read here and nowhere else in the package.

The environment gives the defaults of the :class:`Config` fields below; ``config()`` blocks
override ``precision``, ``strategy`` and ``scheme`` on top of them. The variables are read
whenever the config is asked for (:func:`get_config`), once per call of ``matmul``,
``tensordot``, ``vecdot``, ``einsum`` or ``dot`` (``one_reading``: the steps of a call all see
the values it started with; the chunk products of a dask result read them when it is computed),
so a variable set before a call counts for it, also inside a ``config()`` block and in worker
threads that do not copy the caller's context (they start from these defaults).

``EMULINALG_AMX`` (field ``amx``)
    Unset (the default) or "1": numpy arrays take the amx backend where AMX is usable; "0"
    keeps them on the numpy backend and asks CPUID only (no tile-state request); "1" also has
    the plan say why where AMX is asked for but not usable. The value as set, None when unset.
``EMULINALG_CUPY_KERNELS`` (field ``cupy_kernels``)
    "0" turns the cupy backend's CUDA kernels off (the generic Array API path runs, e.g. to
    compare with it); anything else, or unset, keeps them.
``EMULINALG_FUSED`` (field ``fused``)
    "0" turns the fused CUTLASS INT8 GEMMs of ``emulinalg._cuda`` off (cuBLAS runs them).
``EMULINALG_DASK_MODE`` (field ``dask_mode``)
    The graph of Scheme II products on dask arrays: "shared" or "dd" (double-double); unset or
    blank, the chunks' backend chooses ("dd" for cupy chunks, "shared" otherwise). Lower-cased;
    the dask backend rejects other values when it builds a graph.

Two more are read by the compiled AMX module itself (``emulinalg._amx``, process-wide, before
any Python code could pass them on): ``EMULINALG_AMX_BLOCKING``, the tile GEMM's blocking at
import (the spec ``emulinalg._amx.set_blocking`` takes), and ``EMULINALG_AMX_CACHE_MB``, the
packed-panel cache's limit in MiB (src_amx/README.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ._precision import Precision, parse

STRATEGIES = ("performant", "eager")
SCHEMES = ("auto", "ozaki1", "ozaki2")
# The values of ``config(strategy=..., scheme=...)`` (the tuples above, for the type checker).
Strategy: TypeAlias = Literal["performant", "eager"]
SchemeFamily: TypeAlias = Literal["auto", "ozaki1", "ozaki2"]


@dataclass(frozen=True)
class Config:
    """The defaults in force (:func:`get_config`): see there for the fields."""

    precision: Precision = None
    strategy: Strategy = "performant"
    scheme: SchemeFamily = "auto"
    # from the environment (from_environ; the module notes say what each variable means)
    amx: str | None = None
    cupy_kernels: bool = True
    fused: bool = True
    dask_mode: str | None = None


def from_environ(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The :class:`Config` fields the environment variables set (the module notes)."""
    return {
        "amx": environ.get("EMULINALG_AMX"),
        "cupy_kernels": environ.get("EMULINALG_CUPY_KERNELS", "1") != "0",
        "fused": environ.get("EMULINALG_FUSED", "1") != "0",
        "dask_mode": environ.get("EMULINALG_DASK_MODE", "").strip().lower() or None,
    }


# What config() blocks set in this thread / task, as (field, value) pairs over the defaults.
_CONFIG: contextvars.ContextVar[tuple[tuple[str, Any], ...]] = contextvars.ContextVar(
    "emulinalg_config", default=()
)


# The config a product call read when it started (``one_reading``); None outside calls. A call's
# steps ask for the config a dozen times: one reading keeps the environment off the host path
# of each step (what a small product that goes native pays on top of the native one).
_CALL: contextvars.ContextVar[Config | None] = contextvars.ContextVar(
    "emulinalg_call_config", default=None
)


def get_config() -> Config:
    """The defaults in force in this thread / asyncio task.

    Returns
    -------
    Config
        Frozen dataclass with ``precision`` (None or any value ``precision=`` accepts),
        ``strategy`` ("performant" or "eager") and ``scheme`` ("auto", "ozaki1", "ozaki2"),
        and the fields the ``EMULINALG_*`` environment variables set, read now (``amx``,
        ``cupy_kernels``, ``fused``, ``dask_mode``; the module ``emulinalg._config`` says what
        each variable means).
    """
    read = _CALL.get()
    if read is not None:
        return read
    return Config(**from_environ(), **dict(_CONFIG.get()))


def one_reading(fn):
    """Decorator of the product calls: ``get_config`` reads the environment and the ``config()``
    blocks once per outermost call (per thread / task) and gives every step of it that reading."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if _CALL.get() is not None:  # an inner call: the outer one's reading
            return fn(*args, **kwargs)
        token = _CALL.set(get_config())
        try:
            return fn(*args, **kwargs)
        finally:
            _CALL.reset(token)

    return call


# "not given" (None is a precision); typed Any so that it can default the typed parameters
_UNSET: Any = object()


@contextlib.contextmanager
def config(
    *,
    precision: Precision = _UNSET,
    strategy: Strategy = _UNSET,
    scheme: SchemeFamily = _UNSET,
) -> Iterator[Config]:
    """Set defaults for the products called inside the ``with`` block.

    Parameters
    ----------
    precision : see :func:`emulinalg.matmul`
        Default precision for calls that pass ``precision=None``.
    strategy : {"performant", "eager"}
        "performant" (default) emulates only where the backend predicts emulation to be faster
        than native at the requested accuracy (or native cannot reach it); "eager" always
        emulates.
    scheme : {"auto", "ozaki1", "ozaki2"}
        Scheme family used for precision levels ("float64", "float32", bit counts); "auto" is
        Scheme II.

    Yields
    ------
    Config
        The defaults in force inside the block (:func:`get_config`'s).

    Raises
    ------
    ValueError, TypeError
        For unknown values. Settings are per thread / asyncio task (``contextvars``); nested
        blocks override only what they set.
    """
    changes = dict(_CONFIG.get())
    if precision is not _UNSET:
        parse(precision)
        changes["precision"] = precision
    if strategy is not _UNSET:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        changes["strategy"] = strategy
    if scheme is not _UNSET:
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        changes["scheme"] = scheme
    token = _CONFIG.set(tuple(changes.items()))
    reading = _CALL.set(None)  # a block inside a call (a callback) takes effect there too
    try:
        yield get_config()
    finally:
        _CALL.reset(reading)
        _CONFIG.reset(token)
