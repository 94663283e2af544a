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


class _Reader:
    """Clock and power samples in a fixed cycle, every value returned kept."""

    def __init__(self, mhz=(1410.0, 1755.0, 1980.0, 1600.0), watts=(690.0, 700.0, 520.0)):
        self._mhz, self._w = itertools.cycle(mhz), itertools.cycle(watts)
        self.seen: list[tuple[float, float]] = []

    def __call__(self):
        self.seen.append((next(self._mhz), next(self._w)))
        return self.seen[-1]


def test_monitor_summarises_every_sample_it_took():
    read = _Reader()
    with board.Monitor(read, period=0.001) as mon:
        time.sleep(0.05)
    assert len(mon.samples) >= 3 and mon.samples == read.seen  # the entry sample and the thread's
    n = len(read.seen)
    time.sleep(0.01)
    assert len(read.seen) == n  # the thread stopped with the block
    s = mon.summary("native_")
    mhz = [x[0] for x in read.seen]
    assert s == {
        "native_sm_mhz": statistics.median(mhz),
        "native_sm_mhz_min": min(mhz),
        "native_power_w": round(sum(x[1] for x in read.seen) / n, 1),
        "native_board_samples": n,
    }


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
        reads.append(_Reader(mhz=(1500.0 + 10 * len(reads),), watts=(600.0,)))
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
    clocks = [r.seen[0][0] for r in numpy_with_board]
    names = ("native", "float64", "OzakiII(moduli=9, mode=accurate)")
    native, level, fixed = (next(r for r in recs if r["method"] == m) for m in names)
    for r in (native, level, fixed):  # the native block's clock in every record of the group
        assert r["native_sm_mhz"] == clocks[0] and r["native_power_w"] == 600.0
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
    clocks = [r.seen[0][0] for r in numpy_with_board]
    (level,) = [r for r in recs if r["method"] == "float64"]
    peers = [r for r in recs if r["backend"] == "gemmul8"]  # in the order they were timed
    (after,) = [r for r in recs if r.get("when") == "after"]
    # timed in this order, each its own block: native, the level, each count of the peer's
    # search, native after
    assert [r["sm_mhz"] for r in [level, *peers, after]] == clocks[1:]
    assert len(peers) >= 2 and level["native_sm_mhz"] == clocks[0]
