"""The calibration's measurement on an AMX host (``emulinalg._calibration.measure("amx")``): the
rates it times are those of the paths the products run, and the cache round-trips them; the
decisions they lead to are tested everywhere (tests/core/test_calibration.py)."""

from __future__ import annotations

import functools
import time

import numpy as np
from _amx_helpers import _amx, amx_only

from emulinalg import _calibration

pytestmark = amx_only


@functools.cache
def _rates():
    return _calibration.measure("amx")


def test_measure_gives_positive_rates_of_this_host():
    r = _rates()
    assert r.name == _calibration.device_name("amx")
    assert f"({_amx.features()['max_threads']} threads)" in r.name
    assert set(r.native_flops) == {"float64", "float32", "complex128", "complex64"}
    assert all(v > 0 for v in r.native_flops.values())
    assert r.int8_ops > 0 and r.bandwidth > 0


def test_the_int8_rate_is_the_mod_gemm_the_products_run():
    """``measure`` times one modulus's mod-reducing tile GEMM on packed panels; the residues it
    writes are those of the exact product (gemm_s8s8s32's sums of the same int8 residues,
    reduced modulo that modulus), and the rate is at least that of ``gemm_s8s8s32`` on int8
    operands of the same size, timed here the same way, over 2 (the epilogue's reduction and
    the timing's noise on a shared host: the two GEMMs run at about one rate)."""
    from emulinalg.algorithm.moduli import crt_constants

    n = 512
    rng = np.random.default_rng(1)
    a = rng.integers(-(2**20), 2**20, (n, n)).astype(np.float64)
    b = rng.integers(-(2**20), 2**20, (n, n)).astype(np.float64)
    zeros = np.zeros(n, dtype=np.int32)
    panels = _amx.ozaki2_pack(a, b, zeros, zeros, 2)
    res = panels.residues
    _amx.ozaki2_multiply(panels, 0, res[0, 0])
    m0 = int(crt_constants(2).moduli[0])
    ra = _symmetric(a, m0).astype(np.int8)
    rb = _symmetric(b, m0).astype(np.int8)
    sums = np.asarray(_amx.gemm_s8s8s32(ra, rb), dtype=np.int64)
    np.testing.assert_array_equal(res[0, 0].astype(np.int64), _symmetric(sums, m0))
    panels.release_operands()
    n = _calibration.N_INT8_CPU
    a8 = rng.integers(-128, 128, (n, n)).astype(np.int8)
    b8 = rng.integers(-128, 128, (n, n)).astype(np.int8)
    _amx.gemm_s8s8s32(a8, b8)
    t = []
    for _ in range(3):
        t0 = time.perf_counter()
        _amx.gemm_s8s8s32(a8, b8)
        t.append(time.perf_counter() - t0)
    assert _rates().int8_ops >= 0.5 * 2 * n**3 / sorted(t)[1]


def _symmetric(x, m):
    """x modulo m in (-m/2, m/2] (m = 256: [-128, 127], the int8 truncation's)."""
    r = np.mod(x.astype(np.int64), m)
    return np.where(r > m // 2, r - m, np.where((m == 256) & (r == 128), -128, r))


def test_the_cache_round_trips_the_measured_rates(monkeypatch, tmp_path):
    monkeypatch.setattr(_calibration, "cache_dir", lambda: str(tmp_path))
    r = _rates()
    path = _calibration.save("amx", r)
    assert path is not None and path.endswith(f"-{_calibration.RATES_FORMAT}.json")
    got, _ = _calibration.load("amx", r.name)
    assert got == r
