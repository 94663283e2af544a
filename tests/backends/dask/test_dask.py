"""The dask layer: lazy graphs of emulated products.

Scheme II (the default family's levels, explicit ``OzakiII``) runs the shared-preprocessing
graph, whose result is the in-core engine's on the whole matrices bit for bit (entries taken
from the native product aside); Scheme I and ``EMULINALG_DASK_MODE=dd`` run block products added
in double-double over K-blocks. The accuracy cases run through a real
``distributed.LocalCluster`` (two worker processes, one thread each) and dask's threaded
scheduler; the rest use dask's synchronous scheduler. Query planning (``array.query-planning``)
is fixed when ``dask.array`` is first imported, so the other mode runs in a subprocess.
"""

from __future__ import annotations

import collections
import functools
import json
import math
import os
import subprocess
import sys
import textwrap

import array_api_compat
import numpy as np
import pytest
from _helpers import RTOL, assert_close_to, assert_quiet_demo, assert_same_nonfinite_pattern

import emulinalg
import emulinalg.backends
from emulinalg import _planner
from emulinalg._precision import level_for_dtype, parse
from emulinalg.algorithm import certificate, operands, products, refinement, refit
from emulinalg.algorithm.moduli import MAX_MODULI, crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest
from emulinalg.backends import dask as dask_backend
from emulinalg.backends import numpy as numpy_backend
from emulinalg.backends.dask import certificate as dask_certificate
from emulinalg.backends.dask import crt as dask_crt
from emulinalg.backends.dask import refinement as dask_refinement
from emulinalg.backends.dask import refit as dask_refit
from emulinalg.backends.dask import statistics as dask_statistics
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

pytestmark = pytest.mark.dask

# The modules of the dask layer's tasks: a task is patched where it is defined, since the graph
# code looks it up there (``dask_backend._shared_graph`` in the package itself).
_TASK_MODULES = (dask_statistics, dask_certificate, dask_refinement, dask_crt, dask_refit)


def _task_module(name):
    (mod,) = (m for m in _TASK_MODULES if getattr(getattr(m, name, None), "__module__", None)
              == m.__name__)  # fmt: skip
    return mod


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CHUNKS = emulinalg.backends.for_namespace(np).name  # numpy chunks' backend: numpy, amx on AMX


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


def _eager(fn, *args, **kw):
    with emulinalg.config(strategy="eager"):
        return fn(*args, **kw)


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


# --------------------------------------------------------------------------------------------
# Accuracy through a real distributed cluster: bits >= the native product of the whole matrices
# --------------------------------------------------------------------------------------------


def _grade(c, A, B):
    got = accuracy(c, A, B)
    nat = accuracy(np.matmul(A, B), A, B)
    return got, nat


def _level(A, precision=None):
    """The level of ``precision`` (None: the dtype's) for operands like ``A``."""
    if precision is None:
        return level_for_dtype("float32" if A.dtype in (np.float32, np.complex64) else "float64")
    return parse(precision)


def _target(A, precision=None):
    """The in-core engine's ``Target`` for numpy operands like ``A`` (its rho from the numpy
    chunks' backend and the whole k)."""
    return _planner.target_for(
        _level(A, precision), A.shape[-1], emulinalg.backends.for_namespace(np)
    )


def _engine_certificate(A, B, precision=None):
    """``(count, beyond, patch)`` of the in-core engine's certificate on the whole matrices."""
    ar, ai = operands.parts(np, A)
    br, bi = operands.parts(np, B)
    ar, ai = operands.zero_nonfinite(np, ar, ai)
    br, bi = operands.zero_nonfinite(np, br, bi)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    target = _target(A, precision)
    return certificate.ozaki2_moduli_needed(np, numpy_backend, ar, ai, br, bi, pre, target)


def _f_only_beyond(A, B, precision=None):
    """The engine's first pass: the entries the bound GEMM's lower bound alone leaves beyond
    every count (``certificate.bound_lower``), on the whole matrices."""
    ar, ai = operands.parts(np, A)
    br, bi = operands.parts(np, B)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    k, cplx = ar.shape[-1], ai is not None
    cc = certificate.cert_constants(k, _target(A, precision), cplx)
    _, na, nb = certificate.normalized(np, ar, ai, br, bi, cc.norm)
    R = cc.cR * certificate.bound_lower(np, pre.lower, cplx)
    return certificate.ozaki2_needed(np, cc, R, na, nb, pre[2], pre[3]) == certificate.BEYOND


def _bits_equal(x, y):
    """Entrywise: the same bits (NaNs included)."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    size = x.dtype.itemsize
    return np.all(x.view(np.uint8).reshape(x.shape + (size,)) == y.view(np.uint8).reshape(
        y.shape + (size,)), axis=-1)  # fmt: skip


def _assert_in_core_bits(out, A, B, precision=None, native=None):
    """``out`` has the bits of ``emulinalg.matmul(A, B)`` in core (same scheme, same count),
    except where the engine takes the native product (beyond its certificate, ``native``): those
    entries come from dask's blocked native product, close to the whole one. Returns the
    engine's plan."""
    with emulinalg.config(strategy="eager"):
        want = emulinalg.matmul(A, B, precision=precision)
    plan = emulinalg.last_plan()
    native = np.zeros(want.shape, bool) if native is None else native.copy()
    if precision is None or isinstance(precision, (int, str)):
        bits = _level(A, precision).bits
        count, beyond, _ = _engine_certificate(A, B, precision)
        if count is not None and (bits <= 53 or not beyond.any()):
            assert plan.scheme == f"OzakiII(moduli={count}, mode=accurate)"
            native |= beyond
    same = _bits_equal(out, want)
    assert same[~native].all(), f"{(~same & ~native).sum()} emulated entries differ"
    if native.any():
        with np.errstate(over="ignore", invalid="ignore"):
            nat, bound = np.matmul(A, B), np.abs(A) @ np.abs(B)
        assert_same_nonfinite_pattern(out[native], nat[native])
        with np.errstate(invalid="ignore"):
            assert_close_to(out[native], nat[native], bound[native], RTOL[A.dtype.name])
    return plan


@pytest.mark.parametrize(
    "phi",
    [pytest.param(0.5, marks=pytest.mark.slow), 1.0, pytest.param(4.0, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize(
    "dtype",
    [
        "float64",
        pytest.param("float32", marks=pytest.mark.slow),
        pytest.param("complex128", marks=pytest.mark.slow),
    ],
)
def test_in_core_bits_on_a_cluster(client, dtype, phi):
    A = phi_matrix((160, 256), phi, dtype, seed=11)
    B = phi_matrix((256, 96), phi, dtype, seed=12)
    a = da.from_array(A, chunks=(53, 61))  # 5 K-blocks, odd sizes
    b = da.from_array(B, chunks=(61, 37))
    with dask.config.set(split_every=2):  # a three-level tree: combine and aggregate
        c = _eager(emulinalg.matmul, a, b)
    assert "5 K-blocks" in str(emulinalg.last_plan())
    out = client.compute(c).result()
    assert type(out) is np.ndarray and out.dtype == np.dtype(dtype)
    plan = _assert_in_core_bits(out, A, B)
    got, nat = _grade(out, A, B)
    print(
        f"{dtype} phi={phi}: {plan.scheme}, native entries {plan.native_entries}: bits maxrel "
        f"{got['bits_maxrel']:.1f} (native {nat['bits_maxrel']:.1f}), componentwise "
        f"{got['bits_cw']:.1f} ({nat['bits_cw']:.1f})"
    )
    assert got["nonfinite_mismatch"] == 0
    assert got["bits_maxrel"] >= nat["bits_maxrel"]
    assert got["bits_cw"] >= nat["bits_cw"]


def _count_task_result(c, name=None):
    """The graph's decision on the count (the last of the refinement's steps' tasks, the exact
    step's and the count task's that the graph has, or ``name``'s), computed on its own
    (synchronously)."""
    from dask.optimization import cull

    dsk = dict(c.__dask_graph__())
    names = {_key_name(k) for k in dsk}
    steps = [f"emulinalg-refine-{t}" for t in range(refinement.REFINE_STEPS, 0, -1)]
    last = [x for x in (*steps, "emulinalg-exact", "emulinalg-count") if x in names]
    name = name or last[0]
    (key,) = [k for k in dsk if _key_name(k) == name]
    return dask.get(cull(dsk, [key])[0], key)


def _key_name(key):
    name = key[0] if isinstance(key, tuple) else key
    return str(name).rsplit("-", 1)[0]


@pytest.mark.parametrize(
    "phi",
    [pytest.param(0.5, marks=pytest.mark.slow), 1.0, pytest.param(4.0, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_in_core_bits_threaded(dtype, phi):
    A = phi_matrix((150, 230), phi, dtype, seed=21)
    B = phi_matrix((230, 70), phi, dtype, seed=22)
    a = da.from_array(A, chunks=(53, 61))  # 4 K-blocks (3 x 61 + 47), 3 x 3 output blocks
    b = da.from_array(B, chunks=(61, 29))
    c = _eager(emulinalg.matmul, a, b)
    out = c.compute(scheduler="threads", num_workers=2)
    plan = _assert_in_core_bits(out, A, B)
    # The count task decided what the engine decided, and flagged the blocks with native
    # entries (those beyond the certificate here).
    cfg = _count_task_result(c)
    assert plan.scheme == f"OzakiII(moduli={cfg['count']}, mode=accurate)"
    _, beyond, _ = _engine_certificate(A, B)
    flags = np.add.reduceat(np.add.reduceat(beyond, [0, 53, 106], 0), [0, 29, 58], 1) > 0
    assert np.array_equal(cfg["need"], flags)


def _fallback_inputs(kind, dtype):
    phi = 4.0 if kind == "phi4" else 1.0
    A = phi_matrix((90, 160), phi, dtype, seed=71)
    B = phi_matrix((160, 60), phi, dtype, seed=72)
    if kind == "phi4":
        return A, B
    A[::3, 5] *= 2.0**40  # a spike in every third row meeting 2**-40 in every other column:
    B[5, ::2] *= 2.0**-40  # floor(2**(s+1)|x|) is 0 for the lines' other entries, F too weak
    return A, B


@pytest.mark.parametrize(
    ("kind", "dtype", "precision"),
    [
        ("spike", "float64", None),
        pytest.param("spike", "complex128", None, marks=pytest.mark.slow),
        ("spike", "float64", 40),
        pytest.param("phi4", "float64", None, marks=pytest.mark.slow),
        pytest.param("phi4", "float32", None, marks=pytest.mark.slow),
        ("phi4", "complex128", 24),
    ],
)
def test_certificate_fallback_like_in_core(sync, monkeypatch, kind, dtype, precision):
    """Where the bound GEMM's lower bound leaves entries beyond, the engine adds the
    magnitude lower bound; the graph does too (per block triple, summed over K-blocks) and
    makes the same decisions: count, beyond mask (native entries), bits; e and f are the
    engine's bit for bit, the line norms (l2 for the named levels, l1 for bits: K-sums of
    the chunks' partials) the engine's within the rounding of the sums' order."""
    A, B = _fallback_inputs(kind, dtype)
    assert _f_only_beyond(A, B, precision).any()  # the engine's second pass is needed
    count, beyond, _ = _engine_certificate(A, B, precision)
    assert count is not None and beyond.sum() < _f_only_beyond(A, B, precision).sum()
    calls = collections.Counter()
    monkeypatch.setattr(
        dask_statistics, "_lower_block", _counting_ran("_lower_block", "lam", "lower", calls)
    )
    arrays, orig = {}, dask_backend._shared_graph
    monkeypatch.setattr(dask_backend, "_shared_graph", lambda a, b, r: orig(a, b, r, arrays))
    a = da.from_array(A, chunks=(31, 41))  # 4 K-blocks (3 x 41 + 37), 3 x 3 output blocks
    b = da.from_array(B, chunks=(41, 25))
    c = _eager(emulinalg.matmul, a, b, precision=precision)
    e, f, need, at, bt = dask.compute(*(arrays[x] for x in ("e", "f", "need", "aterms", "bterms")))
    ar, ai = operands.parts(np, A)
    br, bi = operands.parts(np, B)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    assert _bits_equal(e, pre[2]).all() and _bits_equal(f, pre[3]).all()
    norm = arrays["norm"]
    assert norm == ("l2" if precision is None else "l1")
    na, nb = dask_certificate._line_norms(np, at, bt, A.shape[-1], norm)
    _, na_core, nb_core = certificate.normalized(np, ar, ai, br, bi, norm)
    np.testing.assert_allclose(na, na_core, rtol=1e-14)
    np.testing.assert_allclose(nb, nb_core, rtol=1e-14)
    assert np.array_equal(need == certificate.BEYOND, beyond)
    cfg = _count_task_result(c)
    assert cfg["count"] == count
    flags = np.add.reduceat(np.add.reduceat(beyond, [0, 31, 62], 0), [0, 25, 50], 1) > 0
    assert np.array_equal(cfg["need"], flags)
    calls.clear()
    out = c.compute()
    assert calls == {"lower ran": 4 * 3 * 3}
    plan = _assert_in_core_bits(out, A, B, precision=precision)
    assert plan.scheme == f"OzakiII(moduli={count}, mode=accurate)"
    assert plan.native_entries == beyond.sum()


def _in_core_count(A, B, precision):
    with emulinalg.config(strategy="eager"):
        emulinalg.matmul(A, B, precision=precision)
    plan = emulinalg.last_plan()
    return int(plan.scheme.split("=")[1].split(",")[0]), plan


def _even_inputs(m, k, n, seed):
    """Operands whose entries all have nearly the same magnitude: every line has nearly the
    same prescale bound, so where the bisection's bound of the shifts is loose, it is loose on
    every line alike, and the exact step takes one modulus off."""
    rng = np.random.default_rng(seed)
    A = np.sign(rng.standard_normal((m, k))) * (1 + 0.05 * rng.random((m, k)))
    B = np.sign(rng.standard_normal((k, n))) * (1 + 0.05 * rng.random((k, n)))
    return A, B


@pytest.mark.parametrize(
    ("k", "precision", "batch", "chunks"),
    [
        (64, None, False, (10, 20, 6)),  # the native form; K 3 x 20 + 4
        (200, 24, False, (24, 64, 16)),  # the strict form; K 3 x 64 + 8
        (200, 24, True, (1, 12, 64, 8)),  # batched: the exact step, no refinement
    ],
)
def test_exact_step_like_in_core(sync, k, precision, batch, chunks):
    """Where ``certificate.certify_moduli``'s exact step takes one modulus off the bisection's
    count in core (no certifiable entry fails one fewer with the exact shifts), the graph does
    too (one task per output block, one decision): the same count and bits. (The refinement
    that follows tests one modulus fewer again, and keeps the count.)"""
    A, B = _even_inputs(24, k, 16, seed=0)
    if batch:
        A2, B2 = _even_inputs(24, k, 16, seed=1)
        A, B = np.stack([A, A2]), np.stack([B, B2])
    count, plan = _in_core_count(A, B, precision)
    assert not plan.native_entries
    a = da.from_array(A, chunks=chunks[:-1])
    b = da.from_array(B, chunks=chunks[:-3] + chunks[-2:])
    c = _eager(emulinalg.matmul, a, b, precision=precision)
    assert _count_task_result(c, "emulinalg-count")["count"] == count + 1  # the bisection's
    assert _count_task_result(c, "emulinalg-exact")["count"] == count
    assert _count_task_result(c)["count"] == count
    _assert_in_core_bits(c.compute(), A, B, precision=precision)


# Products whose count the refinement lowers in core: (m, k, n), dtype, precision, seed
_REFINE = {
    "native": ((60, 300, 50), "float64", None, 0),  # the native form: with sums of squares
    "strict": ((60, 300, 50), "float64", 53, 2),
    "complex": ((40, 500, 30), "complex128", 24, 2),  # after the exact step took one off
}


def _refine_inputs(case):
    (m, k, n), dtype, precision, seed = _REFINE[case]
    A = phi_matrix((m, k), 1.0, dtype, seed=seed)
    return A, phi_matrix((k, n), 1.0, dtype, seed=seed + 50), precision


@pytest.mark.parametrize(
    ("case", "chunks", "q", "split_every"),
    [
        pytest.param("native", (60, 300, 50), 1, 4, marks=pytest.mark.slow),  # one block
        # suspects in 2 row blocks and 2 column blocks
        pytest.param("native", (30, 150, 25), 2, 4, marks=pytest.mark.slow),
        pytest.param("native", (13, 100, 7), 3, 4, marks=pytest.mark.slow),
        # K 101 + 101 + 98, a two-level K tree
        pytest.param("native", (20, 101, 17), 3, 2, marks=pytest.mark.slow),
        ("strict", (20, 101, 17), 3, 2),
        ("complex", (13, 170, 7), 3, 4),  # K 170 + 170 + 160
    ],
)
def test_refinement_like_in_core(sync, monkeypatch, case, chunks, q, split_every):
    """Where ``refinement.refine_and_patch``'s first step takes one modulus fewer in core and its
    second keeps the count (too many suspects fail, no patch), the graph does too (per step, per
    output block its suspects: the entries failing one fewer with the exact shifts; one
    selection task taking the engine's sample of them, the sampled suspects' lines per chunk,
    their sums (and, native form, sums of squares) per K-block added over K-blocks, one
    decision; the later steps' tasks skip): the same suspects, samples, count, native entries
    and bits (in core the count is one lower without the refinement); with the suspects' limit
    below these suspects both keep the count; the native form with samples of 4 suspects
    refines in both."""
    A, B, precision = _refine_inputs(case)
    native = precision is None
    seen = []  # per refine_failures call: (sums of squares given, suspects, sampled)
    sums = []  # and the sampled suspects' sums S
    orig = refinement.refine_failures

    def failures(xp, k, target, cplx, count, lam, S, *rest):
        seen.append((len(rest) > 4 and rest[4] is not None, int(lam.shape[0]), int(S.shape[0])))
        sums.append(np.asarray(S))
        return orig(xp, k, target, cplx, count, lam, S, *rest)

    monkeypatch.setattr(refinement, "refine_failures", failures)
    count, plan = _in_core_count(A, B, precision)
    in_core = list(seen)  # per step of the engine's loop
    assert len(in_core) == 2  # one modulus off, then the suspects of the next stay
    assert all(x[0] == native and x[1] == x[2] for x in in_core)
    with monkeypatch.context() as mp:
        mp.setattr(refinement, "REFINE_ENTRIES", -1)
        mp.setattr(refinement, "SUSPECTS_MAX", -1)
        unrefined, _ = _in_core_count(A, B, precision)
    assert count == unrefined - 1 and not plan.native_entries
    calls = collections.Counter()
    monkeypatch.setattr(
        dask_refinement, "_refine_sums", _counting_ran("_refine_sums", "S", "refine", calls)
    )
    a = da.from_array(A, chunks=chunks[:2])
    b = da.from_array(B, chunks=chunks[1:])
    with dask.config.set(split_every=split_every):
        c = _eager(emulinalg.matmul, a, b, precision=precision)
    assert f"{q} K-block" in str(emulinalg.last_plan())
    bisected = _count_task_result(c, "emulinalg-count")["count"]
    assert bisected == unrefined + (case == "complex")
    assert _count_task_result(c, "emulinalg-exact")["count"] == unrefined
    cfg = _count_task_result(c)
    assert cfg["count"] == count and not cfg["need"].any()
    calls.clear()
    seen.clear()
    out = c.compute()
    steps = refinement.REFINE_STEPS
    assert calls == {"refine ran": 2 * q, "refine skipped": (steps - 2) * q}
    assert seen == in_core
    _assert_in_core_bits(out, A, B, precision=precision)
    # The suspects' limit below these suspects: no refinement, in core or in the graph.
    with monkeypatch.context() as mp:
        mp.setattr(refinement, "SUSPECTS_MAX" if native else "REFINE_ENTRIES", 4)
        assert _in_core_count(A, B, precision)[0] == unrefined
        assert _count_task_result(c)["count"] == unrefined
        calls.clear()
        _assert_in_core_bits(c.compute(), A, B, precision=precision)
        assert calls == {"refine skipped": steps * q}
    if not native:
        return
    # The native form samples REFINE_ENTRIES of its suspects, in flat order.
    with monkeypatch.context() as mp:
        mp.setattr(refinement, "REFINE_ENTRIES", 4)
        seen.clear()
        sums.clear()
        assert _in_core_count(A, B, precision)[0] == count
        sampled = list(seen)
        assert [x[1] for x in sampled] == [x[1] for x in in_core]
        assert all(x[2] == 4 for x in sampled)
        seen.clear()
        assert _count_task_result(c)["count"] == count and seen == sampled
        for got, want in zip(sums[len(sampled) :], sums[: len(sampled)]):  # the same suspects
            np.testing.assert_allclose(got, want, rtol=1e-13)
        _assert_in_core_bits(c.compute(), A, B, precision=precision)


def test_no_refinement_for_batches(sync):
    """In core the refinement is for 2-D products only; the batch graph has none either (its
    exact step, which batches have, keeps the count here)."""
    A, B, precision = _refine_inputs("native")
    X, Y = np.stack([A, A]), np.stack([B, B])
    count, _ = _in_core_count(X, Y, precision)
    assert count == _in_core_count(A, B, precision)[0] + 1
    x, y = da.from_array(X, chunks=(1, 20, 150)), da.from_array(Y, chunks=(1, 150, 25))
    c = _eager(emulinalg.matmul, x, y, precision=precision)
    names = {_key_name(k) for k in dict(c.__dask_graph__())}
    assert not any(n.startswith(("emulinalg-refine", "emulinalg-suspects")) for n in names)
    assert "emulinalg-exact" in names
    assert _count_task_result(c)["count"] == count
    _assert_in_core_bits(c.compute(), X, Y, precision=precision)


def _refit_notes(sel, count):
    """The plan notes of the in-core engine's refit (``_engine._refit_entries``) for the graph's
    refit selection ``sel`` at ``count`` moduli."""
    scheme = f"OzakiII(moduli={count}, mode=accurate)"
    notes = []
    if sel is not None and sel["patched"]:
        notes.append(f"patch: {sel['patched']} entries {scheme} does not certify recomputed with "
                     f"{MAX_MODULI} moduli")  # fmt: skip
    if sel is not None and sel["cancelled"]:
        notes.append(refit.note(sel["everything"], sel["idx"].shape[0]))
    return notes


def _in_core_refit_notes(plan):
    return [x for x in plan.notes if x.startswith(("patch:", "refit:"))]


# Products whose certificate patches in core: dtype, phi, precision, seed, k, chunks (m, k, n)
_PATCH = {
    "float32": ("float32", 4.0, None, 10, 64, (24, 20, 24)),  # the native form, with the refit
    "complex64": ("complex64", 4.0, None, 9, 64, (24, 20, 24)),
    "native-entries": ("float64", 4.0, None, 2, 64, (24, 20, 24)),  # and one entry beyond
    "strict": ("float32", 4.0, 20, 2, 100, (24, 40, 24)),  # bits: the patch alone
    "strict-complex": ("complex128", 4.0, 24, 0, 64, (16, 30, 40)),
}


def _patch_inputs(case):
    dtype, phi, precision, seed, k, chunks = _PATCH[case]
    A = phi_matrix((64, k), phi, dtype, seed=seed)
    B = phi_matrix((k, 64), phi, dtype, seed=seed + 50)
    return A, B, precision, chunks


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.slow) if c in ("float32", "complex64") else c
        for c in _PATCH
    ],
)
def test_patch_like_in_core(sync, monkeypatch, case):
    """Where ``refinement.refine_and_patch`` takes one modulus fewer in core although a few
    suspects still fail it (at most ``patch_limit(m, n)``: the patch), the graph does too
    (``emulinalg-refine``): the same count and patch (flat indices), recomputed with MAX_MODULI
    moduli together with the refit's most cancelled entries (the named levels) or alone (a
    number of bits): the in-core bits, native entries aside, and the in-core plan's notes
    ("patch: ...", "refit: ..."). The patched entries are the most moduli's product's and
    differ from the count's. With the patch's limit at 0 neither patches and both keep the
    count one higher."""
    A, B, precision, chunks = _patch_inputs(case)
    count, beyond, patch = _engine_certificate(A, B, precision)
    assert patch is not None and 0 < patch.shape[0] <= refinement.patch_limit(64, 64)
    assert beyond.any() == (case == "native-entries")
    got, plan = _in_core_count(A, B, precision)
    assert got == count and plan.native_entries == beyond.sum()
    a = da.from_array(A, chunks=chunks[:2])  # 3 x (2 to 4) chunks: K-blocked
    b = da.from_array(B, chunks=chunks[1:])
    c = _eager(emulinalg.matmul, a, b, precision=precision)
    assert "the certificate's patch" in str(emulinalg.last_plan())
    cfg = _count_task_result(c)
    assert cfg["count"] == count and np.array_equal(cfg["patch"], patch)
    sel = _count_task_result(c, "emulinalg-refit-select")
    assert sel["patched"] == patch.shape[0] and np.isin(patch, sel["idx"]).all()
    assert sel["cancelled"] == (precision is None)
    assert _refit_notes(sel, count) == _in_core_refit_notes(plan)
    out = c.compute()
    _assert_in_core_bits(out, A, B, precision=precision)
    with emulinalg.config(strategy="eager"):
        full = emulinalg.matmul(A, B, precision=emulinalg.OzakiII(moduli=MAX_MODULI))
        plain = emulinalg.matmul(A, B, precision=emulinalg.OzakiII(moduli=count))

    def at(x):
        return np.reshape(x, (-1,))[patch]

    assert _bits_equal(at(out), at(full)).all() and not _bits_equal(at(out), at(plain)).all()
    with monkeypatch.context() as mp:
        mp.setattr(refinement, "PATCH_ENTRIES", 0)
        got, plan = _in_core_count(A, B, precision)
        assert got == count + 1 and not any(x.startswith("patch:") for x in plan.notes)
        cfg = _count_task_result(c)
        assert cfg["count"] == count + 1 and cfg["patch"] is None
        sel = _count_task_result(c, "emulinalg-refit-select")
        assert _refit_notes(sel, count + 1) == _in_core_refit_notes(plan)
        _assert_in_core_bits(c.compute(), A, B, precision=precision)


@pytest.mark.parametrize(
    "steps",
    [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), None],
)
def test_refine_steps_like_in_core(sync, monkeypatch, steps):
    """``refinement.refine_and_patch`` loops (``REFINE_STEPS``): here its first step takes one
    modulus off and its second one more with a patch; the graph (one set of tasks per step)
    follows the loop with every number of steps: the same count, patch and bits."""
    if steps is not None:
        monkeypatch.setattr(refinement, "REFINE_STEPS", steps)
    A = phi_matrix((64, 200), 2.0, "float64", seed=3)
    B = phi_matrix((200, 48), 2.0, "float64", seed=4)
    count, beyond, patch = _engine_certificate(A, B)
    assert not beyond.any() and (patch is None) == (steps == 1)
    got, plan = _in_core_count(A, B, None)
    assert got == count
    a, b = da.from_array(A, chunks=(24, 70)), da.from_array(B, chunks=(70, 20))
    c = _eager(emulinalg.matmul, a, b)
    names = {_key_name(k) for k in dict(c.__dask_graph__())}
    assert {x for x in names if x.startswith("emulinalg-suspects")} == {
        f"emulinalg-suspects-{t}" for t in range(1, refinement.REFINE_STEPS + 1)
    }
    assert _count_task_result(c, "emulinalg-exact")["count"] == count + 1 + (steps != 1)
    cfg = _count_task_result(c)
    assert cfg["count"] == count and cfg["refining"] == (steps == 1)  # 1: stopped by the cap
    assert (cfg["patch"] is None) if patch is None else np.array_equal(cfg["patch"], patch)
    sel = _count_task_result(c, "emulinalg-refit-select")
    assert _refit_notes(sel, count) == _in_core_refit_notes(plan)
    _assert_in_core_bits(c.compute(), A, B)


@pytest.mark.slow
def test_patch_on_a_cluster(client):
    """The patch (host indices in the decision) travels to the workers: the in-core bits."""
    A, B, precision, chunks = _patch_inputs("float32")
    a, b = da.from_array(A, chunks=chunks[:2]), da.from_array(B, chunks=chunks[1:])
    c = _eager(emulinalg.matmul, a, b, precision=precision)
    _assert_in_core_bits(client.compute(c).result(), A, B, precision=precision)


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("moduli", [3, 6, 13, 20])
def test_explicit_ozaki2_in_core_bits(dtype, moduli):
    # k = 150: three moduli truncate the scaled operands, the others round them to nearest
    assert rounds_to_nearest(moduli, 150, "accurate") == (moduli > 3)
    A = phi_matrix((70, 150), 2.0, dtype, seed=31)
    B = phi_matrix((150, 45), 2.0, dtype, seed=32)
    a, b = da.from_array(A, chunks=(33, 47)), da.from_array(B, chunks=(47, 20))
    scheme = emulinalg.OzakiII(moduli=moduli)
    c = _eager(emulinalg.matmul, a, b, precision=scheme)
    assert emulinalg.last_plan().gemms == moduli * (3 if dtype.startswith("complex") else 1) + 1
    out = c.compute(scheduler="threads", num_workers=2)
    plan = _assert_in_core_bits(out, A, B, precision=scheme)
    assert plan.scheme == str(scheme)


@pytest.mark.parametrize(
    ("dtype", "shape", "chunks"),
    [
        pytest.param("float64", (60, 300, 50), (13, 100, 7), marks=pytest.mark.slow),
        ("complex128", (40, 200, 30), (15, 80, 11)),
        ("float32", (2, 30, 150, 20), (1, 11, 60, 7)),  # a batch: picked across its products
    ],
)
@pytest.mark.parametrize(
    "entries",
    [None, pytest.param(5, marks=pytest.mark.slow), pytest.param("all", marks=pytest.mark.slow)],
)
def test_refit_like_in_core(sync, monkeypatch, dtype, shape, chunks, entries):
    """The named levels refit the whole product's most cancelled entries in core (``refit.refit``):
    the graph picks the same entries (per output block the entries the pick can take there, one
    pick over them), recomputes them with the most moduli and patches them in before the native
    entries: the in-core bits, also with ``REFIT_ENTRIES`` lowered (``entries``), and a NaN row
    and a column beyond nothing but zeros (non-finite lines are refit in core too, then
    patched). These products are small (``refit.refits_all``): with ``entries="all"`` every
    entry is refit, otherwise ``REFIT_ALL_WORK`` is lowered to 0 so that the pick chooses."""
    if entries != "all":
        monkeypatch.setattr(refit, "REFIT_ALL_WORK", 0)
    if isinstance(entries, int):
        monkeypatch.setattr(refit, "REFIT_ENTRIES", entries)
    *batch, m, k, n = shape
    A = phi_matrix((*batch, m, k), 1.0, dtype, seed=91)
    B = phi_matrix((*batch, k, n), 1.0, dtype, seed=92)
    A[..., 3, 7] = np.nan
    B[..., :, 2] = 0.0
    bad = np.isnan(A).any(axis=-1)[..., None] & np.ones((*batch, m, n), bool)
    with emulinalg.config(strategy="eager"):
        want = emulinalg.matmul(A, B)
        which = "every entry" if entries == "all" else "the most cancelled"
        assert f"refit: {which}" in str(emulinalg.last_plan())
        with monkeypatch.context() as mp:  # the values the engine refits (NaN/Inf count as 0)
            mp.setattr(_planner, "refits", lambda *args: False)
            plain = emulinalg.matmul(np.where(np.isnan(A), 0, A), B)
    assert not _bits_equal(want, plain)[~bad].all()  # the refit changes bits here
    *bc, mc, kc, nc = chunks
    a = da.from_array(A, chunks=(*bc, mc, kc))
    b = da.from_array(B, chunks=(*bc, kc, nc))
    c = _eager(emulinalg.matmul, a, b)
    assert "refit (refit.refit)" in str(emulinalg.last_plan())
    # the in-core pick, from the unrefit values and the whole matrices' prescale
    ar, ai = operands.parts(np, A)
    br, bi = operands.parts(np, B)
    ar, ai = operands.zero_nonfinite(np, ar, ai)
    pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
    parts = (plain,) if ai is None else (plain.real, plain.imag)
    xp = array_api_compat.array_namespace(plain)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 and x/0 ratios, as in core
        everything = refit.refits_all(math.prod(batch) * m * n, k)
        core = refit.cancelled_entries(xp, parts, tuple(pre), everything=everything)
    sel = _count_task_result(c, "emulinalg-refit-select")
    assert sorted(sel["idx"].tolist()) == sorted(core.tolist())
    _assert_in_core_bits(c.compute(), A, B, native=bad)


def _with_ties(A, B, moduli):
    """``A`` with every other entry's real part moved to the middle of its cell of the scaled
    integer grid of ``moduli`` moduli (a tie of the rounding to nearest), the shifts of the
    whole product unchanged."""

    def shifts(A):
        ar, ai = operands.parts(np, A)
        br, bi = operands.parts(np, B)
        pre = ozaki2_prescale(np, numpy_backend.int_matmul, ar, ai, br, bi, "accurate")
        c = crt_constants(moduli)
        return ozaki2_shifts(np, pre, c.L, c.Q_down)[0]

    scale = np.ldexp(1.0, shifts(A))[:, None]
    re = A.real.copy()
    re[:, ::2] = (np.floor(re[:, ::2] * scale) + 0.5) / scale
    T = re + 1j * A.imag if np.iscomplexobj(A) else re
    assert np.array_equal(shifts(T), shifts(A))
    assert np.all(np.modf(np.abs(re[:, ::2] * scale))[0] == 0.5)
    return T


@pytest.mark.parametrize(("moduli", "dtype"), [(4, "float64"), (5, "float64"), (5, "complex128")])
def test_rounding_switch_at_large_k(sync, monkeypatch, moduli, dtype):
    """At k = 16384 four moduli truncate the scaled operands and five round them to nearest,
    ties to even (``scaling.rounds_to_nearest`` of the whole inner dimension: a K-chunk's
    would round with four): the graph's residues are the in-core product's, bit for bit, which
    the other choice does not give."""
    k = 16384
    assert rounds_to_nearest(moduli, k, "accurate") == (moduli == 5)
    assert rounds_to_nearest(4, k // 4, "accurate")
    B = phi_matrix((k, 5), 1.0, dtype, seed=82)
    A = _with_ties(phi_matrix((6, k), 1.0, dtype, seed=81), B, moduli)
    a, b = da.from_array(A, chunks=(3, k // 4)), da.from_array(B, chunks=(k // 4, 5))
    scheme = emulinalg.OzakiII(moduli=moduli)
    out = _eager(emulinalg.matmul, a, b, precision=scheme).compute()
    _assert_in_core_bits(out, A, B, precision=scheme)
    with monkeypatch.context() as mp:
        mp.setattr(
            products, "rounds_to_nearest", lambda n, k, mode: not rounds_to_nearest(n, k, mode)
        )
        other = _eager(emulinalg.matmul, A, B, precision=scheme)
    assert not _bits_equal(out, other).all()


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [
        (20, "float64"),
        (60, "float64"),
        (53, "float64"),
        (24, "complex128"),
        ("float32", "float64"),
        (None, "complex64"),
        (None, "float32"),
    ],
)
def test_other_levels_in_core_bits(sync, precision, dtype):
    # bits (strict: the l1 worst case) and the named levels (native: the l2 form)
    # 60 bits is beyond float64's native precision: the engine's most accurate count where any
    # entry is beyond the certificate, no native entries.
    A = phi_matrix((40, 75), 3.0, dtype, seed=41)
    B = phi_matrix((75, 30), 3.0, dtype, seed=42)
    a, b = da.from_array(A, chunks=(17, 26)), da.from_array(B, chunks=(26, 11))
    out = _eager(emulinalg.matmul, a, b, precision=precision).compute()
    _assert_in_core_bits(out, A, B, precision=precision)


@pytest.mark.parametrize("precision", [54, 80])
def test_levels_above_the_dtypes_take_native_where_the_dtypes_level_does(sync, precision):
    """Rows spanning 2**+-300 (issue #26): no count certifies 54+ bits everywhere; the graph
    takes the most accurate count and, as the engine, the native product exactly on the
    entries the float64 level does not certify (dask's blocked native product there), so both
    measures stay at those of dask's own product."""
    rng = np.random.default_rng(5)
    A = rng.uniform(-1, 1, (40, 75)) * 2.0 ** rng.integers(-300, 300, (40, 75))
    B = rng.uniform(-1, 1, (75, 30)) * 2.0 ** rng.integers(-300, 300, (75, 30))
    a, b = da.from_array(A, chunks=(17, 26)), da.from_array(B, chunks=(26, 11))
    out = _eager(emulinalg.matmul, a, b, precision=precision).compute()
    beyond64 = _engine_certificate(A, B, "float64")[1]
    assert beyond64 is not None and beyond64.any()
    plan = _assert_in_core_bits(out, A, B, precision=precision, native=beyond64)
    assert plan.scheme == f"OzakiII(moduli={MAX_MODULI}, mode=accurate)"
    assert plan.native_entries == int(beyond64.sum())
    ref = exact_matmul(A, B)  # native here: dask's own product on the same chunks
    got, nat = accuracy(out, A, B, ref), accuracy((a @ b).compute(), A, B, ref)
    assert got["bits_maxrel"] >= nat["bits_maxrel"] and got["bits_cw"] >= nat["bits_cw"]


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize(
    "precision", [emulinalg.BF16xN(), emulinalg.OzakiI(slices=7), None], ids=str
)
def test_dd_graph_partials_that_overflow_do_not_make_nan(sync, monkeypatch, precision, dtype):
    """Issue #26: K-blocks of +-1e308 entries whose partial sums overflow where the whole sum
    does not (a block sums to +4e308, the next to -4e308). The dd graph (Scheme I, BF16xN,
    Scheme II with EMULINALG_DASK_MODE=dd) gives the in-core product's finite values; where the
    exact sum itself overflows, inf as in core."""
    monkeypatch.setenv("EMULINALG_DASK_MODE", "dd")
    rng = np.random.default_rng(2)
    A = np.empty((6, 8), dtype)
    A[:, :4], A[:, 4:] = 1e308, -1e308
    A[:, 0] = rng.uniform(1.0, 1.7, 6) * 1e308
    A[5, 4:] = 1e308  # the whole sum overflows: +inf
    if dtype == "complex128":
        A = A + 1j * A[:, ::-1]
    B = np.ones((8, 5), dtype)
    a, b = da.from_array(A, chunks=(3, 4)), da.from_array(B, chunks=(4, 5))
    out = _eager(emulinalg.matmul, a, b, precision=precision).compute()
    want = _eager(emulinalg.matmul, A, B, precision=precision)
    assert not np.isnan(out).any()
    assert np.all(np.isinf(want[5]) == np.isinf(out[5]))
    assert np.array_equal(out[:5], want[:5])
    from fractions import Fraction  # B is ones: the exact real parts are the row sums

    exact = np.array([float(sum(Fraction(float(x)) for x in row)) for row in A[:5].real])
    bound = (np.abs(A[:5].real) * 2.0**-10).sum(axis=1) * 2.0**-20  # 2**-30 |A||B|: BF16xN's
    assert np.all(np.abs(out[:5, 0].real - exact) <= bound)


def test_batched_k1_and_fast_mode(sync):
    X = phi_matrix((3, 16, 40), 1.0, "float64", seed=3)
    Y = phi_matrix((3, 40, 8), 1.0, "float64", seed=4)
    x, y = da.from_array(X, chunks=(2, 7, 13)), da.from_array(Y, chunks=(2, 13, 5))
    _assert_in_core_bits(_eager(emulinalg.matmul, x, y).compute(), X, Y)
    # k = 1: the engine's exact configuration (a bound would flip roundings)
    A1, B1 = phi_matrix((20, 1), 2.0, "float64", seed=5), phi_matrix((1, 9), 2.0, "float64", seed=6)
    a1, b1 = da.from_array(A1, chunks=(7, 1)), da.from_array(B1, chunks=(1, 4))
    out = _eager(emulinalg.matmul, a1, b1).compute()
    assert np.array_equal(out, A1 @ B1) and _bits_equal(out, _eager(emulinalg.matmul, A1, B1)).all()
    # fast mode: e, f are sums of squares (summation order differs from the engine's; not
    # promised bit for bit, see docs/dask.md), so here the accuracy of the scheme
    A = phi_matrix((40, 75), 1.0, "float64", seed=7)
    B = phi_matrix((75, 30), 1.0, "float64", seed=8)
    a, b = da.from_array(A, chunks=(17, 26)), da.from_array(B, chunks=(26, 11))
    scheme = emulinalg.OzakiII(moduli=16, mode="fast")
    out = _eager(emulinalg.matmul, a, b, precision=scheme).compute()
    assert_close_to(out, A @ B, np.abs(A) @ np.abs(B), RTOL["float64"])


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_nonfinite_and_zero_lines_in_core_bits(sync, dtype):
    rng = np.random.default_rng(5)
    A = phi_matrix((30, 50), 1.0, dtype, seed=51)
    B = phi_matrix((50, 20), 1.0, dtype, seed=52)
    A[1, 3] = np.inf
    A[2, 40] = np.nan
    A[4, 7], A[4, 45] = np.inf, -np.inf  # inf - inf across K-blocks: NaN
    B[30, 7] = -np.inf
    A[9, :] = 0.0  # a zero row
    B[:, 15] = 0.0  # a zero column
    A[11, :] *= 2.0**-600  # a row far below the others
    B[:, 3] = rng.standard_normal(50) * 2.0**500
    a, b = da.from_array(A, chunks=(11, 17)), da.from_array(B, chunks=(17, 6))
    calls = collections.Counter()
    orig = dask_crt._product_block

    @functools.wraps(orig)
    def product_block(*args, **kwargs):
        res = orig(*args, **kwargs)
        calls["native" if res["nat"] is not None else "emulated only"] += 1
        return res

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dask_crt, "_product_block", product_block)
        c = _eager(emulinalg.matmul, a, b)
    out = c.compute()
    bad_rows = ~np.all(np.isfinite(A), axis=1)
    bad_cols = ~np.all(np.isfinite(B), axis=0)
    lines = bad_rows[:, None] | bad_cols[None, :]
    _assert_in_core_bits(out, A, B, native=lines)
    assert np.all(out[9, ~bad_cols] == 0) and np.all(out[~bad_rows, 15] == 0)
    # native block products only for the output blocks with NaN/Inf rows or columns:
    # row block 0 (rows 1, 2, 4) and column block 1 (column 7), over 3 K-blocks
    assert calls["native"] == 3 * (4 + 3 - 1) and calls["emulated only"] == 3 * 3 * 4 - calls[
        "native"]  # fmt: skip


def _counting(fn, calls):
    @functools.wraps(fn)
    def counted(*args, **kwargs):
        calls[fn.__name__] += 1
        return fn(*args, **kwargs)

    return counted


def _counting_ran(name, key, label, calls):
    """The dask layer's task ``name`` counted by whether its result's ``key`` was computed: the
    magnitude lower bound's GEMM (``_lower_block``) or the refinement's sums (``_refine_sums``)."""
    orig = getattr(_task_module(name), name)

    @functools.wraps(orig)
    def counted(*args, **kwargs):
        res = orig(*args, **kwargs)
        calls[f"{label} ran" if res[key] is not None else f"{label} skipped"] += 1
        return res

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


@pytest.mark.slow
def test_explicit_scheme_on_a_cluster(client):
    # Scheme I runs the double-double graph: blocking it over K must not lose accuracy against
    # the same scheme on the whole matrices (each block is scaled on its own, never coarser).
    scheme = emulinalg.OzakiI(slices=7)
    A = phi_matrix((96, 192), 1.0, "float64", seed=5)
    B = phi_matrix((192, 64), 1.0, "float64", seed=6)
    a, b = da.from_array(A, chunks=(48, 64)), da.from_array(B, chunks=(64, 32))
    c = _eager(emulinalg.matmul, a, b, precision=scheme)
    assert emulinalg.last_plan().scheme == f"blocked: [{CHUNKS}] {scheme}"
    got = accuracy(client.compute(c).result(), A, B)
    whole = accuracy(_eager(emulinalg.matmul, A, B, precision=scheme), A, B)
    assert got["bits_maxrel"] >= whole["bits_maxrel"] - 1
    assert got["bits_cw"] >= whole["bits_cw"] - 1
    # The dd graph for Scheme II too (EMULINALG_DASK_MODE=dd), on the same cluster.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMULINALG_DASK_MODE", "dd")
        c = _eager(emulinalg.matmul, a, b)
    assert "double-double" in str(emulinalg.last_plan())
    got, nat = _grade(client.compute(c).result(), A, B)
    assert got["bits_maxrel"] >= nat["bits_maxrel"] and got["bits_cw"] >= nat["bits_cw"]


@pytest.mark.slow
def test_out_of_core_example_small(client):
    from emulinalg.examples import out_of_core

    res = out_of_core.run(client, m=192, k=256, n=96, chunks=(64, 64, 48), rows=8, progress=False)
    assert "4 K-blocks" in res["plan"] and res["nonfinite_mismatch"] == 0
    assert res["bits_maxrel"] >= res["native_bits_maxrel"]
    assert res["bits_cw"] >= res["native_bits_cw"]


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


def _cupy():
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() > 0:
            return cp
    except Exception:
        pass
    pytest.skip("cupy with a CUDA device is not available")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["dd", "shared"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_cupy_chunks_stay_on_the_gpu(dtype, mode, monkeypatch):
    """Both graphs on cupy chunks (the double-double one is the default there): results stay
    cupy arrays, bits >= cuBLAS on the whole matrices; the shared graph is the in-core product
    bit for bit for an explicit scheme (and for the level when the count agrees)."""
    cp = _cupy()
    monkeypatch.setenv("EMULINALG_DASK_MODE", mode)
    A = phi_matrix((384, 1024), 1.0, dtype, seed=21)
    B = phi_matrix((1024, 320), 1.0, dtype, seed=22)
    a = da.from_array(cp.asarray(A), chunks=(128, 256), asarray=False)  # 4 K-blocks
    b = da.from_array(cp.asarray(B), chunks=(256, 160), asarray=False)
    c = _eager(emulinalg.matmul, a, b)
    assert emulinalg.last_plan().scheme.startswith("blocked: [cupy]")
    assert isinstance(c._meta, cp.ndarray) and c.dtype == np.dtype(dtype)
    with dask.config.set(scheduler="threads", split_every=2):
        out = c.compute()
    assert isinstance(out, cp.ndarray) and out.dtype == np.dtype(dtype)
    got = accuracy(cp.asnumpy(out), A, B)
    nat = accuracy(cp.asnumpy(cp.asarray(A) @ cp.asarray(B)), A, B)  # cuBLAS, whole matrices
    print(
        f"cupy {dtype}: bits maxrel {got['bits_maxrel']:.1f} (cuBLAS {nat['bits_maxrel']:.1f}), "
        f"componentwise {got['bits_cw']:.1f} ({nat['bits_cw']:.1f})"
    )
    assert got["nonfinite_mismatch"] == 0
    assert got["bits_maxrel"] >= nat["bits_maxrel"] and got["bits_cw"] >= nat["bits_cw"]
    if mode == "dd":
        assert "double-double" in str(emulinalg.last_plan())
        return
    # The in-core cupy product's bits: always for an explicit OzakiII (exact integers on every
    # backend); for the level when the count agrees (the cupy engine's certificate kernels
    # round the lower bound of |A||B| otherwise than the graph's per-block sums).
    count = _count_task_result(c)["count"]
    whole = _eager(emulinalg.matmul, cp.asarray(A), cp.asarray(B))
    in_core = emulinalg.last_plan()
    print(f"cupy {dtype}: dask count {count}, in core {in_core.scheme}")
    if in_core.scheme == f"OzakiII(moduli={count}, mode=accurate)" and not in_core.native_entries:
        assert _bits_equal(cp.asnumpy(out), cp.asnumpy(whole)).all()
    scheme = emulinalg.OzakiII(moduli=14)
    c = _eager(emulinalg.matmul, a, b, precision=scheme)
    with dask.config.set(scheduler="threads"):
        out = cp.asnumpy(c.compute())
    whole = cp.asnumpy(_eager(emulinalg.matmul, cp.asarray(A), cp.asarray(B), precision=scheme))
    assert _bits_equal(out, whole).all()
    assert _bits_equal(out, _eager(emulinalg.matmul, A, B, precision=scheme)).all()


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
