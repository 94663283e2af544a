"""What each product did: the plan a user can inspect, and the native-fallback counter."""

from __future__ import annotations

import collections
import contextvars
import logging
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Plan:
    """How one product was computed.

    Attributes
    ----------
    backend : str
        "numpy", "cupy", "dask", ... (the array family's backend).
    precision : str
        The target level ("float64", "float32", "53 bits", "native", or the explicit scheme).
    scheme : str
        "native" or the scheme with its parameters, e.g. "OzakiII(moduli=16, mode=accurate)".
    gemms : int
        Integer GEMMs per real product (0 for native).
    k_block : int or None
        Inner-dimension block of the integer GEMMs where exactness needed blocking.
    fallback : str or None
        Why the product, or part of it, was computed natively.
    native_entries : int
        Output entries taken from the native product (non-finite inputs, uncertifiable entries,
        the lines and block of the certificate's line patch).
    notes : list of str
        Further decisions (bound used, counts).
    shape : tuple of int
        (batch, m, n, k) of the underlying GEMM.
    """

    backend: str
    precision: str
    scheme: str = "native"
    gemms: int = 0
    k_block: int | None = None
    fallback: str | None = None
    native_entries: int = 0
    notes: list[str] = field(default_factory=list)
    shape: tuple[int, ...] = ()
    # set where the cost model sent the whole product to native before any statistics (a
    # verdict of the call's shapes and config alone, which a repeated call may reuse: _api)
    _shape_verdict: bool = field(default=False, init=False, repr=False, compare=False)
    # the certificate's line patch (``refinement.LinePatch``), whose entries ``native_entries``
    # counts (the engine's bookkeeping)
    _lines: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def emulated(self) -> bool:
        """True when an Ozaki scheme computed the product (entries may still be native)."""
        return self.scheme != "native"

    def __str__(self) -> str:
        s = f"[{self.backend}] precision={self.precision} scheme={self.scheme}"
        if self.emulated and self.gemms:  # 0: decided later (a dask graph's block products)
            s += f" gemms={self.gemms}"
            if self.k_block:
                s += f" k_block={self.k_block}"
        if self.native_entries:
            s += f" native_entries={self.native_entries}"
        if self.fallback:
            s += f" fallback: {self.fallback}"
        if self.notes:
            s += " (" + "; ".join(self.notes) + ")"
        return s


_LAST: contextvars.ContextVar[Plan | None] = contextvars.ContextVar(
    "emulinalg_last_plan", default=None
)
# Every plan is also logged here at DEBUG level: logging.getLogger("emulinalg").setLevel(DEBUG)
# (with a handler) shows each product's decisions without last_plan().
_LOG = logging.getLogger("emulinalg")
_FALLBACKS: collections.Counter[str] = collections.Counter()
_LOCK = threading.Lock()


def record(plan: Plan) -> Plan:
    """Make ``plan`` this context's last plan, log it and count its fallback; returns it."""
    _LAST.set(plan)
    if _LOG.isEnabledFor(logging.DEBUG):  # the plan's text only when someone listens
        _LOG.debug("%s", plan)
    if plan.fallback:
        with _LOCK:
            _FALLBACKS[plan.fallback.split(":")[0]] += 1
    return plan


def clear() -> None:
    """Forget the last plan of this context (a product about to run)."""
    _LAST.set(None)


def last_plan() -> Plan | None:
    """How the last product in this thread / asyncio task was computed.

    Returns
    -------
    Plan or None
        The plan of the last ``matmul``/``tensordot``/``vecdot`` call made in this context
        (None before the first, and after a call that raised): backend, target precision,
        scheme and its counts, k-blocking, and any native fallback with its reason.
    """
    return _LAST.get()


def fallback_counts() -> dict[str, int]:
    """Products that fell back to native, fully or in part, since the process started.

    Returns
    -------
    dict of str to int
        Count per reason class: "performant" (native predicted faster), "precision" (entries no
        configuration certifies), "non-finite" (NaN/Inf inputs), "no backend".
    """
    with _LOCK:
        return dict(_FALLBACKS)
