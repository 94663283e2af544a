"""Fixtures of the dask tests: a real distributed cluster (one per module), dask's synchronous
scheduler, and the in-core engine without its contraction split and its line patch."""

from __future__ import annotations

import pytest

distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

from emulinalg import _engine  # noqa: E402
from emulinalg.algorithm import refinement  # noqa: E402


@pytest.fixture(autouse=True)
def in_core_without_split(monkeypatch):
    """The Scheme II graphs take entries beyond the certificate from the native product (they
    do not split the contraction, docs/limitations.md), and the tests hold them to the in-core
    engine's bits and decisions: the engine's without its split (in this process; the tests'
    inputs have no symmetry zeros, so worker processes that split change nothing)."""
    monkeypatch.setattr(_engine, "K_SPLITS", 0)


@pytest.fixture(autouse=True)
def in_core_without_lines(monkeypatch):
    """The shared graphs' refinement patches entries only (no ``refinement.line_patch``: lines
    from the native product, docs/limitations.md), and the tests hold them to the in-core
    engine's decisions: the engine's without lines here (no entries may go to them; the "dd"
    mode's block products, which run the engine, then take none either in this process)."""
    monkeypatch.setattr(refinement, "LINE_SHARE", 1 << 62)


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
