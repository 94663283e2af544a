"""Optional per-stage timings of emulated products ("where the time goes").

The schemes mark their steps with ``stage(name)`` (or the ``staged(name)`` decorator). Nothing is
measured unless a ``recording()`` block is active in the current thread / asyncio task: then
``stage`` is a single context-variable lookup returning a shared null context, so the marks cost
nothing measurable in normal use.

Stages are timed *exclusively*: while an inner stage runs, the enclosing one is paused, so the
stage times add up to at most the wall time of the product and never count anything twice. The
stage names follow the steps of the algorithms (GEMMul8's file names):

``statistics``
    What a precision level costs before the scheme runs: the operands' line exponents and
    norms, the accurate-mode bound GEMM and the certificate's lower bound of |A||B| that choose
    the number of moduli or slices (issue: at most 10 % of the emulated GEMM's time).
``scaling``
    Scaling exponents and truncation to integers (everything in the emulation not marked
    otherwise).
``slicing``
    Scheme II residues modulo each modulus; Scheme I INT8 slices.
``products``
    The integer GEMMs (with Scheme II's modular reduction of their results).
``reconstruction``
    CRT accumulation or shift-reduce, unscaling and the final rounding.

On asynchronous devices (cupy) pass ``sync`` (e.g. the current stream's ``synchronize``): it is
called at every stage boundary so that host clocks see the device's work. That serialises the
pipeline, so a breakdown run is slower than an untimed one; the benchmark times its headline
figures without recording and records the breakdown in one extra run.

Worker threads (dask's threaded scheduler) do not inherit the recorder: their stages are not
recorded, and the benchmark reports the whole product as one ``other`` time there.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

__all__ = ["STAGES", "Recorder", "recording", "stage", "staged"]

STAGES = ("statistics", "scaling", "slicing", "products", "reconstruction")

_RECORDER: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "emulinalg_timing", default=None
)
_NULL = contextlib.nullcontext()
_F = TypeVar("_F", bound=Callable[..., Any])  # a function staged keeps its signature


class Recorder:
    """Exclusive wall-clock seconds and call counts per stage name.

    Parameters
    ----------
    sync : callable, optional
        Called with no arguments before every clock reading (device synchronisation).
    clock : callable, optional
        Seconds as a float; :func:`time.perf_counter` by default.

    Attributes
    ----------
    seconds : dict of str to float
        Exclusive time per stage.
    calls : dict of str to int
        How many times each stage was entered.
    """

    def __init__(
        self,
        sync: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._sync = sync
        self._clock = clock
        self._stack: list[list] = []  # [name, start of the current uninterrupted interval]

    def _now(self) -> float:
        if self._sync is not None:
            self._sync()
        return self._clock()

    def _charge(self, entry, now):
        name, start = entry
        self.seconds[name] = self.seconds.get(name, 0.0) + (now - start)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as ``name``, pausing the enclosing stage meanwhile."""
        now = self._now()
        if self._stack:
            self._charge(self._stack[-1], now)
        entry = [name, now]
        self._stack.append(entry)
        self.calls[name] = self.calls.get(name, 0) + 1
        try:
            yield
        finally:
            now = self._now()
            self._charge(entry, now)
            self._stack.pop()
            if self._stack:
                self._stack[-1][1] = now

    def total(self) -> float:
        """Sum of the stage times in seconds."""
        return sum(self.seconds.values())


def stage(name: str) -> AbstractContextManager[None]:
    """Context manager timing its block as stage ``name`` when a recording is active.

    Parameters
    ----------
    name : str
        One of :data:`STAGES` (other names are recorded as given).

    Returns
    -------
    context manager
        A shared ``contextlib.nullcontext`` when nothing records (the normal case).
    """
    rec = _RECORDER.get()
    return _NULL if rec is None else rec.stage(name)


def staged(name: str) -> Callable[[_F], _F]:
    """Decorator: every call of the function is timed as stage ``name`` (see :func:`stage`)."""

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            rec = _RECORDER.get()
            if rec is None:
                return fn(*args, **kwargs)
            with rec.stage(name):
                return fn(*args, **kwargs)

        return cast(_F, wrapper)

    return decorate


@contextlib.contextmanager
def recording(sync: Callable[[], object] | None = None) -> Iterator[Recorder]:
    """Record the stages of the products computed inside the block (this thread / task only).

    Parameters
    ----------
    sync : callable, optional
        Device synchronisation called at every stage boundary (see the module notes).

    Yields
    ------
    Recorder
        Its ``seconds`` hold the exclusive time per stage once the block has run.

    Examples
    --------
    >>> import numpy as np, emulinalg
    >>> from emulinalg._timing import recording
    >>> a = np.ones((64, 64))
    >>> with emulinalg.config(strategy="eager"), recording() as rec:
    ...     c = emulinalg.matmul(a, a)
    >>> sorted(rec.seconds)
    ['products', 'reconstruction', 'scaling', 'slicing', 'statistics']
    """
    rec = Recorder(sync=sync)
    token = _RECORDER.set(rec)
    try:
        yield rec
    finally:
        _RECORDER.reset(token)
