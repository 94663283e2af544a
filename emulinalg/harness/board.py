"""The GPU board's SM clock and power while the benchmark times a method (cupy records).

A board at its power cap (the H200 at 700 W) lowers its clock under sustained load, so two
methods timed back to back can run at different clocks: each cupy record carries the median SM
clock (MHz), its lowest sample and the mean board power (W) over its timed runs, sampled every
few milliseconds from NVML, the driver's management library (``libnvidia-ml.so.1``, loaded
through ctypes; no Python package needed). Where the library or the board cannot be read the
records simply lack these fields.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
from collections.abc import Callable

NVML_CLOCK_SM = 1  # nvmlClockType_t
PERIOD = 0.004  # seconds between samples

_LIB: list = []  # [the loaded library, or None where it cannot be loaded]


def _nvml():
    if not _LIB:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            _LIB.append(lib if lib.nvmlInit_v2() == 0 else None)
        except (OSError, AttributeError):
            _LIB.append(None)
    return _LIB[0]


def reader(pci_bus_id: str) -> Callable[[], tuple[float, float]] | None:
    """A function returning ``(SM clock MHz, board power W)`` of the board at ``pci_bus_id``
    (as cupy's ``Device.pci_bus_id`` gives it), or None where NVML cannot read it."""
    lib = _nvml()
    if lib is None:
        return None
    handle = ctypes.c_void_p()
    if lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle)) != 0:
        return None
    mhz, mw = ctypes.c_uint(), ctypes.c_uint()

    def read():
        ok = lib.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(mhz)) == 0
        ok &= lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(mw)) == 0
        if not ok:
            raise OSError("NVML: the board's clock or power could not be read")
        return float(mhz.value), mw.value / 1e3

    try:
        read()
    except OSError:
        return None
    return read


class Monitor:
    """Samples ``read()`` (``(MHz, W)``) every ``period`` seconds on a thread between
    ``__enter__`` and ``__exit__``; ``summary()`` gives the record's fields (one sample at least:
    the one taken on entry)."""

    def __init__(self, read: Callable[[], tuple[float, float]], period: float = PERIOD):
        self.read, self.period = read, period
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self):
        while not self._stop.wait(self.period):
            try:
                self.samples.append(self.read())
            except OSError:
                return

    def __enter__(self):
        self.samples = [self.read()]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False

    def summary(self, prefix: str = "") -> dict:
        """``{prefix}sm_mhz`` (median), ``{prefix}sm_mhz_min``, ``{prefix}power_w`` (mean),
        ``{prefix}board_samples``."""
        mhz = [s[0] for s in self.samples]
        return {
            f"{prefix}sm_mhz": statistics.median(mhz),
            f"{prefix}sm_mhz_min": min(mhz),
            f"{prefix}power_w": round(statistics.fmean(s[1] for s in self.samples), 1),
            f"{prefix}board_samples": len(self.samples),
        }
