"""The calibration's measurement on a GPU (``emulinalg._calibration.measure``): the rates it
times are those of the paths the products run, and the cache round-trips them; the decisions
they lead to are tested on the CPU (tests/core/test_calibration.py)."""

from __future__ import annotations

import functools

import pytest
from _gpu_helpers import require_gpu

from emulinalg import _calibration, _cost

cp = require_gpu()

from emulinalg.backends.cupy.gemm import _int8_products, gemm_s8  # noqa: E402

pytestmark = pytest.mark.gpu


@functools.cache
def _rates():
    return _calibration.measure("cupy")


def test_measure_gives_positive_rates_of_this_device():
    r = _rates()
    assert r.name == _calibration.device_name("cupy")
    assert set(r.native_flops) == {"float64", "float32", "complex128", "complex64"}
    assert all(v > 0 for v in r.native_flops.values())
    assert r.int8_ops > 0 and r.bandwidth > 0


def test_the_int8_rate_is_the_schemes_path_not_a_cublas_call_with_copies():
    """``measure`` times ``_int8_products`` (the fused kernel where it runs): on a device with
    INT8 tensor cores at least as fast as ``gemm_s8`` (cuBLAS with its padding copies) on the
    same size, timed here the same way; and the product it times is exact."""
    n = 1024
    rng = cp.random.default_rng(1)
    pa = rng.integers(-128, 128, (1, 1, 1, n, n)).astype(cp.int8)
    pb = rng.integers(-128, 128, (1, 1, 1, n, n)).astype(cp.int8)
    got = _int8_products(pa, pb).sum(axis=0)[0, 0, 0]  # K-blocks summed
    want = pa[0, 0, 0].astype(cp.float64) @ pb[0, 0, 0].astype(cp.float64).T
    assert bool(cp.all(got.astype(cp.float64) == want))
    n = _calibration.N_INT8
    a8 = rng.integers(-128, 128, (n, n)).astype(cp.int8)
    b8 = rng.integers(-128, 128, (n, n)).astype(cp.int8)
    cublas = 2 * n**3 / _calibration._median_seconds(lambda: gemm_s8(a8, b8))
    assert _rates().int8_ops >= 0.9 * cublas


def test_the_cache_round_trips_the_measured_rates(monkeypatch, tmp_path):
    monkeypatch.setattr(_calibration, "cache_dir", lambda: str(tmp_path))
    r = _rates()
    path = _calibration.save("cupy", r)
    assert path is not None and path.endswith(f"-{_calibration.RATES_FORMAT}.json")
    got, _ = _calibration.load("cupy", r.name)
    assert got == r
    model = _cost.for_device("cupy", r)
    assert model.native_flops["float64"] == r.native_flops["float64"]
