"""The cost model on the device it runs on (``emulinalg._calibration``, ``_cost.for_device``):
decisions for injected device rates, the cache per device and version, the plan's source line,
the CLI without a GPU. The measurement itself runs on a GPU (tests/backends/gpu)."""

from __future__ import annotations

import os
import sys
import types

import pytest

import emulinalg
from emulinalg import _calibration, _cost, _extras, _planner
from emulinalg._precision import OzakiII

# Rates as ``measure`` would find them (about 85 % of the datasheets' dense figures): flop/s of
# DGEMM, SGEMM, ZGEMM, CGEMM; INT8 GEMM op/s; bytes/s of a device copy (read + write).
DEVICES = {
    "H100": _cost.FITTED_ON["cupy"],
    # measured: the GEMMs (docs/benchmarks/h200/calibration_2026-12-02.jsonl), the INT8 path
    # at 8192 (levels_gemmul8_2026-12-05c.jsonl, int8_gemm_s), the copy rate of the notes
    "H200": _cost.DeviceRates(
        "NVIDIA H200",
        {"float64": 5.78e13, "float32": 4.83e13, "complex128": 6.13e13, "complex64": 5.30e13},
        int8_ops=1.46e15,
        bandwidth=4.0e12,
    ),
    "A100": _cost.DeviceRates(
        "NVIDIA A100-SXM4-80GB",
        {"float64": 16.6e12, "float32": 16.6e12, "complex128": 16.2e12, "complex64": 16.2e12},
        int8_ops=530e12,
        bandwidth=1.7e12,
    ),
    "RTX 4090": _cost.DeviceRates(
        "NVIDIA GeForce RTX 4090",
        {"float64": 1.1e12, "float32": 70e12, "complex128": 1.1e12, "complex64": 68e12},
        int8_ops=560e12,
        bandwidth=0.9e12,
    ),
    "RTX 5090": _cost.DeviceRates(
        "NVIDIA GeForce RTX 5090",
        {"float64": 1.4e12, "float32": 89e12, "complex128": 1.4e12, "complex64": 87e12},
        int8_ops=710e12,
        bandwidth=1.5e12,
    ),
    "B200": _cost.DeviceRates(
        "NVIDIA B200",
        {"float64": 34e12, "float32": 68e12, "complex128": 33e12, "complex64": 66e12},
        int8_ops=3.8e15,
        bandwidth=6.8e12,
    ),
}
# The levels' counts on phi = 1 inputs (docs/benchmarks/h200/levels_gemmul8_2026-12-02.jsonl)
LEVEL = {"float64": OzakiII(moduli=15), "float32": OzakiII(moduli=8),
         "complex128": OzakiII(moduli=16)}  # fmt: skip


def _emulates(device, dtype, n):
    model = _cost.for_device("cupy", DEVICES[device])
    scheme = LEVEL[dtype]
    return model.emulated_seconds(scheme, dtype, n, n, n) < model.native_seconds(dtype, n, n, n)


@pytest.mark.parametrize("n", [4096, 8192, 16384])
@pytest.mark.parametrize("device", ["RTX 4090", "RTX 5090"])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_weak_fp64_gpus_emulate_float64(device, dtype, n):
    """FP64 at 1/64 of FP32: the emulation wins by far (about 10x predicted)."""
    assert _emulates(device, dtype, n)


@pytest.mark.parametrize("device", ["RTX 4090", "RTX 5090"])
def test_float32_stays_native_where_sgemm_is_fast(device):
    """Consumer parts: SGEMM at 1/8 of the INT8 rate, below the level's 9 GEMMs and stages."""
    assert not _emulates(device, "float32", 16384)


def test_float32_emulates_where_int8_is_32x_sgemm():
    """A100-class: SGEMM (without TF32) at 1/32 of the INT8 rate."""
    assert _emulates("A100", "float32", 16384)


def test_the_fitted_device_keeps_the_model_and_its_measured_verdicts():
    """On the device it was fitted on the model is the built-in one (the same predictions),
    whose verdicts are the measured ones (docs/benchmarks/h100/cost_fit_2026-12-06.jsonl: float64
    II(15) 1.33x DGEMM at 16384 and 1.08x at 8192, float32 II(7) 2.69x SGEMM, complex128 II(16)
    Gaussian 2.0x ZGEMM at 8192), and native for float64 at N = 4096 (0.54x), where the fixed
    cost and the stages outweigh the GEMMs' gain; the default's count (one more modulus than the
    fewest) included."""
    moved = _cost.for_device("cupy", DEVICES["H100"])
    base = _cost._BUILTIN["cupy"]
    for dt in ("float64", "complex128"):
        s = LEVEL[dt]
        assert moved.emulated_seconds(s, dt, 8192, 8192, 8192) == pytest.approx(
            base.emulated_seconds(s, dt, 8192, 8192, 8192)
        )

    def wins(scheme, dt, n):
        return base.emulated_seconds(scheme, dt, n, n, n) < base.native_seconds(dt, n, n, n)

    assert wins(OzakiII(moduli=8), "float32", 16384)
    assert wins(OzakiII(moduli=16), "float64", 16384)
    assert wins(OzakiII(moduli=17, gaussian=True), "complex128", 8192)
    assert wins(OzakiII(moduli=16), "float64", 8192)
    assert not wins(OzakiII(moduli=16), "float64", 4096)


def test_h200_emulates_the_float64_level_at_16384_and_not_at_4096():
    """The model moved to the H200's measured rates emulates the float64 level at N = 16384
    (measured there: II(15) 1.36x DGEMM, levels_gemmul8_2026-12-05c.jsonl) and keeps N = 4096
    native (0.33-0.44x, levels_default_2026-12-04*.jsonl); one modulus more than the fewest."""
    model = _cost.for_device("cupy", DEVICES["H200"])
    s = OzakiII(moduli=16)

    def wins(n):
        return model.emulated_seconds(s, "float64", n, n, n) < model.native_seconds(
            "float64", n, n, n
        )

    assert wins(16384)
    assert not wins(4096)


def test_int8_rich_gpu_emulates_float64():
    """B200-class: the INT8 rate grows far more than FP64's."""
    assert _emulates("B200", "float64", 16384)


def test_rates_move_the_model_as_documented():
    base, ref = _cost._BUILTIN["cupy"], _cost.FITTED_ON["cupy"]
    r = DEVICES["A100"]
    moved = _cost.for_device("cupy", r, source="x")
    assert moved.native_flops["float64"] == r.native_flops["float64"]
    assert moved.int_gemm_ops == pytest.approx(base.int_gemm_ops * r.int8_ops / ref.int8_ops)
    assert moved.entry_seconds == pytest.approx(base.entry_seconds * ref.bandwidth / r.bandwidth)
    assert moved.complex_model.native_flops["complex128"] == r.native_flops["complex128"]
    assert moved.source == "x"
    with pytest.raises(ValueError):
        _cost.for_device("numpy", r)
    with pytest.raises(ValueError):
        _cost.for_device("cupy", _cost.DeviceRates("x", r.native_flops, 0.0, 1.0))


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    """A pretend RTX 4090 with the cache in tmp_path; ``measured`` counts measurements."""
    measured = []
    monkeypatch.setattr(_calibration, "cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(_calibration, "device_name", lambda b: DEVICES["RTX 4090"].name)
    monkeypatch.setattr(_calibration, "_MEMO", {})

    def measure(backend_name="cupy"):
        measured.append(backend_name)
        return DEVICES["RTX 4090"]

    monkeypatch.setattr(_calibration, "measure", measure)
    return measured


def test_first_use_measures_once_and_caches(gpu, tmp_path, monkeypatch):
    model = _cost.get_cost_model("cupy")
    assert gpu == ["cupy"]
    assert model.native_flops["float64"] == DEVICES["RTX 4090"].native_flops["float64"]
    assert "RTX 4090" in model.source and str(tmp_path) in model.source
    _cost.get_cost_model("cupy")
    assert gpu == ["cupy"]  # once per process
    files = os.listdir(tmp_path)
    assert len(files) == 1 and emulinalg.__version__ in files[0]
    # a new process reads the cache instead of measuring
    monkeypatch.setattr(_calibration, "_MEMO", {})
    again = _cost.get_cost_model("cupy")
    assert gpu == ["cupy"] and again.native_flops == model.native_flops


def test_the_plan_names_the_model_and_set_cost_model_overrides(gpu):
    ok, why = _planner.faster("cupy", LEVEL["float64"], "float64", 8192, 8192, 8192)
    assert ok and "RTX 4090" in why
    try:
        emulinalg.set_cost_model("cupy", native_flops={"float64": 1e20, "float32": 1e20})
        ok, why = _planner.faster("cupy", LEVEL["float64"], "float64", 8192, 8192, 8192)
        assert not ok and "(user)" in why
    finally:
        emulinalg.set_cost_model("cupy")


def test_the_fitted_device_and_no_gpu_keep_the_builtin_model(monkeypatch, tmp_path):
    """No measurement and no cache read: a failed measurement (no cupy) would also give the
    built-in model, so the test counts the calls."""
    measured = []
    monkeypatch.setattr(_calibration, "_MEMO", {})
    monkeypatch.setattr(_calibration, "cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(_calibration, "measure", lambda b="cupy": measured.append(b))
    monkeypatch.setattr(_calibration, "device_name", lambda b: None)
    assert _cost.get_cost_model("cupy") is _cost._BUILTIN["cupy"]
    monkeypatch.setattr(_calibration, "device_name", lambda b: _cost.FITTED_ON["cupy"].name)
    assert _cost.get_cost_model("cupy") is _cost._BUILTIN["cupy"]
    assert measured == [] and os.listdir(tmp_path) == []


def test_a_cache_of_an_earlier_rates_format_is_measured_again(gpu, tmp_path):
    """Rates cached before ``RATES_FORMAT`` (r1: the INT8 rate of gemm_s8, no format in the
    file name) are not read: the device is measured again, and the new file carries the format."""
    import json

    old = _calibration.cache_path("cupy", DEVICES["RTX 4090"].name)
    old = old.replace(f"-{_calibration.RATES_FORMAT}.json", ".json")
    with open(old, "w") as fh:
        json.dump({"name": DEVICES["RTX 4090"].name, "native_flops": {"float64": 1.0,
                   "float32": 1.0}, "int8_ops": 1.0, "bandwidth": 1.0}, fh)  # fmt: skip
    model = _cost.get_cost_model("cupy")
    assert gpu == ["cupy"]
    assert model.native_flops["float64"] == DEVICES["RTX 4090"].native_flops["float64"]
    assert os.path.exists(_calibration.cache_path("cupy", DEVICES["RTX 4090"].name))


def test_unwritable_cache_still_gives_the_model(gpu, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(_calibration, "cache_dir", lambda: str(blocker / "sub"))
    model = _cost.get_cost_model("cupy")
    assert "not cached" in model.source


def test_cli_without_a_gpu_says_so(monkeypatch, capsys):
    from emulinalg.harness import cli

    # cupy installed (a stand-in where it is not: without it the extra's hint comes first,
    # tests/harness/test_missing_extras.py), but no GPU
    if "cupy" not in sys.modules and _extras.missing("cupy"):
        monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    monkeypatch.setattr(_calibration, "device_name", lambda b: None)
    assert cli.main(["calibrate"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and err.count("\n") == 1


def _fitted_amx():
    """The fitted AMX host's rates (``FITTED_ON["amx"]``), or a stand-in where none is in yet."""
    return _cost.FITTED_ON.get("amx") or _cost.DeviceRates(
        "Pretend Xeon (16 threads)", {"float64": 6e11, "float32": 1.2e12, "complex128": 5.7e11},
        int8_ops=2e13, bandwidth=5e10,
    )  # fmt: skip


# An AMX host twice as fast at INT8 as the fitted one and 10 % slower at numpy's GEMMs
def _amx_host(ref):
    return _cost.DeviceRates(
        ref.name, {d: 0.9 * r for d, r in ref.native_flops.items()},
        int8_ops=2 * ref.int8_ops, bandwidth=ref.bandwidth,
    )  # fmt: skip


@pytest.fixture
def amx_host(monkeypatch, tmp_path):
    """A pretend AMX host of the fitted host's CPU model (its name), the cache in tmp_path;
    returns the list of measurements made."""
    ref = _fitted_amx()
    monkeypatch.setitem(_cost.FITTED_ON, "amx", ref)
    monkeypatch.setattr(_calibration, "cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(_calibration, "device_name", lambda b: ref.name if b == "amx" else None)
    monkeypatch.setattr(_calibration, "_MEMO", {})
    monkeypatch.setattr(_calibration, "_UNMEASURED", set())
    measured = []

    def measure(backend_name="cupy"):
        measured.append(backend_name)
        return _amx_host(ref)

    monkeypatch.setattr(_calibration, "measure", measure)
    return measured


def test_an_amx_host_of_the_fitted_model_name_is_measured(amx_host):
    """CPUs of one model differ from host to host (AMX rates 2.3x apart on two starts of the
    same cloud machine): the name does not pin the rates, so the host is measured."""
    n = 8192
    model = _cost.get_cost_model("amx", 2.0 * n**3)
    assert amx_host == ["amx"]
    base, ref = _cost._BUILTIN["amx"], _cost.FITTED_ON["amx"]
    assert model is not base
    assert model.int_gemm_ops == pytest.approx(2 * base.int_gemm_ops)
    nat = model.native_seconds("float64", n, n, n) / base.native_seconds("float64", n, n, n)
    assert nat == pytest.approx(1 / 0.9)  # the curve's shape kept, moved by the measured rate
    assert ref.name in model.source


def test_small_products_do_not_start_the_amx_measurement(amx_host, tmp_path):
    """Below MEASURE_MIN_FLOPS a host without cached rates keeps the built-in model and is
    not measured; the first product large enough measures it, and from then on small products
    get the measured model too."""
    small = 2.0 * 512**3
    assert small < _calibration.MEASURE_MIN_FLOPS["amx"]
    assert _cost.get_cost_model("amx", small) is _cost._BUILTIN["amx"]
    assert _cost.get_cost_model("amx", small) is _cost._BUILTIN["amx"]
    assert amx_host == [] and os.listdir(tmp_path) == []
    big = _cost.get_cost_model("amx", _calibration.MEASURE_MIN_FLOPS["amx"])
    assert amx_host == ["amx"] and big is not _cost._BUILTIN["amx"]
    assert _cost.get_cost_model("amx", small) is big
    # a new process with the rates cached: small products read them (no measurement)
    _calibration._MEMO.clear()
    _calibration._UNMEASURED.clear()
    assert _cost.get_cost_model("amx", small).int_gemm_ops == big.int_gemm_ops
    assert amx_host == ["amx"]


def test_the_amx_planner_asks_with_the_product_size(amx_host):
    """The performant verdict of a small numpy-sized product does not measure the host; a
    large one's does, and names the measured host in its line."""
    level = OzakiII(moduli=16)
    _planner.faster("amx", level, "float64", 256, 256, 256)
    assert amx_host == []
    _, why = _planner.faster("amx", level, "float64", 8192, 8192, 8192)
    assert amx_host == ["amx"] and "rates measured" in why


def test_moving_a_native_curve_keeps_its_shape():
    base = _cost._BUILTIN["amx"]
    ref = _fitted_amx()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_cost.FITTED_ON, "amx", ref)
        moved = _cost.for_device("amx", _amx_host(ref))
    for dt, points in base.native_curve.items():
        assert [f for f, _ in moved.native_curve[dt]] == [f for f, _ in points]
        for (_, r), (_, got) in zip(points, moved.native_curve[dt]):
            assert got == pytest.approx(0.9 * r)


def test_cli_amx_without_amx_says_so(monkeypatch, capsys):
    from emulinalg.harness import cli

    monkeypatch.setattr(_calibration, "device_name", lambda b: None)
    assert cli.main(["calibrate", "--backend", "amx"]) == 2
    err = capsys.readouterr().err
    assert "AMX is not usable" in err and err.count("\n") == 1


def test_cli_measures_the_amx_host_where_there_is_no_gpu(amx_host, capsys):
    from emulinalg.harness import cli

    assert cli.main(["calibrate"]) == 0
    assert amx_host == ["amx"]
    assert "cost model for amx" in capsys.readouterr().out


def test_cli_caches_amx_rates_before_a_fitted_host_exists(amx_host, monkeypatch, capsys, tmp_path):
    """Without the fitted host's rates (``FITTED_ON``) there is nothing to move the amx model
    by: the rates are measured and cached (records of a fit need them), the built-in model
    stays, and the output says so."""
    from emulinalg.harness import cli

    monkeypatch.delitem(_cost.FITTED_ON, "amx")
    assert cli.main(["calibrate", "--backend", "amx"]) == 0
    out = capsys.readouterr().out
    assert amx_host == ["amx"] and "the built-in one" in out and "INT8 GEMM" in out
    assert len(os.listdir(tmp_path)) == 1
    assert _cost.get_cost_model("amx", 2.0 * 8192**3) is _cost._BUILTIN["amx"]


def test_small_products_do_not_wait_for_a_measurement(amx_host, monkeypatch):
    """While one thread measures the host (about a second), another's small product takes the
    built-in model at once instead of waiting on the lock."""
    import threading

    started, release = threading.Event(), threading.Event()
    measure = _calibration.measure

    def slow(backend_name="cupy"):
        started.set()
        release.wait(10)
        return measure(backend_name)

    monkeypatch.setattr(_calibration, "measure", slow)
    big = threading.Thread(target=_cost.get_cost_model, args=("amx", 2.0 * 8192**3))
    big.start()
    try:
        assert started.wait(10)
        assert _cost.get_cost_model("amx", 2.0 * 64**3) is _cost._BUILTIN["amx"]
        assert not release.is_set()  # answered while the measurement still ran
    finally:
        release.set()
        big.join(10)
    assert amx_host == ["amx"]
    assert _cost.get_cost_model("amx", 2.0 * 64**3) is not _cost._BUILTIN["amx"]
