"""Fixtures of the dask tests: a real distributed cluster (one per module), and dask's
synchronous scheduler."""

from __future__ import annotations

import pytest

distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402


@pytest.fixture(scope="module")
def client():
    """Two worker processes, one thread each (what CI runs the products through)."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    cl = distributed.Client(cluster, set_as_default=False)
    try:
        yield cl
    finally:
        cl.close()
        cluster.close()


@pytest.fixture
def sync():
    with dask.config.set(scheduler="sync"):
        yield
