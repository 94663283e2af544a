"""Scoped defaults (``emulinalg.config``), safe across threads and asyncio tasks (contextvars)."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, replace

from ._precision import parse

STRATEGIES = ("performant", "eager")
SCHEMES = ("auto", "ozaki1", "ozaki2")


@dataclass(frozen=True)
class Config:
    precision: object = None
    strategy: str = "performant"
    scheme: str = "auto"


_CONFIG = contextvars.ContextVar("emulinalg_config", default=Config())  # noqa: B039 (frozen)


def get_config():
    """The defaults in force in this thread / asyncio task.

    Returns
    -------
    Config
        Frozen dataclass with ``precision`` (None or any value ``precision=`` accepts),
        ``strategy`` ("performant" or "eager") and ``scheme`` ("auto", "ozaki1", "ozaki2").
    """
    return _CONFIG.get()


_UNSET = object()


@contextlib.contextmanager
def config(*, precision=_UNSET, strategy=_UNSET, scheme=_UNSET):
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

    Raises
    ------
    ValueError, TypeError
        For unknown values. Settings are per thread / asyncio task (``contextvars``); nested
        blocks override only what they set.
    """
    cur = _CONFIG.get()
    changes = {}
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
    token = _CONFIG.set(replace(cur, **changes))
    try:
        yield _CONFIG.get()
    finally:
        _CONFIG.reset(token)
