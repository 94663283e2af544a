"""The benchmark harness (``python -m emulinalg bench``), its plots and the stage recorder.

Records are checked against independent recomputations: the same inputs are rebuilt from the
seed, multiplied natively and through ``emulinalg.matmul``, and graded with
``emulinalg.reference``; throughput and speedup are recomputed from the recorded times. The
command-line runs use ``--quick`` with tiny sizes so the file stays a few seconds long; the
full ``--quick`` sweep runs in CI (``.ci/run``). Plots use matplotlib's Agg canvas (no display).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import emulinalg
from emulinalg import _timing
from emulinalg.harness import bench, bench_cli, devices
from emulinalg.harness.cli import main as cli
from emulinalg.harness.records import bits_table, load_records, table
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul

# docs/performance.md: the keys every measurement record carries.
DESIGN_KEYS = {
    "backend", "op", "dtype", "precision", "scheme", "m", "n", "k", "batch", "phi", "seconds",
    "tflops", "native_tflops", "speedup", "bits_maxrel", "native_bits_maxrel", "bits_cw",
    "native_bits_cw", "reference", "device", "date", "command",
}  # fmt: skip
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    """(width, height) from a PNG header (independent of matplotlib)."""
    with open(path, "rb") as fh:
        data = fh.read(24)
    assert data[:8] == PNG_SIGNATURE
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# ---------------------------------------------------------------------------------------------
# the stage recorder
# ---------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_stage_is_a_shared_no_op_without_recording():
    assert _timing.stage("products") is _timing.stage("scaling")
    with _timing.stage("products"):
        pass


def test_recorder_times_stages_exclusively():
    # outer runs 0..10, inner 2..7 inside it, a second inner 8..9
    rec = _timing.Recorder(clock=FakeClock([0.0, 2.0, 7.0, 8.0, 9.0, 10.0]))
    with rec.stage("outer"):
        with rec.stage("inner"):
            pass
        with rec.stage("inner"):
            pass
    assert rec.seconds == {"outer": 10.0 - 5.0 - 1.0, "inner": 5.0 + 1.0}
    assert rec.calls == {"outer": 1, "inner": 2}
    assert rec.total() == 10.0


def test_recorder_syncs_at_every_boundary():
    calls = []
    rec = _timing.Recorder(sync=lambda: calls.append(1))
    with rec.stage("a"), rec.stage("b"):
        pass
    assert len(calls) == 4


def test_staged_decorator_records_only_inside_recording():
    @_timing.staged("slicing")
    def f(x):
        return x + 1

    assert f(1) == 2
    with _timing.recording() as rec:
        assert f(2) == 3
    assert rec.calls == {"slicing": 1}
    assert f(3) == 4 and rec.calls == {"slicing": 1}


@pytest.mark.parametrize(
    "precision",
    ["float64", emulinalg.OzakiII(moduli=14, mode="fast"), emulinalg.OzakiI(slices=7)],
    ids=str,
)
@pytest.mark.usefixtures("numpy_backend")  # counts the generic engine's stage calls
def test_recording_covers_every_stage_and_changes_no_result(precision):
    a = phi_matrix((40, 30), 1.0, seed=3)
    b = phi_matrix((30, 20), 1.0, seed=4)
    with emulinalg.config(strategy="eager"):
        plain = emulinalg.matmul(a, b, precision=precision)
        with _timing.recording() as rec:
            timed = emulinalg.matmul(a, b, precision=precision)
    np.testing.assert_array_equal(timed, plain)
    # an explicit scheme needs no statistics to choose a count
    expected = set(_timing.STAGES) - ({"statistics"} if precision != "float64" else set())
    assert set(rec.seconds) == expected
    assert all(t > 0 for t in rec.seconds.values())
    # products: one call per modulus (Scheme II; the accurate-mode bound GEMM is scaling) or
    # per significance level (Scheme I)
    plan = emulinalg.last_plan()
    if isinstance(precision, emulinalg.OzakiI):
        assert rec.calls["products"] == precision.slices
    else:
        assert plan.scheme.startswith("OzakiII(")
        assert rec.calls["products"] == plan.gemms - plan.scheme.endswith("accurate)")


def test_native_products_record_no_stage():
    a = np.ones((8, 8))
    with _timing.recording() as rec:  # default strategy: native (numpy or amx backend)
        emulinalg.matmul(a, a)
    assert rec.seconds == {}


# ---------------------------------------------------------------------------------------------
# methods on the command line
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "label", "precision", "family"),
    [
        ("float64", "float64", "float64", None),
        ("float32 [ozaki1]", "float32 [ozaki1]", "float32", "ozaki1"),
        ("40", "40 bits", 40, None),
        ("OzakiII(moduli=14, mode=fast)", "OzakiII(moduli=14, mode=fast)",
         emulinalg.OzakiII(moduli=14, mode="fast"), None),
        ("OzakiII(15)", "OzakiII(moduli=15, mode=accurate)", emulinalg.OzakiII(moduli=15), None),
        ("ozakii(7)", "OzakiI(slices=7)", emulinalg.OzakiI(slices=7), None),
        ("BF16x3()", "BF16x3()", emulinalg.BF16x3(), None),
        ("BF16xN(6,21)", "BF16xN(slices=6, products=21)", emulinalg.BF16xN(6, 21), None),
        ("bf16xn()", "BF16xN(slices=6, products=10)", emulinalg.BF16xN(), None),
        ("BF16xN(products=6)", "BF16xN(slices=6, products=6)", emulinalg.BF16xN(6, 6), None),
    ],
)  # fmt: skip
def test_parse_method(text, label, precision, family):
    m = bench.parse_method(text)
    assert (m.label, m.precision, m.family) == (label, precision, family)


@pytest.mark.parametrize(
    "text",
    ["float16", "OzakiII(moduli=99)", "OzakiI(0)", "float64[ozaki3]", "OzakiI(7)[ozaki1]",
     "BF16xN(6,7)", "BF16xN(2)"],
)  # fmt: skip
def test_parse_method_rejects(text):
    with pytest.raises(ValueError, match=r"method|family"):
        bench.parse_method(text)


def test_split_top_keeps_scheme_parameters_together():
    assert bench_cli._split_top("float64, OzakiII(moduli=14, mode=fast),OzakiI(7)") == [
        "float64",
        "OzakiII(moduli=14, mode=fast)",
        "OzakiI(7)",
    ]


def test_reference_rows_are_evenly_strided():
    rows = range(1000)[bench._ref_rows(1000, 32)]
    assert len(rows) == 32 and rows[0] == 0 and rows[-1] == 31 * 31
    assert list(range(20)[bench._ref_rows(20, 32)]) == list(range(20))
    assert list(range(20)[bench._ref_rows(20, 0)]) == list(range(20))


# ---------------------------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def records():
    settings = bench.Settings(
        sizes=[48],
        shapes=["square", "batched"],
        dtypes=["float64", "complex64"],
        phis=[1.0],
        methods=[bench.parse_method(t) for t in ("float64", "OzakiII(moduli=14, mode=fast)")],
        repeat=2,
        ref_rows=16,
        command="test",
    )
    return bench.run(settings, notify=pytest.fail)


def test_records_have_the_design_format(records):
    # 2 shapes x 2 dtypes x (native + 2 methods)
    assert len(records) == 12
    for r in records:
        assert set(r) >= DESIGN_KEYS, DESIGN_KEYS - set(r)
        assert "error" not in r
        json.dumps(r, allow_nan=False)
        assert r["backend"] == "numpy" and r["op"] == "matmul" and r["reference"] == "exact"
        assert r["strategy"] == "eager" and r["command"] == "test"
    natives = [r for r in records if r["precision"] == "native"]
    assert len(natives) == 4 and all(r["speedup"] == 1.0 for r in natives)
    emulated = [r for r in records if r["precision"] != "native"]
    assert all(r["scheme"].startswith("OzakiII(") and not r["fallback"] for r in emulated)


def test_record_figures_recompute(records):
    for r in records:
        flops = 2 * r["batch"] * r["m"] * r["n"] * r["k"] * (4 if "complex" in r["dtype"] else 1)
        assert r["tflops"] == pytest.approx(flops / r["seconds"] / 1e12)
        assert r["native_tflops"] == pytest.approx(flops / r["native_seconds"] / 1e12)
        assert r["speedup"] == pytest.approx(r["native_seconds"] / r["seconds"])
        if "stages" in r:
            assert set(_timing.STAGES) | {"other"} == set(r["stages"])
            assert all(v >= 0 for v in r["stages"].values())


def test_record_bits_match_an_independent_grading(records):
    """Rebuild the inputs from the seed, multiply, grade the same rows of the first batch entry."""
    for r in records:
        batch, m, n, k = bench.SHAPES[r["shape"]](r["size"])
        assert (batch, m, n, k) == (r["batch"], r["m"], r["n"], r["k"])
        shape_a = (m, k) if batch == 1 else (batch, m, k)
        shape_b = (k, n) if batch == 1 else (batch, k, n)
        a = phi_matrix(shape_a, r["phi"], dtype=r["dtype"], seed=0)
        b = phi_matrix(shape_b, r["phi"], dtype=r["dtype"], seed=1)
        if r["precision"] == "native":
            c = a @ b
        else:
            precision = bench.parse_method(r["method"]).precision
            with emulinalg.config(strategy="eager"):
                c = emulinalg.matmul(a, b, precision=precision)
        a0, b0, c0 = (x[0] if batch > 1 else x for x in (a, b, c))
        rows = np.arange(0, m, m // r["ref_rows"])[: r["ref_rows"]]  # the graded rows: strided
        acc = accuracy(c0[rows], a0[rows], b0, ref=exact_matmul(a0[rows], b0))
        assert r["bits_maxrel"] == pytest.approx(acc["bits_maxrel"], abs=1e-9)
        assert r["bits_cw"] == pytest.approx(acc["bits_cw"], abs=1e-9)


def test_level_records_are_at_least_as_accurate_as_native(records):
    for r in records:
        if r["precision"] == "float64":
            assert r["bits_maxrel"] >= r["native_bits_maxrel"]
            assert r["bits_cw"] >= r["native_bits_cw"]
            # complex64 inputs: the float64-level product rounded once to complex64
            assert r["bits_maxrel"] > (50 if r["dtype"] == "float64" else 23)


def test_table_lists_every_record(records):
    text = table(records, markdown=True).splitlines()
    assert len(text) == 2 + len(records)
    assert text[0].startswith("| backend |") and "OzakiII(moduli=14, mode=fast)" in text[-1]


def test_load_records_reports_the_bad_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n\nnot json\n')
    with pytest.raises(ValueError, match=r"r\.jsonl:3"):
        load_records([str(path)])


# ---------------------------------------------------------------------------------------------
# plots and the command line
# ---------------------------------------------------------------------------------------------


def test_plot_writes_three_panels(records, tmp_path):
    pytest.importorskip("matplotlib")  # the [test] extra installs it
    from emulinalg.harness import plots as _plots

    one = _plots.plot(records, str(tmp_path / "all.png"))
    w, h = png_size(one[0])
    assert w > 2 * h > 400
    each = _plots.plot(records, str(tmp_path / "p-{panel}.png"))
    assert [p.rsplit("-", 1)[1] for p in each] == ["plane.png", "speedup.png", "stages.png"]
    for p in each:
        assert png_size(p)[0] > 400
    with pytest.raises(ValueError, match="no successful"):
        _plots.plot([{**records[0], "error": "x"}], str(tmp_path / "none.png"))


def test_plots_derive_native_points_from_native_keys(records):
    """Records with only the native_* figures (as the record format requires) still show native."""
    pytest.importorskip("matplotlib")
    from emulinalg.harness import plots as _plots

    emulated = [r for r in records if r["method"] != "native"]
    derived = [r for r in _plots._usable(emulated) if r["method"] == "native"]
    natives = sorted(
        (r["dtype"], r["shape"], r["tflops"]) for r in records if r["method"] == "native"
    )
    assert sorted((r["dtype"], r["shape"], r["tflops"]) for r in derived) == natives
    for r in derived:
        assert r["seconds"] == pytest.approx(r["native_seconds"])
        assert r["bits_maxrel"] == r["native_bits_maxrel"]


def test_cli_quick_writes_records_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, plot = tmp_path / "r.jsonl", tmp_path / "r.png"
    quick = ["bench", "--quick", "--sizes", "16,32", "--dtype", "float64", "-q"]
    rc = cli([*quick, "--precision", "OzakiII(14, fast)", "--out", str(out), "--plot", str(plot)])
    assert rc == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    # --quick: square at both sizes, tall-skinny and batched at the larger one
    got = sorted((r["shape"], r["size"], r["method"]) for r in lines)
    want = sorted(
        (shape, size, method)
        for shape, size in [("square", 16), ("square", 32), ("tall-skinny", 32), ("batched", 32)]
        for method in ("native", "OzakiII(moduli=14, mode=fast)")
    )
    assert got == want
    command = "python -m emulinalg bench --backend numpy --quick --sizes 16,32"
    assert all(r["command"].startswith(command) for r in lines)
    assert png_size(plot)[0] > 400
    assert "OzakiII(moduli=14, mode=fast)" in capsys.readouterr().out

    # re-plot the saved records without measuring
    again = tmp_path / "again-{panel}.svg"
    assert cli(["bench", "--records", str(out), "--plot", str(again)]) == 0
    assert (tmp_path / "again-stages.svg").read_text().startswith("<?xml")


def test_cli_skips_a_missing_backend(capsys):
    if devices.missing("cupy") is None:
        pytest.skip("cupy is usable here")
    assert cli(["bench", "--backend", "cupy", "--sizes", "16", "-q"]) == 1
    err = capsys.readouterr().err
    assert "skipping backend cupy" in err and ".[cuda]" in err


def test_cli_skips_amx_where_it_is_not_usable(capsys):
    from emulinalg.backends import amx

    if amx.usable():
        pytest.skip("AMX is usable here")
    assert cli(["bench", "--backend", "amx", "--sizes", "16", "-q"]) == 1
    assert "skipping backend amx: AMX is not usable here" in capsys.readouterr().err


def test_amx_family_runs_products_on_the_amx_backend(monkeypatch):
    """--backend amx: the products run with EMULINALG_AMX=1 (here on the tile model), the records
    say "amx" and the emulated figures equal the numpy backend's for an explicit Scheme II (the
    AMX INT8 GEMM is exact, as numpy's)."""
    import os

    pytest.importorskip("emulinalg._amx", reason="emulinalg._amx is not built")
    from emulinalg.backends import amx

    before = os.environ.get("EMULINALG_AMX")

    monkeypatch.setattr(amx, "usable", lambda: True)
    monkeypatch.setattr(amx, "EMULATE", True)
    method = bench.parse_method("OzakiII(moduli=14, mode=accurate)")

    def run(family):
        settings = bench.Settings(
            backends=[family], sizes=[32], shapes=["square"], dtypes=["float64"], phis=[1.0],
            methods=[method], repeat=1, ref_rows=8, command="test",
        )  # fmt: skip
        return {r["method"]: r for r in bench.run(settings, notify=pytest.fail)}

    got, want = run("amx"), run("numpy")
    rec = got["OzakiII(moduli=14, mode=accurate)"]
    assert rec["backend"] == "amx"
    assert rec["bits_maxrel"] == want["OzakiII(moduli=14, mode=accurate)"]["bits_maxrel"]
    # the mod GEMMs' K chunk this process timed (none at this size), on amx records only
    assert rec["amx_mod_chunk"] == amx.mod_chunk()
    assert "amx_mod_chunk" not in want["OzakiII(moduli=14, mode=accurate)"]
    assert os.environ.get("EMULINALG_AMX") == before  # only while the products run


@pytest.mark.parametrize(
    "args", [["--shape", "round"], ["--precision", "float16"], ["--backend", "tpu"]]
)
def test_cli_rejects_bad_options(args, capsys):
    assert cli(["bench", "--sizes", "16", "-q", *args]) == 2
    assert "bench:" in capsys.readouterr().err


def test_timing_is_median_of_runs():
    class Dev:
        def __init__(self):
            self.times = iter([9.0, 3.0, 1.0, 2.0])

        def run(self, fn):
            return fn(), next(self.times)

    out, t, runs = bench.measure(Dev(), lambda: "x", repeat=3, warmup=1, budget=math.inf)
    assert (out, t, runs) == ("x", 2.0, 3)
    # the budget stops the repeats after the run that exhausts it
    out, t, runs = bench.measure(Dev(), lambda: "x", repeat=3, warmup=1, budget=2.5)
    assert (t, runs) == (3.0, 1)


def test_reference_workers_give_the_same_records(records):
    """References computed in a worker process (rebuilt from the seed) grade identically."""
    settings = bench.Settings(
        sizes=[48],
        shapes=["batched"],
        dtypes=["complex64"],
        phis=[1.0],
        methods=[bench.parse_method("OzakiII(moduli=14, mode=fast)")],
        repeat=1,
        ref_rows=16,
        stages=False,
        ref_workers=1,
    )
    again = bench.run(settings, notify=pytest.fail)
    methods = {"native", "OzakiII(moduli=14, mode=fast)"}
    before = [
        r
        for r in records
        if r["shape"] == "batched" and r["dtype"] == "complex64" and r["method"] in methods
    ]
    assert [(r["method"], r["bits_maxrel"], r["bits_cw"]) for r in again] == [
        (r["method"], r["bits_maxrel"], r["bits_cw"]) for r in before
    ]


def test_bits_table_pivots_by_phi():
    base = {"family": "numpy", "shape": "square", "m": 8, "n": 8, "k": 8, "dtype": "float64"}
    recs = [
        {**base, "method": "float64", "phi": 0.0, "bits_maxrel": 53.0, "bits_cw": None,
         "scheme": "OzakiII(moduli=17, mode=accurate)"},
        {**base, "method": "native", "phi": 1.0, "bits_maxrel": 31.0, "bits_cw": 49.5,
         "scheme": "native"},
        {**base, "method": "native", "phi": 0.0, "bits_maxrel": 30.0, "bits_cw": 50.0,
         "scheme": "native"},
        {**base, "method": "float64", "phi": 1.0, "bits_maxrel": 50.04, "bits_cw": 52.0,
         "scheme": "OzakiII(moduli=19, mode=accurate)", "native_entries": 3},
        {**base, "method": "OzakiI(slices=7)", "phi": 1.0, "error": "boom"},
    ]  # fmt: skip
    assert bits_table(recs).splitlines() == [
        "**numpy, square 8×8×8, float64 (bits maxrel / componentwise)**",
        "",
        "| method | φ=0 | φ=1 | scheme |",
        "|---|---|---|---|",
        "| native | 30.0 / 50.0 | 31.0 / 49.5 |  |",
        "| float64 | 53.0 / exact | 50.0 / 52.0 | OzakiII(moduli=17/19, mode=accurate); "
        "native entries: 3 at φ=1 |",
    ]


def test_reference_columns_grade_a_subset_of_entries():
    """--ref-cols: the exact reference of sampled rows x sampled columns (large N on GPUs)."""
    settings = bench.Settings(
        sizes=[40], shapes=["square"], dtypes=["float64"], phis=[2.0],
        methods=[bench.parse_method("OzakiII(moduli=9, mode=accurate)")],
        repeat=1, ref_rows=8, ref_cols=5, stages=False,
    )  # fmt: skip
    recs = bench.run(settings, notify=pytest.fail)
    assert [r["ref_cols"] for r in recs] == [5, 5] and "--ref-cols 5" in bench_cli.command_line(
        settings
    )
    a = phi_matrix((40, 40), 2.0, seed=0)
    b = phi_matrix((40, 40), 2.0, seed=1)
    rows, cols = np.arange(0, 40, 5), np.arange(0, 40, 8)
    with emulinalg.config(strategy="eager"):
        c = emulinalg.matmul(a, b, precision=emulinalg.OzakiII(moduli=9))
    sub_b = b[:, cols]
    acc = accuracy(c[rows][:, cols], a[rows], sub_b, ref=exact_matmul(a[rows], sub_b))
    assert recs[1]["bits_maxrel"] == pytest.approx(acc["bits_maxrel"], abs=1e-9)
    assert recs[1]["bits_cw"] == pytest.approx(acc["bits_cw"], abs=1e-9)


def test_demo_rejects_a_precision_filter_matching_no_row(capsys):
    from emulinalg.harness.cli import main

    assert main(["demo", "--size", "8", "--precision", "fp64"]) == 2
    err = capsys.readouterr().err
    assert "fp64 matches no row" in err and "OzakiII(moduli=14" in err


def test_best_of_keeps_the_fastest_recorded_call():
    """best_of: one untimed call, then the fastest of `repeat` recorded calls with its
    stage seconds (here a product: every stage of the emulation appears)."""
    import time

    a = phi_matrix((48, 40), 1.0, "float64", seed=5)
    calls = []

    def fn():
        calls.append(time.perf_counter())
        with emulinalg.config(strategy="eager"):
            return emulinalg.matmul(a, a.T)

    t, stages = bench.best_of(fn, repeat=3)
    assert len(calls) == 4  # warm-up + 3
    assert {"statistics", "slicing", "products", "reconstruction"} <= set(stages)
    assert 0 < sum(stages.values()) <= t * 1.5
