"""``bench --gemmul8``: GEMMul8 beside each level's row (issue #24's records), searched for the
fewest count matching the native product's bits. On the CPU the peer is a stand-in module with
GEMMul8's wrapper interface (``load(path).matmul(a, b, moduli, fast) -> (c, phases)``) that
computes ``OzakiII(moduli)`` on numpy arrays: its bits at each count are real, so the search
and the records are checked against what the count really gives."""

from __future__ import annotations

import sys
import types

import pytest

import emulinalg
from emulinalg.harness import bench
from emulinalg.harness.bench import Settings, fewest_matching, parse_method


def test_fewest_matching_searches_down_then_up():
    calls = []

    def bits(c):
        calls.append(c)
        return (3.0 * c, 3.0 * c + 5.0)

    native = (40.0, 47.0)  # 3c >= 40 and 3c + 5 >= 47: c >= 14
    assert fewest_matching(bits, 16, 2, 20, native) == (14, {16: (48.0, 53.0), 15: (45.0, 50.0),
                                                             14: (42.0, 47.0),
                                                             13: (39.0, 44.0)})  # fmt: skip
    calls.clear()
    best, _ = fewest_matching(bits, 10, 2, 20, native)
    assert best == 14 and calls == [10, 11, 12, 13, 14]
    assert fewest_matching(bits, 10, 2, 13, native)[0] is None  # no count in range matches
    assert fewest_matching(bits, 25, 2, 20, native)[0] == 14  # the start clipped to the range
    # a count that failed (None) does not match, and the search goes on past it
    best, _ = fewest_matching(lambda c: None if c == 14 else bits(c), 12, 2, 20, native)
    assert best == 15


class _StandIn:
    """GEMMul8's wrapper interface, computed by emulinalg's OzakiII(moduli) (eager)."""

    def __init__(self, path):
        self.path, self._work, self.counts = path, {}, []

    def matmul(self, a, b, moduli, fast=False, out=None):
        assert not fast
        self.counts.append(moduli)
        self._work[moduli] = True
        with emulinalg.config(strategy="eager"):
            c = emulinalg.matmul(a, b, precision=emulinalg.OzakiII(moduli=moduli))
        return c, [0.0, 0.0, 0.0, 0.0]


@pytest.fixture
def stand_in(monkeypatch):
    made = []

    def load(path):
        made.append(_StandIn(path))
        return made[-1]

    monkeypatch.setitem(sys.modules, "gemmul8", types.SimpleNamespace(load=load))
    monkeypatch.setattr(bench, "_PEERS", {})
    return made


def test_bench_puts_the_peer_beside_the_level(stand_in):
    s = Settings(backends=["numpy"], sizes=[96], shapes=["square"], dtypes=["float64"],
                 phis=[1.0], methods=[parse_method("float64"), parse_method("OzakiII(12)")],
                 repeat=1, warmup=0, stages=False, ref_rows=0,
                 gemmul8="/x/libg8drv.so")  # fmt: skip
    recs = bench.run(s, notify=lambda text: None)
    (level,) = [r for r in recs if r["method"] == "float64"]
    peers = {r["method"]: r for r in recs if r["backend"] == "gemmul8"}
    natives = [r for r in recs if r["method"] == "native"]
    assert [r.get("when") for r in natives] == [None, "after"]  # native before and after
    assert len(stand_in) == 1 and stand_in[0].path == "/x/libg8drv.so"
    count = int(level["scheme"].split("moduli=")[1].split(",")[0])
    assert level["gemmul8_same_count_moduli"] == count
    assert f"GEMMul8(moduli={count})" in peers
    # only the level's row has the peer: the explicit scheme's does not
    (explicit,) = [r for r in recs if r["method"].startswith("OzakiII(moduli=12")]
    assert "gemmul8_best_moduli" not in explicit
    native = (level["native_bits_maxrel"], level["native_bits_cw"])

    def matches(r):
        return r["bits_maxrel"] >= native[0] and r["bits_cw"] >= native[1]

    best = level["gemmul8_best_moduli"]
    assert best is not None and matches(peers[f"GEMMul8(moduli={best})"])
    below = peers.get(f"GEMMul8(moduli={best - 1})")
    assert best == 2 or (below is not None and not matches(below))  # the fewest that match
    assert level["gemmul8_best_speedup"] == peers[f"GEMMul8(moduli={best})"]["speedup"]
    assert stand_in[0].counts == [int(m.split("=")[1].rstrip(")")) for m in peers]
    for r in peers.values():  # the peer's records carry the row's native figures
        assert r["native_seconds"] == level["native_seconds"] and r["peer"] is True


def test_a_missing_peer_is_reported_in_the_row(monkeypatch):
    monkeypatch.setitem(sys.modules, "gemmul8", None)  # import fails
    monkeypatch.setattr(bench, "_PEERS", {})
    s = Settings(backends=["numpy"], sizes=[64], shapes=["square"], dtypes=["float32"],
                 phis=[1.0], methods=[parse_method("float32")], repeat=1, warmup=0,
                 stages=False, ref_rows=0, gemmul8="/nowhere.so")  # fmt: skip
    recs = bench.run(s, notify=lambda text: None)
    (level,) = [r for r in recs if r["method"] == "float32"]
    assert "gemmul8" in level["gemmul8_error"] and "seconds" in level
    assert not [r for r in recs if r["backend"] == "gemmul8"]


def test_zero_overhead_bound_from_the_devices_int8_gemm(monkeypatch):
    """Where the family's device has an INT8 GEMM (cupy), each Scheme II row gets the bound:
    its plan's INT8 GEMMs at the time of one such GEMM measured in the same group; the numpy
    family has none and its rows no bound."""
    import dataclasses

    import numpy as np

    from emulinalg.harness import devices

    shapes = []

    def int8_gemm(m, n, k):
        shapes.append((m, n, k))
        x = np.ones((m, k), dtype=np.int8)
        y = np.ones((k, n), dtype=np.int8)
        return lambda: x.astype(np.int32) @ y.astype(np.int32)

    plain = devices.DEVICES["numpy"]
    monkeypatch.setitem(bench.DEVICES, "numpy",
                        lambda chunks: dataclasses.replace(plain(chunks), int8_gemm=int8_gemm))
    s = Settings(backends=["numpy"], sizes=[64], shapes=["square", "batched"],
                 dtypes=["float64"], phis=[1.0], methods=[parse_method("OzakiII(13)")],
                 repeat=3, warmup=0, stages=False, ref_rows=0)  # fmt: skip
    recs = [r for r in bench.run(s, notify=lambda text: None) if r["method"] != "native"]
    assert shapes == [(64, 64, 64), (32, 32, 32)]  # one per group, of its product's shape
    for r in recs:
        assert r["gemms"] >= 13 and r["int8_gemm_seconds"] > 0
        assert r["bound_seconds"] == r["gemms"] * r["batch"] * r["int8_gemm_seconds"]
        assert r["share_of_bound"] == r["bound_seconds"] / r["seconds"]
    monkeypatch.setitem(bench.DEVICES, "numpy", plain)
    (r,) = [r for r in bench.run(dataclasses.replace(s, shapes=["square"]),
                                 notify=lambda text: None) if r["method"] != "native"]  # fmt: skip
    assert "bound_seconds" not in r
