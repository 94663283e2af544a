"""The multi-GPU example (``emulinalg.examples.multi_gpu``) on a dask-cuda cluster of the GPUs
this machine has (one worker per GPU; the one-GPU machine: a single worker): cupy chunks made on
the workers, the emulated product at least as accurate as dask's native one on the same sampled
entries, the same product on every worker count, and the NVLink-multicast variables in the
workers' environment (issue #27). Runs where cupy sees a CUDA GPU and dask-cuda is installed."""

from __future__ import annotations

import os

import pytest
from _gpu_helpers import require_gpu

cp = require_gpu()
pytest.importorskip("dask_cuda", reason="dask-cuda is not installed")

from emulinalg.examples import multi_gpu  # noqa: E402

pytestmark = pytest.mark.gpu


def test_scaling_on_the_gpus():
    counts = sorted({1, multi_gpu.visible_gpus()})
    res = multi_gpu.scaling(
        counts, cluster_kwargs={"quiet": True}, m=2048, k=4096, n=1536,
        chunks=(1024, 1024, 512), rows=4, cols=64, progress=False, cupy=True, repeat=1,
        warmup=1,
    )  # fmt: skip
    assert [r["gpus"] for r in res] == counts
    assert len({r["sum"] for r in res}) == 1  # the same product on every count
    for r in res:
        assert r["chunk_library"] == "cupy" and r["nonfinite_mismatch"] == 0
        assert r["bits_maxrel"] >= r["native_graph_bits_maxrel"]
        assert r["bits_cw"] >= r["native_graph_bits_cw"]
        print(
            f"{r['gpus']} GPU(s): emulated {r['seconds']:.3f} s, dask native "
            f"{r['native_graph_seconds']:.3f} s; {r['plan'][:120]}"
        )


def test_cuda_workers_without_nvlink_multicast():
    cluster, client = multi_gpu.start_cluster(1, quiet=True)
    try:
        seen = client.run(lambda: {key: os.environ.get(key) for key in multi_gpu.NO_MULTICAST})
        device = client.run(lambda: __import__("cupy").cuda.runtime.getDevice())
    finally:
        client.close()
        cluster.close()
    assert list(seen.values()) == [multi_gpu.NO_MULTICAST]
    assert list(device.values()) == [0]
