"""The graphs' tasks and block products pass through their chunks' backend's ``first_use``
(issue #24, "first use": on a fresh GPU machine dask's worker threads each compiled the same
cupy kernels at once, 214 s for a 384 x 1024 x 320 product on 16 threads). Here the numpy
chunks' backend is given the cupy backend's gate (``emulinalg.backends.cuda.first_use``) with a
recorder: every kind of task is gated, no run of a kind overlaps its first, and the product is
the one without the gate, bit for bit."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest
from _dask_helpers import _bits_equal, _eager, da, dask

import emulinalg
import emulinalg.backends
from emulinalg.backends import cuda
from emulinalg.inputs import phi_matrix


class _Recorder:
    """A ``first_use`` for the numpy chunks' backend: the cupy backend's gate under a key of
    this test, recording per kind its runs and any run that started while its first ran."""

    def __init__(self):
        self.token = object()  # keys of this test only: the process's gate keeps warm keys
        self.lock = threading.Lock()
        self.runs: dict = {}
        self.cold_running: set = set()
        self.beside_cold: list = []

    @contextlib.contextmanager
    def __call__(self, what):
        key = ("dask first-use test", self.token, *what)
        with cuda.first_use(key) as gate:
            cold = key not in cuda._warm  # only a kind's first (working) runs are inside cold
            with self.lock:
                self.runs[what] = self.runs.get(what, 0) + 1
                if what in self.cold_running:
                    self.beside_cold.append(what)
                if cold:
                    self.cold_running.add(what)
            try:
                if cold:
                    time.sleep(0.02)  # a compile's time: others of the kind would start now
                yield gate
            finally:
                with self.lock:
                    self.cold_running.discard(what)


def _task_names(runs):
    return {w[1].rsplit(".", 2)[-2] + "." + w[1].rsplit(".", 1)[-1] for w in runs
            if w[0] == "dask task"}  # fmt: skip


@pytest.mark.parametrize("mode", ["shared", "dd"])
def test_tasks_run_through_the_first_use_gate(mode, monkeypatch):
    monkeypatch.setenv("EMULINALG_DASK_MODE", mode)
    A = phi_matrix((96, 256), 1.0, "float64", seed=31)
    B = phi_matrix((256, 80), 1.0, "float64", seed=32)
    a = da.from_array(A, chunks=(32, 64))
    b = da.from_array(B, chunks=(64, 40))

    def product():
        c = _eager(emulinalg.matmul, a, b)
        with dask.config.set(scheduler="threads", num_workers=4):
            return np.asarray(c.compute())

    plain = product()
    rec = _Recorder()
    backend = emulinalg.backends.for_namespace(np)  # numpy, or amx on AMX hosts
    monkeypatch.setattr(backend, "first_use", rec, raising=False)
    gated = product()
    assert _bits_equal(gated, plain).all()
    assert rec.beside_cold == []  # no run of a kind started while its first one ran
    names = _task_names(rec.runs)
    if mode == "shared":
        want = {"statistics._line_stats", "certificate._cert_block", "crt._residues_chunk",
                "crt._product_block", "crt._wsum"}  # fmt: skip
    else:  # the block products are the engine's, gated as products of their dtypes
        want = {"dd._emulated_block", "dd._round"}
        (kind,) = [w for w in rec.runs if w[0] == "matmul"]  # the block products' one kind
        assert kind[:5] == ("matmul", "float64", "float64", False, True)
        assert rec.runs[kind] == 3 * 2 * 4
    assert want <= names, sorted(names)
    # every kind ran more often than once (the graph has several chunks and blocks of each)
    assert sum(rec.runs.values()) > 2 * len(rec.runs)


def test_an_idle_run_leaves_its_kind_cold(monkeypatch):
    """A task run that returns early (``blocks.idle``) does none of its kind's work: the kind
    stays cold, and the first run that works warms it; the caller gets the plain value."""
    from emulinalg.backends.dask import blocks

    rec = _Recorder()
    backend = emulinalg.backends.for_namespace(np)
    monkeypatch.setattr(backend, "first_use", rec, raising=False)

    @blocks.task
    def chunk_task(x, work):
        return x.sum() if work else blocks.idle(None)

    x = np.ones(4)
    key = ("dask first-use test", rec.token, "dask task",
           f"{chunk_task.__module__}.{chunk_task.__qualname__}", "float64")  # fmt: skip
    assert chunk_task(x, False) is None and key not in cuda._warm
    assert chunk_task(x, False) is None and key not in cuda._warm
    assert chunk_task(x, True) == 4.0 and key in cuda._warm
    assert rec.runs[key[2:]] == 3
