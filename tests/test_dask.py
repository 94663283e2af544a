"""The dask layer: lazy graphs of emulated block products, added in double-double over K-blocks.

The accuracy cases run through a real ``distributed.LocalCluster`` (two worker processes, one
thread each); the rest use dask's synchronous scheduler. Query planning (``array.query-planning``)
is fixed when ``dask.array`` is first imported, so the other mode runs in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from _helpers import RTOL, assert_close_to, assert_same_nonfinite_pattern

import emulinalg
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

pytestmark = pytest.mark.dask

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    assert isinstance(c, da.Array) and c.shape == (96, 40) and c.dtype == np.float64
    assert t.shape == (96, 40) and v.shape == (96,)
    plan = emulinalg.last_plan()
    assert plan.backend == "dask" and plan.scheme.startswith("blocked")
    with (
        pytest.raises(AssertionError, match="chunk was computed"),
        dask.config.set(scheduler="sync"),
    ):
        c.compute()


def test_plan_describes_the_graph():
    a = da.ones((100, 200), chunks=(50, 64))
    b = da.ones((200, 30), chunks=(64, 30))
    with dask.config.set(split_every=2):
        _eager(emulinalg.matmul, a, b)
    plan = emulinalg.last_plan()
    assert plan.backend == "dask"
    assert (
        plan.scheme == "blocked: [numpy] float64 level, Scheme II configuration chosen per "
        "block at compute time"
    )
    text = str(plan)
    assert "4 K-blocks" in text and "split_every=2" in text and "double-double" in text
    assert "k 3x64+8" in text and plan.shape == (1, 100, 30, 200)
    _eager(emulinalg.matmul, a, b, precision=emulinalg.OzakiII(moduli=14))
    assert emulinalg.last_plan().scheme == "blocked: [numpy] OzakiII(moduli=14, mode=accurate)"


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


@pytest.mark.parametrize("phi", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_bits_at_least_native_on_a_cluster(client, dtype, phi):
    A = phi_matrix((160, 256), phi, dtype, seed=11)
    B = phi_matrix((256, 96), phi, dtype, seed=12)
    a = da.from_array(A, chunks=(64, 64))  # 4 K-blocks
    b = da.from_array(B, chunks=(64, 64))
    with dask.config.set(split_every=2):  # a two-level tree: combine and aggregate
        c = _eager(emulinalg.matmul, a, b)
    assert "4 K-blocks" in str(emulinalg.last_plan())
    out = client.compute(c).result()
    assert type(out) is np.ndarray and out.dtype == np.dtype(dtype)
    got, nat = _grade(out, A, B)
    print(
        f"{dtype} phi={phi}: bits maxrel {got['bits_maxrel']:.1f} (native "
        f"{nat['bits_maxrel']:.1f}), componentwise {got['bits_cw']:.1f} ({nat['bits_cw']:.1f})"
    )
    assert got["nonfinite_mismatch"] == 0
    assert got["bits_maxrel"] >= nat["bits_maxrel"]
    assert got["bits_cw"] >= nat["bits_cw"]


@pytest.mark.parametrize("scheme", [emulinalg.OzakiI(slices=7), emulinalg.OzakiII(moduli=14)])
def test_explicit_scheme_on_a_cluster(client, scheme):
    # An explicit scheme promises no level; blocking it over K must not lose accuracy against
    # the same scheme on the whole matrices (each block is scaled on its own, never coarser).
    A = phi_matrix((96, 192), 1.0, "float64", seed=5)
    B = phi_matrix((192, 64), 1.0, "float64", seed=6)
    a, b = da.from_array(A, chunks=(48, 64)), da.from_array(B, chunks=(64, 32))
    c = _eager(emulinalg.matmul, a, b, precision=scheme)
    assert emulinalg.last_plan().scheme == f"blocked: [numpy] {scheme}"
    got = accuracy(client.compute(c).result(), A, B)
    whole = accuracy(_eager(emulinalg.matmul, A, B, precision=scheme), A, B)
    assert got["bits_maxrel"] >= whole["bits_maxrel"] - 1
    assert got["bits_cw"] >= whole["bits_cw"] - 1


def test_out_of_core_example_small(client):
    from emulinalg.examples import out_of_core

    res = out_of_core.run(client, m=192, k=256, n=96, chunks=(64, 64, 48), rows=8, progress=False)
    assert "4 K-blocks" in res["plan"] and res["nonfinite_mismatch"] == 0
    assert res["bits_maxrel"] >= res["native_bits_maxrel"]
    assert res["bits_cw"] >= res["native_bits_cw"]


def _cupy():
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() > 0:
            return cp
    except Exception:
        pass
    pytest.skip("cupy with a CUDA device is not available")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_cupy_chunks_stay_on_the_gpu(dtype):
    cp = _cupy()
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


# --------------------------------------------------------------------------------------------
# Query planning (dask-expr arrays) in the other mode
# --------------------------------------------------------------------------------------------

_QP_SCRIPT = textwrap.dedent(
    """
    import numpy as np, dask, dask.array as da, emulinalg
    from emulinalg.inputs import phi_matrix
    from emulinalg.reference import accuracy
    assert da.array_expr_enabled() == {mode}
    A = phi_matrix((96, 192), 1.0, "float64", seed=1)
    B = phi_matrix((192, 40), 1.0, "float64", seed=2)
    a, b = da.from_array(A, chunks=(48, 64)), da.from_array(B, chunks=(64, 20))
    with emulinalg.config(strategy="eager"), dask.config.set(split_every=2):
        c = emulinalg.matmul(a, b)
    assert emulinalg.last_plan().scheme.startswith("blocked"), emulinalg.last_plan()
    out = c.compute(scheduler="sync")
    assert type(out) is np.ndarray and out.shape == (96, 40)
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
