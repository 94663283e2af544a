"""The dask layer (``emulinalg/backends/dask/``): building the lazy graph of an emulated product.

Nothing is computed while the graph is built, the plan describes it, errors come at call time;
meta and dtypes, chunks, numpy operands, batches and vectors, tensordot and vecdot, the ready
namespace, the performant strategy's guess (as in core), non-finite values (as native), and the
preprocessing shared by the block products (one task per chunk); dask's synchronous scheduler.
Query planning (``array.query-planning``) is fixed when ``dask.array`` is first imported, so the
other mode runs in a subprocess.
"""

from __future__ import annotations

import collections
import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from _dask_helpers import (
    CHUNKS,
    _assert_in_core_bits,
    _counting_ran,
    _eager,
    _f_only_beyond,
    _key_name,
    _level,
    _task_module,
)
from _helpers import RTOL, assert_close_to, assert_same_nonfinite_pattern

import emulinalg
import emulinalg.backends
from emulinalg import _planner
from emulinalg.algorithm import refinement
from emulinalg.backends.dask import refinement as dask_refinement
from emulinalg.backends.dask import statistics as dask_statistics
from emulinalg.inputs import phi_matrix

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

pytestmark = pytest.mark.dask


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _no_compute(*args, **kwargs):
    raise AssertionError("a dask graph was computed while the product was being built")


def _explode(x):
    raise AssertionError("a chunk was computed while the product was being built")


def _bomb(shape, chunks, dtype="float64"):
    """A dask array whose chunks raise when computed."""
    z = da.zeros(shape, chunks=chunks, dtype=dtype)
    return da.map_blocks(_explode, z, dtype=dtype, meta=np.empty((0,) * len(shape), dtype))


# --------------------------------------------------------------------------------------------
# Building the graph
# --------------------------------------------------------------------------------------------


def test_nothing_is_computed_while_building():
    a = _bomb((96, 200), (48, 64))
    b = _bomb((200, 40), (64, 40))
    with dask.config.set(scheduler=_no_compute):
        c = _eager(emulinalg.matmul, a, b)
        t = _eager(emulinalg.tensordot, a, b, axes=1)
        v = _eager(emulinalg.vecdot, a, a)
        x = _eager(emulinalg.matmul, a, b, precision=emulinalg.OzakiII(moduli=8, mode="fast"))
        z = _eager(emulinalg.matmul, a, b, precision=60)
    assert x.shape == z.shape == (96, 40)
    assert isinstance(c, da.Array) and c.shape == (96, 40) and c.dtype == np.float64
    assert t.shape == (96, 40) and v.shape == (96,)
    plan = emulinalg.last_plan()
    assert plan.backend == "dask" and plan.scheme.startswith("blocked")
    with (
        pytest.raises(AssertionError, match="chunk was computed"),
        dask.config.set(scheduler="sync"),
    ):
        c.compute()


def test_plan_describes_the_graph(monkeypatch):
    a = da.ones((100, 200), chunks=(50, 64))
    b = da.ones((200, 30), chunks=(64, 30))
    with dask.config.set(split_every=2):
        _eager(emulinalg.matmul, a, b)
    plan = emulinalg.last_plan()
    assert plan.backend == "dask"
    assert plan.scheme == (
        f"blocked: [{CHUNKS}] float64 level, Scheme II moduli chosen at compute time for the "
        "whole matrices"
    )
    text = str(plan)
    assert "4 K-blocks" in text and "split_every=2" in text and "shared preprocessing" in text
    assert "(8 + 4 residue tasks" in text and "one CRT per output block (2)" in text
    assert "k 3x64+8" in text and plan.shape == (1, 100, 30, 200)
    _eager(emulinalg.matmul, a, b, precision=emulinalg.OzakiII(moduli=14))
    assert emulinalg.last_plan().scheme == f"blocked: [{CHUNKS}] OzakiII(moduli=14, mode=accurate)"
    assert "shared preprocessing: OzakiII(moduli=14" in str(emulinalg.last_plan())
    with emulinalg.config(scheme="ozaki1"):  # Scheme I: block products in double-double
        _eager(emulinalg.matmul, a, b)
    plan = emulinalg.last_plan()
    assert plan.scheme.endswith("Scheme I configuration chosen per block at compute time")
    assert "double-double" in str(plan)
    monkeypatch.setenv("EMULINALG_DASK_MODE", "dd")
    _eager(emulinalg.matmul, a, b)
    plan = emulinalg.last_plan()
    assert plan.scheme.endswith("Scheme II configuration chosen per block at compute time")
    assert "double-double" in str(plan)
    monkeypatch.setenv("EMULINALG_DASK_MODE", "both")
    with pytest.raises(ValueError, match="EMULINALG_DASK_MODE"):
        _eager(emulinalg.matmul, a, b)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda a, b: emulinalg.matmul(a, b), "contraction dimensions differ"),
        (lambda a, b: emulinalg.tensordot(a, b, axes=([1], [3])), "out of range"),
        (lambda a, b: emulinalg.tensordot(a, b, axes=1), "contracted axis"),
        (lambda a, b: emulinalg.vecdot(a, b), "contracted sizes differ"),
        (lambda a, b: emulinalg.matmul(a, da.ones(())), "at least one dimension"),
    ],
)
def test_shape_errors_at_call_time(call, match):
    a = _bomb((8, 6), 4)
    b = _bomb((5, 3), 4)
    with dask.config.set(scheduler=_no_compute), pytest.raises(ValueError, match=match):
        call(a, b)


def test_batch_dims_that_do_not_broadcast():
    a = _bomb((2, 4, 6), 3)
    b = _bomb((3, 6, 5), 3)
    with dask.config.set(scheduler=_no_compute), pytest.raises(ValueError, match="broadcast"):
        emulinalg.matmul(a, b)


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
def test_meta_and_dtype(dtype, sync):
    a = da.from_array(phi_matrix((20, 30), 1, dtype, seed=1), chunks=(10, 12))
    b = da.from_array(phi_matrix((30, 7), 1, dtype, seed=2), chunks=(12, 7))
    c = _eager(emulinalg.matmul, a, b)
    assert type(c._meta) is np.ndarray and c.dtype == np.dtype(dtype)
    assert c.chunks == ((10, 10), (7,))
    out = c.compute()
    assert type(out) is np.ndarray and out.dtype == np.dtype(dtype)


def test_contraction_chunks_aligned(sync, rng):
    A, B = rng.standard_normal((12, 50)), rng.standard_normal((50, 9))
    a = da.from_array(A, chunks=(5, 7))  # 8 K-blocks
    b = da.from_array(B, chunks=(20, 4))  # 3 K-blocks: a follows b
    c = _eager(emulinalg.matmul, a, b)
    assert "k 2x20+10" in str(emulinalg.last_plan())
    assert c.chunks == ((5, 5, 2), (4, 4, 1))
    assert_close_to(c.compute(), A @ B, np.abs(A) @ np.abs(B), RTOL["float64"])


def test_numpy_operand_is_wrapped(sync, rng):
    A, B = rng.standard_normal((10, 30)), rng.standard_normal((30, 6))
    a = da.from_array(A, chunks=(5, 10))
    for c in (_eager(emulinalg.matmul, a, B), _eager(emulinalg.matmul, A, da.from_array(B))):
        assert isinstance(c, da.Array)
        assert_close_to(c.compute(), A @ B, np.abs(A) @ np.abs(B), RTOL["float64"])


def test_chunks_of_different_libraries_rejected():
    a = da.ones((4, 4), chunks=2)
    b = da.ma.masked_array(da.ones((4, 4), chunks=2))  # numpy.ma chunks
    with dask.config.set(scheduler=_no_compute), pytest.raises(TypeError, match="libraries"):
        _eager(emulinalg.matmul, a, b)


def test_batched_and_vectors(sync, rng):
    A = rng.standard_normal((3, 8, 40))
    B = rng.standard_normal((40, 5))
    v = rng.standard_normal(40)
    a = da.from_array(A, chunks=(2, 4, 16))
    b = da.from_array(B, chunks=(16, 5))
    c = _eager(emulinalg.matmul, a, b)
    assert c.shape == (3, 8, 5)
    assert_close_to(c.compute(), A @ B, np.abs(A) @ np.abs(B), RTOL["float64"])
    av = _eager(emulinalg.matmul, a, da.from_array(v, chunks=16)).compute()
    assert_close_to(av, A @ v, np.abs(A) @ np.abs(v), RTOL["float64"])
    va = _eager(emulinalg.matmul, da.from_array(v, chunks=16), b).compute()
    assert_close_to(va, v @ B, np.abs(v) @ np.abs(B), RTOL["float64"])


def test_tensordot_and_vecdot_like_numpy(sync, rng):
    X = rng.standard_normal((4, 6, 30)) + 1j * rng.standard_normal((4, 6, 30))
    Y = rng.standard_normal((30, 6, 5))
    x = da.from_array(X, chunks=(2, 3, 10))
    y = da.from_array(Y, chunks=(10, 3, 5))
    t = _eager(emulinalg.tensordot, x, y, axes=([1, 2], [1, 0]))
    want = np.tensordot(X, Y, axes=([1, 2], [1, 0]))
    bound = np.tensordot(np.abs(X), np.abs(Y), axes=([1, 2], [1, 0]))
    assert t.shape == want.shape
    assert_close_to(t.compute(), want, bound, RTOL["complex128"])
    W = rng.standard_normal((4, 6, 30)) + 1j * rng.standard_normal((4, 6, 30))
    v = _eager(emulinalg.vecdot, x, da.from_array(W, chunks=(2, 3, 10)))
    want = np.sum(np.conj(X) * W, axis=-1)
    assert_close_to(v.compute(), want, np.sum(np.abs(X) * np.abs(W), axis=-1), RTOL["complex128"])
    xp = emulinalg.namespace(x)
    assert np.allclose(_eager(xp.vecdot, x, x).compute(), np.sum(np.abs(X) ** 2, axis=-1))


def test_ready_namespace(sync, rng):
    import emulinalg.dask as xp

    A = rng.standard_normal((6, 9))
    a = xp.asarray(A)
    assert isinstance(a, da.Array)
    c = _eager(xp.linalg.matmul, a, xp.matrix_transpose(a))
    assert emulinalg.last_plan().backend == "dask"
    assert_close_to(c.compute(), A @ A.T, np.abs(A) @ np.abs(A.T), RTOL["float64"])


def test_performant_and_native(sync, rng):
    A, B = rng.standard_normal((20, 30)), rng.standard_normal((30, 10))
    a, b = da.from_array(A, chunks=10), da.from_array(B, chunks=10)
    c = emulinalg.matmul(a, b)  # performant: the numpy reference backend never beats BLAS
    plan = emulinalg.last_plan()
    assert plan.backend == "dask" and plan.scheme == "native"
    assert plan.fallback.startswith("performant")
    np.testing.assert_allclose(c.compute(), A @ B, rtol=1e-13)
    c = _eager(emulinalg.matmul, a, b, precision="native")
    assert emulinalg.last_plan().scheme == "native" and emulinalg.last_plan().fallback is None
    np.testing.assert_allclose(c.compute(), A @ B, rtol=1e-13)


@pytest.mark.parametrize("precision", [None, 40])
def test_performant_guess_like_in_core(monkeypatch, precision):
    """The performant check guesses the count as the engine does (``_cost.likely_count`` with
    the native form's weight of ``_planner.target_for``, none for a number of bits): for the
    whole k in the shared graph, for the block products' k in the double-double graph."""
    from emulinalg import _cost

    seen = []
    orig = _cost.likely_count
    monkeypatch.setattr(_cost, "likely_count", lambda *args: seen.append(args) or orig(*args))
    A, B = np.ones((40, 600)), np.ones((600, 30))
    a, b = da.from_array(A, chunks=(20, 200)), da.from_array(B, chunks=(200, 15))
    weights = {}
    for mode, (X, Y) in (("shared", (A, B)), ("dd", (A[:20, :200], B[:200, :15]))):
        monkeypatch.setenv("EMULINALG_DASK_MODE", mode)
        seen.clear()
        emulinalg.matmul(X, Y, precision=precision)  # in core, on the same k
        emulinalg.matmul(a, b, precision=precision)
        assert len(seen) == 2 and seen[0] == seen[1]
        weights[mode] = seen[0][3]
    if precision is not None:
        assert weights == {"shared": None, "dd": None}
    else:  # the numpy backend's (chains of 256) differ at k = 600 and 200
        backend = emulinalg.backends.for_namespace(np)
        level = _level(A)
        assert weights == {"shared": _planner.target_for(level, 600, backend).weight,
                           "dd": _planner.target_for(level, 200, backend).weight}  # fmt: skip


def test_nonfinite_like_native(sync):
    rng = np.random.default_rng(3)
    A = rng.standard_normal((12, 40))
    B = rng.standard_normal((40, 10))
    A[1, 3] = np.inf  # K-block 0
    A[2, 25] = -np.inf  # K-block 2
    A[3, 3], A[3, 33] = np.inf, -np.inf  # inf - inf across K-blocks: NaN
    A[4, 18] = np.nan
    B[30, 7] = np.inf
    B[5, :] = 0.0
    A[5, 5] = np.inf  # inf * 0 = NaN
    B[12, 2] = 1e308
    A[6, 12] = 1e308  # overflow to inf in one block, as native
    a = da.from_array(A, chunks=(6, 12))
    b = da.from_array(B, chunks=(12, 5))
    c = _eager(emulinalg.matmul, a, b).compute()
    with np.errstate(over="ignore", invalid="ignore"):
        want = A @ B
        bound = np.abs(A) @ np.abs(B)
    assert_same_nonfinite_pattern(c, want)
    ok = np.isfinite(want)
    assert_close_to(c[ok], want[ok], bound[ok], RTOL["float64"])


def _counting(fn, calls):
    @functools.wraps(fn)
    def counted(*args, **kwargs):
        calls[fn.__name__] += 1
        return fn(*args, **kwargs)

    return counted


def test_preprocessing_is_shared(sync, monkeypatch):
    calls = collections.Counter()
    for fn in (
        "_line_stats", "_bound_chunk", "_line_terms", "_normmag_chunk", "_bound_block",
        "_cert_block", "_fallback_task", "_cert_fallback_block", "_count_task", "_exact_block",
        "_exact_task", "_shift_task", "_residues_chunk", "_product_block", "_crt_emulated",
        "_suspects_block", "_refine_select", "_refine_lines", "_refine_task",
        "_refit_candidates", "_refit_select", "_refit_lines", "_refit_entries", "_final_block",
    ):  # fmt: skip
        mod = _task_module(fn)
        monkeypatch.setattr(mod, fn, _counting(getattr(mod, fn), calls))
    monkeypatch.setattr(
        dask_statistics, "_lower_block", _counting_ran("_lower_block", "lam", "lower", calls)
    )
    monkeypatch.setattr(
        dask_refinement, "_refine_sums", _counting_ran("_refine_sums", "S", "refine", calls)
    )
    A = phi_matrix((90, 200), 1.0, "float64", seed=61)
    B = phi_matrix((200, 50), 1.0, "float64", seed=62)
    a = da.from_array(A, chunks=(30, 50))  # 3 x 4 chunks
    b = da.from_array(B, chunks=(50, 25))  # 4 x 2 chunks: 24 block triples, 6 output blocks
    c = _eager(emulinalg.matmul, a, b)
    assert not calls  # nothing ran while building
    (opt,) = dask.optimize(c)
    layers = collections.Counter(_key_name(k) for k in dict(opt.__dask_graph__()))
    assert layers["emulinalg-residues"] == 12 + 8  # one task per chunk, not per block pair
    assert layers["emulinalg-count"] == 1 and layers["emulinalg-crt"] == 6
    _assert_in_core_bits(c.compute(), A, B)
    per_chunk = 12 + 8
    # F's lower bound certifies every entry here (as in core): the magnitude lower bound's
    # tasks run but skip their work (no float32 magnitudes, no GEMMs). The exact step runs
    # once per output block; a few entries fail one modulus fewer, so the refinement's first
    # step sums on each of the 4 K-blocks and takes one modulus off, its second sums again
    # and keeps the count, the later steps' tasks skip.
    assert not _f_only_beyond(A, B).any()
    steps = refinement.REFINE_STEPS
    assert calls == {
        "_line_stats": per_chunk, "_bound_chunk": per_chunk, "_line_terms": per_chunk,
        "_normmag_chunk": per_chunk, "_residues_chunk": per_chunk, "_bound_block": 24,
        "lower skipped": 24, "_product_block": 24, "_cert_block": 6, "_fallback_task": 1,
        "_cert_fallback_block": 6, "_count_task": 1, "_shift_task": 3 + 2, "_crt_emulated": 6,
        "_suspects_block": 6 * steps, "_refine_select": steps,
        "_refine_lines": per_chunk * steps, "refine ran": 4 * 2, "refine skipped": 4 * (steps - 2),
        "_refine_task": steps, "_exact_block": 6, "_exact_task": 1, "_refit_candidates": 6,
        "_refit_select": 1, "_refit_lines": per_chunk, "_refit_entries": 1, "_final_block": 6,
    }  # fmt: skip


# --------------------------------------------------------------------------------------------
# Query planning (dask-expr arrays) in the other mode
# --------------------------------------------------------------------------------------------

_QP_SCRIPT = textwrap.dedent(
    """
    import functools, numpy as np, dask, dask.array as da, emulinalg
    from emulinalg.backends.dask import crt as backend
    from emulinalg.inputs import phi_matrix
    from emulinalg.reference import accuracy
    assert da.array_expr_enabled() == {mode}
    calls = []
    residues = backend._residues_chunk
    @functools.wraps(residues)
    def counted(*args, **kwargs):
        calls.append(1)
        return residues(*args, **kwargs)
    backend._residues_chunk = counted
    A = phi_matrix((96, 192), 1.0, "float64", seed=1)
    B = phi_matrix((192, 40), 1.0, "float64", seed=2)
    a, b = da.from_array(A, chunks=(48, 64)), da.from_array(B, chunks=(64, 20))
    with emulinalg.config(strategy="eager"), dask.config.set(split_every=2):
        c = emulinalg.matmul(a, b)
        want = emulinalg.matmul(A, B)
    assert emulinalg.last_plan().scheme.startswith("OzakiII"), emulinalg.last_plan()
    out = c.compute(scheduler="sync")
    assert type(out) is np.ndarray and out.shape == (96, 40)
    assert np.array_equal(out, want), "not the in-core bits"
    assert len(calls) == 2 * 3 + 3 * 2, calls  # residues once per chunk
    got, nat = accuracy(out, A, B), accuracy(A @ B, A, B)
    assert got["bits_maxrel"] >= nat["bits_maxrel"] and got["bits_cw"] >= nat["bits_cw"]
    X = phi_matrix((3, 16, 40), 1.0, "float64", seed=3)
    Y = phi_matrix((3, 40, 8), 1.0, "float64", seed=4)
    x, y = da.from_array(X, chunks=(2, 8, 16)), da.from_array(Y, chunks=(2, 16, 8))
    with emulinalg.config(strategy="eager"):
        z = emulinalg.matmul(x, y).compute(scheduler="sync")
    assert np.allclose(z, X @ Y, rtol=1e-12, atol=0)
    print("ok", type(c).__module__, round(got["bits_maxrel"], 1), round(nat["bits_maxrel"], 1))
    """
)


@pytest.mark.slow
def test_query_planning_other_mode():
    mode = not da.array_expr_enabled()
    env = dict(os.environ)
    env["DASK_ARRAY__QUERY_PLANNING"] = str(mode)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    res = subprocess.run(
        [sys.executable, "-c", _QP_SCRIPT.format(mode=mode)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("ok")
