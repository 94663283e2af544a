"""The out-of-core example (``emulinalg.examples.out_of_core``) and ``python -m emulinalg demo
dask``: defaults and the out-of-core preset, progress reported without warnings on the
example's own cluster, the in-core comparison record.
"""

from __future__ import annotations

import json

import pytest
from _helpers import assert_quiet_demo

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")

pytestmark = pytest.mark.dask


def test_out_of_core_example_defaults_and_the_out_of_core_preset():
    """By default a product of seconds with the workers' memory left to dask; --out-of-core
    operands larger than two workers of 300 MiB; explicit values win over either."""
    from emulinalg.examples import out_of_core

    parser = out_of_core.build_parser()

    def settings(*argv):
        args = parser.parse_args(list(argv))
        out_of_core._check(parser, args)
        return args.shape, args.chunks, args.memory_limit

    assert settings() == ("256,8192,64", "128,2048,64", "auto")
    assert settings("--out-of-core") == ("1024,81920,64", "512,2048,64", "300MiB")
    assert settings("--out-of-core", "--shape", "64,512,32", "--memory-limit", "1GiB") == (
        "64,512,32",
        "512,2048,64",
        "1GiB",
    )


def test_out_of_core_example_on_a_cluster_reports_without_warnings(
    recwarn, caplog, capfd, monkeypatch
):
    """The example's own LocalCluster, small: a line per step and, with a short interval, the
    tasks done while it computes; no warning in the process, its log or the workers' output
    (no memory pause, no large graph: the operands are made on the workers)."""
    from emulinalg.examples import out_of_core

    monkeypatch.setattr(out_of_core, "REPORT_SECONDS", 0.2)
    argv = ["--shape", "64,1024,32", "--chunks", "32,256,32", "--rows", "4"]
    out, lines = assert_quiet_demo(argv, recwarn, caplog, capfd, main=out_of_core.main)
    assert lines[0] == "starting a LocalCluster of 2 workers ..."
    assert "(dask's share of this machine's memory)" in lines[1]
    assert lines[2].startswith("computing: ") and " tasks " in lines[2]
    assert lines[-1].startswith("computed in ") and "grading 4 x 32 sampled entries" in lines[-1]
    assert any(line.endswith("tasks done") for line in lines[3:-1])
    assert "sampled entries against the exact product" in out


@pytest.mark.slow
def test_demo_dask_default_without_warnings(recwarn, caplog, capfd):
    out, lines = assert_quiet_demo(["demo", "dask"], recwarn, caplog, capfd)
    assert "A: 256 x 8192, B: 8192 x 64 float64, 20 MiB of operands" in lines[1]
    assert "4 K-blocks" in out and "sampled entries against the exact product" in out


def test_out_of_core_example_incore_comparison(tmp_path):
    """--persist --incore --out: the graph beside one in-core call on the same operands (numpy
    chunks: the shared graph is the in-core product bit for bit, so both grade the same), and
    a benchmark record with the throughput ratio."""
    from emulinalg.examples import out_of_core

    out = tmp_path / "rec.jsonl"
    argv = ["--threads", "2", "--shape", "96,256,80", "--chunks", "48,128,40", "--persist",
            "--incore", "--native", "whole", "--rows", "6", "--cols", "16", "--repeat", "2",
            "--out", str(out), "--quiet"]  # fmt: skip
    assert out_of_core.main(argv) == 0
    rec = json.loads(out.read_text())
    assert rec["backend"] == "dask" and rec["m"] == 96 and rec["k"] == 256
    assert rec["bits_maxrel"] == rec["incore_bits_maxrel"]
    assert rec["bits_cw"] == rec["incore_bits_cw"]
    assert rec["bits_maxrel"] >= rec["native_bits_maxrel"]
    assert rec["ratio_to_incore"] == pytest.approx(rec["incore_seconds"] / rec["seconds"])
    assert len(rec["times"]) == 2 and rec["persist"] is True
    assert rec["speedup"] == pytest.approx(rec["tflops"] / rec["native_tflops"])
