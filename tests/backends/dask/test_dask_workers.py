"""The dask layer across several worker processes, as a multi-GPU cluster runs it, on CPU
workers: the products of 1 and 2 workers bit for bit the same (``multi_gpu.scaling``, with a
``distributed.LocalCluster`` standing in for dask-cuda's), the in-core bits with the workers
spilling to disk, the residues made once per chunk, and the NVLink-multicast variables in the
workers' environment. The GPU path itself (dask-cuda, cupy chunks) runs on the GPU machine
(``tests/backends/gpu``)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from _dask_helpers import _assert_in_core_bits, _eager

import emulinalg
from emulinalg.inputs import phi_matrix

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

from emulinalg.examples import multi_gpu  # noqa: E402

pytestmark = pytest.mark.dask


def _cpu_cluster(workers, memory_limit="auto", device_memory_limit=None, quiet=True):
    """``multi_gpu.cuda_cluster``'s stand-in: CPU worker processes, one thread each."""
    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=memory_limit,
        dashboard_address=None,
    )


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_scaling_gives_the_same_product_on_1_and_2_workers(dtype):
    res = multi_gpu.scaling(
        [2, 1], factory=_cpu_cluster, m=192, k=256, n=96, chunks=(64, 64, 48), rows=8,
        cols=0, progress=False, cupy=False, repeat=1, warmup=0, dtype=dtype,
    )  # fmt: skip
    one, two = res
    assert [one["gpus"], two["gpus"]] == [1, 2]
    assert "2 worker(s)" in two["workers"] and "1 worker(s)" in one["workers"]
    # every block of C (its sum) bit for bit the same whatever the workers
    assert one["sum"] == two["sum"] and one["plan"] == two["plan"]
    assert two["scaling_efficiency"] == pytest.approx(one["seconds"] / (2 * two["seconds"]))
    assert one["scaling_efficiency"] == 1.0 and one["native_graph_efficiency"] == 1.0
    # one worker sends the client its few results only; two exchange chunks (or residues)
    results = 2 * 8 * 96 * 16  # the sampled entries (complex: 16 bytes), twice over
    assert 0 < one["moved_bytes"] <= results and 0 < one["native_graph_moved_bytes"] <= results
    assert two["moved_bytes"] > 4 * results and two["native_graph_moved_bytes"] > 4 * results
    for r in res:
        assert r["nonfinite_mismatch"] == 0
        # dask's native product graded on the same entries; the emulated one at least as good
        assert r["bits_maxrel"] >= r["native_graph_bits_maxrel"]
        assert r["bits_cw"] >= r["native_graph_bits_cw"]
        assert r["native_graph_seconds"] > 0 and len(r["native_graph_times"]) == 1
        assert r["dtype"] == dtype
        # both estimate the same sum; the native one within its error bound's order
        diff = np.abs(np.subtract(r["native_graph_sum"], r["sum"])).max()
        assert diff <= 1e-9 * max(1.0, np.abs(r["sum"]).max())


def test_workers_start_without_nvlink_multicast():
    # unset here, so the workers can only have them from the nannies (where the environment
    # sets them, as on the GPU machine, its values stand: dask's precedence)
    saved = {key: os.environ.pop(key, None) for key in multi_gpu.NO_MULTICAST}
    try:
        cluster, client = multi_gpu.start_cluster(1, _cpu_cluster)
        try:
            seen = client.run(lambda: {key: os.environ.get(key) for key in multi_gpu.NO_MULTICAST})
        finally:
            client.close()
            cluster.close()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert list(seen.values()) == [multi_gpu.NO_MULTICAST]


def test_spilling_workers_keep_the_in_core_bits():
    # Spilling on the workers' managed memory only (no pause, no process-memory monitor), so
    # that it happens on any machine: 5 % of 64 MiB, against operands of 4.5 MiB.
    settings = {
        "distributed.worker.memory.target": 0.05,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.terminate": False,
    }
    with dask.config.set(settings):
        cluster = _cpu_cluster(2, memory_limit="64MiB")
    client = distributed.Client(cluster, set_as_default=False)
    try:
        A = phi_matrix((384, 1024), 1.0, "float64", seed=21)
        B = phi_matrix((1024, 192), 1.0, "float64", seed=22)
        a, b = da.from_array(A, chunks=(96, 256)), da.from_array(B, chunks=(256, 96))
        c = _eager(emulinalg.matmul, a, b)
        out = client.compute(c).result()
        written = client.run(
            lambda dask_worker: dask_worker.data.cumulative_metrics.get(("disk-write", "bytes"), 0)
        )
    finally:
        client.close()
        cluster.close()
    assert min(written.values()) > 0, written  # both workers spilled
    _assert_in_core_bits(out, A, B)


def test_residues_once_per_chunk(client):
    """The residue tasks of one computation: one per chunk of A and of B, each run once."""
    A = phi_matrix((256, 512), 1.0, "float64", seed=23)
    B = phi_matrix((512, 192), 1.0, "float64", seed=24)
    a, b = da.from_array(A, chunks=(64, 128)), da.from_array(B, chunks=(128, 64))
    c = _eager(emulinalg.matmul, a, b)
    client.get_task_stream(count=0)  # records the tasks from here on
    t0 = time.time()
    out = client.compute(c).result()
    names = [
        r["key"][0] if isinstance(r["key"], tuple) else r["key"]
        for r in client.get_task_stream(start=t0)
    ]
    residues = [x for x in names if str(x).startswith("emulinalg-residues")]
    assert len(residues) == a.npartitions + b.npartitions  # 16 + 12, none run twice
    assert np.isfinite(out).all()


@pytest.mark.parametrize(
    "text, visible, want",
    [("all", 4, [1, 4]), ("4", 8, [1, 4]), ("1", 1, [1]), ("8,1,2,4", 8, [1, 2, 4, 8])],
)
def test_gpu_counts(text, visible, want):
    assert multi_gpu._counts(multi_gpu.build_parser(), text, visible) == want


@pytest.mark.parametrize(
    "text, visible", [("0", 4), ("x", 4), ("1,-2", 4), ("4", 2), ("", 2), ("all", 0), ("x", None)]
)
def test_gpu_counts_refused(text, visible, capsys):
    with pytest.raises(SystemExit) as e:
        multi_gpu._counts(multi_gpu.build_parser(), text, visible)
    assert e.value.code == 2 and "--gpus" in capsys.readouterr().err


def test_demo_gpus_needs_its_extras_or_the_dask_workload(capsys):
    from emulinalg.harness import cli

    for argv in (["demo", "--gpus", "2"], ["demo", "scf", "--gpus", "2"]):
        assert cli.main(argv) == 2
        assert "demo dask --gpus" in capsys.readouterr().err
    try:
        import cupy  # noqa: F401
        import dask_cuda  # noqa: F401
    except ImportError:
        assert cli.main(["demo", "dask", "--gpus", "2"]) == 2
        err = capsys.readouterr().err  # the one extra that brings them all
        assert err.startswith("demo dask --gpus needs") and 'pip install ".[multigpu]"' in err
    # usage errors come before the extras' hint
    for bad in (["--gpus", "0"], ["--gpus", "2", "--warmup", "-1"]):
        with pytest.raises(SystemExit) as e:
            multi_gpu.main(bad)
        assert e.value.code == 2
