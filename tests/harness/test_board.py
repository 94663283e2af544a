"""The board's clock and power beside each timed method (``harness.board``): the monitor's
summary of its samples, the bench records that carry it, and no fields where the board cannot be
read (no NVIDIA driver: this CI machine)."""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import statistics
import time

import pytest

from emulinalg.harness import bench, board, devices
from emulinalg.harness.bench import Settings, parse_method


class _Board:
    """Clock samples in a fixed cycle (every value returned kept) and an energy counter that
    runs at ``watts`` on the wall clock; ``fail_after``: the clock read that raises."""

    def __init__(self, mhz=(1410.0, 1755.0, 1980.0, 1600.0), watts=650.0, fail_after=None,
                 energy=True):  # fmt: skip
        self._mhz, self.watts, self.fail_after = itertools.cycle(mhz), watts, fail_after
        self.energy = energy
        self.seen: list[float] = []

    def clock(self):
        if self.fail_after is not None and len(self.seen) >= self.fail_after:
            raise OSError("NVML: the board's SM clock could not be read")
        self.seen.append(next(self._mhz))
        return self.seen[-1]

    def energy_mj(self):
        return self.watts * time.perf_counter() * 1e3 if self.energy else None


def test_monitor_summarises_every_sample_it_took():
    b = _Board()
    with board.Monitor(b, period=0.001) as mon:
        time.sleep(0.05)
    assert len(mon.samples) >= 3 and mon.samples == b.seen  # the entry sample and the thread's
    n = len(b.seen)
    time.sleep(0.01)
    assert len(b.seen) == n  # the thread stopped with the block
    s = mon.summary()
    assert s.pop("power_w") == pytest.approx(650.0, rel=0.05)  # energy over the block's time
    assert s == {"sm_mhz": statistics.median(b.seen), "sm_mhz_min": min(b.seen),
                 "board_samples": n}  # fmt: skip


def test_a_failing_read_is_reported_not_raised():
    # at the block's start: no clock fields, the error, and the block's body still runs
    with board.Monitor(_Board(fail_after=0, energy=False), period=0.001) as mon:
        ran = True
    assert ran and mon.summary() == {"board_error": "NVML: the board's SM clock could not be read"}
    # during the block: the samples before it, and the error
    b = _Board(fail_after=3)
    with board.Monitor(b, period=0.001) as mon:
        time.sleep(0.03)
    s = mon.summary()
    assert s["board_samples"] == 3 and s["sm_mhz"] == statistics.median(b.seen)
    assert s["board_error"].startswith("NVML") and "power_w" in s


def test_no_reader_without_the_driver_library(monkeypatch):
    def missing(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(board, "_LIB", [])
    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert board.reader("00000000:19:00.0") is None


@pytest.fixture
def numpy_with_board(monkeypatch):
    """The numpy family's device with a board monitor (as cupy's has on a GPU machine)."""
    reads = []
    plain = devices.DEVICES["numpy"]

    def monitor():
        reads.append(_Board(mhz=(1500.0 + 10 * len(reads),), watts=600.0))
        return board.Monitor(reads[-1], period=0.001)

    monkeypatch.setitem(bench.DEVICES, "numpy",
                        lambda chunks: dataclasses.replace(plain(chunks), monitor=monitor))
    return reads


def test_every_timed_record_carries_its_own_blocks_clock(numpy_with_board):
    s = Settings(backends=["numpy"], sizes=[48], shapes=["square"], dtypes=["float64"],
                 phis=[1.0], methods=[parse_method("float64"), parse_method("OzakiII(9)")],
                 repeat=2, warmup=0, stages=False, ref_rows=0)  # fmt: skip
    recs = bench.run(s, notify=lambda text: None)
    # one monitored block per timed measurement, in order: native, each method (the numpy
    # family has no native timing after its methods)
    assert len(numpy_with_board) == 3
    clocks = [r.seen[0] for r in numpy_with_board]
    names = ("native", "float64", "OzakiII(moduli=9, mode=accurate)")
    native, level, fixed = (next(r for r in recs if r["method"] == m) for m in names)
    for r in (native, level, fixed):  # the native block's clock in every record of the group
        assert r["native_sm_mhz"] == clocks[0]
        assert r["native_power_w"] == pytest.approx(600.0, rel=0.05)
    assert native["sm_mhz"] == clocks[0]  # the native record's own block, unprefixed too
    assert level["sm_mhz"] == level["sm_mhz_min"] == clocks[1]
    assert fixed["sm_mhz"] == clocks[2] and fixed["board_samples"] >= 1


def test_records_lack_the_fields_where_the_board_cannot_be_read():
    s = Settings(backends=["numpy"], sizes=[32], shapes=["square"], dtypes=["float32"],
                 phis=[1.0], methods=[parse_method("float32")], repeat=1, warmup=0,
                 stages=False, ref_rows=0)  # fmt: skip
    for r in bench.run(s, notify=lambda text: None):
        assert not [key for key in r if "sm_mhz" in key or "power_w" in key]


def test_the_peers_rows_and_native_after_carry_their_blocks_clock(numpy_with_board, monkeypatch):
    import sys
    import types

    import emulinalg

    class Peer:  # GEMMul8's wrapper interface, computed by OzakiII(moduli)
        def __init__(self):
            self._work = {}

        def matmul(self, a, b, moduli, fast=False):
            with emulinalg.config(strategy="eager"):
                return emulinalg.matmul(a, b, precision=emulinalg.OzakiII(moduli=moduli)), []

    monkeypatch.setitem(sys.modules, "gemmul8", types.SimpleNamespace(load=lambda p: Peer()))
    monkeypatch.setattr(bench, "_PEERS", {})
    s = Settings(backends=["numpy"], sizes=[48], shapes=["square"], dtypes=["float64"],
                 phis=[1.0], methods=[parse_method("float64")], repeat=1, warmup=0,
                 stages=False, ref_rows=0, gemmul8="/x/libg8drv.so")  # fmt: skip
    recs = bench.run(s, notify=lambda text: None)
    clocks = [r.seen[0] for r in numpy_with_board]
    (level,) = [r for r in recs if r["method"] == "float64"]
    peers = [r for r in recs if r["backend"] == "gemmul8"]  # in the order they were timed
    (after,) = [r for r in recs if r.get("when") == "after"]
    # timed in this order, each its own block: native, the level, each count of the peer's
    # search, native after
    assert [r["sm_mhz"] for r in [level, *peers, after]] == clocks[1:]
    assert len(peers) >= 2 and level["native_sm_mhz"] == clocks[0]


def test_a_board_that_fails_does_not_stop_the_benchmark(monkeypatch):
    plain = devices.DEVICES["numpy"]
    broken = _Board(fail_after=0, energy=False)
    monkeypatch.setitem(bench.DEVICES, "numpy", lambda chunks: dataclasses.replace(
        plain(chunks), monitor=lambda: board.Monitor(broken, period=0.001)))  # fmt: skip
    s = Settings(backends=["numpy"], sizes=[32], shapes=["square"], dtypes=["float64"],
                 phis=[1.0], methods=[parse_method("float64")], repeat=1, warmup=0,
                 stages=False, ref_rows=0)  # fmt: skip
    recs = bench.run(s, notify=lambda text: None)
    (level,) = [r for r in recs if r["method"] == "float64"]
    assert level["seconds"] > 0 and "error" not in level and "sm_mhz" not in level
    assert level["board_error"].startswith("NVML") and level["native_board_error"]


def test_a_driver_without_the_energy_counter_still_gives_the_clock(monkeypatch):
    class Lib:  # NVML without nvmlDeviceGetTotalEnergyConsumption
        def nvmlInit_v2(self):
            return 0

        def nvmlDeviceGetHandleByPciBusId_v2(self, bus, handle):
            return 0

        def nvmlDeviceGetClockInfo(self, handle, kind, out):
            out._obj.value = 1755
            return 0

    monkeypatch.setattr(board, "_LIB", [])
    monkeypatch.setattr(ctypes, "CDLL", lambda name: Lib())
    b = board.reader("00000000:19:00.0")
    assert b is not None and b.clock() == 1755.0 and b.energy_mj() is None
    with board.Monitor(b, period=0.001) as mon:
        time.sleep(0.01)
    s = mon.summary()
    assert s["sm_mhz"] == 1755.0 and "power_w" not in s and "board_error" not in s
