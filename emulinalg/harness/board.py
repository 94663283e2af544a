"""The GPU board's SM clock and power while the benchmark times a method (cupy records).

A board at its power cap (the H200 at 700 W) lowers its clock under sustained load, so two
methods timed back to back can run at different clocks: each cupy record carries the median SM
clock (MHz) and its lowest sample over its timed runs, sampled every few milliseconds, and the
board's mean power (W) over them from its energy counter (NVML's power reading is a one-second
average on current boards, longer than a method's runs). Both come from NVML, the driver's
management library (``libnvidia-ml.so.1``, loaded through ctypes; no Python package needed).
Where the library or the board cannot be read the records lack these fields; a read that fails
during a block leaves ``board_error`` in its record and the samples taken before it.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time

NVML_CLOCK_SM = 1  # nvmlClockType_t
PERIOD = 0.004  # seconds between clock samples
JOIN_SECONDS = 1.0  # how long the end of a block waits for the sampling thread

_LIB: list = []  # [the loaded library, or None where it cannot be loaded]


def _nvml():
    if not _LIB:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            _LIB.append(lib if lib.nvmlInit_v2() == 0 else None)
        except (OSError, AttributeError):
            _LIB.append(None)
    return _LIB[0]


class Board:
    """One board's NVML readings: ``clock()`` (SM MHz) and ``energy_mj()`` (millijoules since
    the driver loaded; None where the board has no energy counter). Both raise OSError when a
    read fails."""

    def __init__(self, lib, handle):
        self._lib, self._handle = lib, handle
        self._mhz, self._mj = ctypes.c_uint(), ctypes.c_ulonglong()
        self._has_energy = True
        try:
            self.energy_mj()
        except (OSError, AttributeError):  # (AttributeError: a driver without the call)
            self._has_energy = False

    def clock(self) -> float:
        if self._lib.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(self._mhz)):
            raise OSError("NVML: the board's SM clock could not be read")
        return float(self._mhz.value)

    def energy_mj(self) -> float | None:
        if not self._has_energy:
            return None
        if self._lib.nvmlDeviceGetTotalEnergyConsumption(self._handle, ctypes.byref(self._mj)):
            raise OSError("NVML: the board's energy counter could not be read")
        return float(self._mj.value)


def reader(pci_bus_id: str) -> Board | None:
    """The ``Board`` at ``pci_bus_id`` (as cupy's ``Device.pci_bus_id`` gives it), or None where
    NVML cannot read its clock."""
    lib = _nvml()
    if lib is None:
        return None
    handle = ctypes.c_void_p()
    if lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle)) != 0:
        return None
    board = Board(lib, handle)
    try:
        board.clock()
    except (OSError, AttributeError):
        return None
    return board


class Monitor:
    """Samples ``board.clock()`` every ``period`` seconds on a thread between ``__enter__`` and
    ``__exit__``, and reads ``board.energy_mj()`` at both ends; ``summary()`` gives the record's
    fields. A failing read never raises here: it ends the sampling and is reported."""

    def __init__(self, board, period: float = PERIOD):
        self.board, self.period = board, period
        self.samples: list[float] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._energy: list = []  # (mJ or None, seconds) at the block's start and end

    def _read(self, fn):
        try:
            return fn()
        except OSError as exc:
            self.error = self.error or str(exc)
            return None

    def _run(self):
        while not self._stop.wait(self.period):
            mhz = self._read(self.board.clock)
            if mhz is None:
                return
            self.samples.append(mhz)

    def __enter__(self):
        self.samples, self.error, self._thread = [], None, None
        self._energy = [(self._read(self.board.energy_mj), time.perf_counter())]
        mhz = self._read(self.board.clock)
        if mhz is not None:
            self.samples.append(mhz)
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_SECONDS)
        self._energy.append((self._read(self.board.energy_mj), time.perf_counter()))
        return False

    def summary(self) -> dict:
        """``sm_mhz`` (median), ``sm_mhz_min``, ``board_samples``, ``power_w`` (energy over
        time), each where it was read, and ``board_error`` where a read failed."""
        out: dict = {}
        mhz = list(self.samples)
        if mhz:
            out.update(sm_mhz=statistics.median(mhz), sm_mhz_min=min(mhz), board_samples=len(mhz))
        if len(self._energy) == 2:
            (e0, t0), (e1, t1) = self._energy
            if e0 is not None and e1 is not None and t1 > t0:
                out["power_w"] = round((e1 - e0) / 1e3 / (t1 - t0), 1)
        if self.error:
            out["board_error"] = self.error
        return out
