"""The cupy backend: INT8 tensor-core GEMMs via cuBLAS, same results as the CPU reference.

Runs only where cupy sees a CUDA GPU (marked ``gpu``); skipped with the reason elsewhere.
Exact integer products, explicit schemes bit for bit with the numpy backend, batches and views,
the default precision no worse than cuBLAS, non-finite values as cuBLAS, the line scan, streams,
the namespace and its plans.
"""

from __future__ import annotations

import numpy as np
import pytest
from _gpu_helpers import _bits_equal, _eager, require_gpu
from _helpers import nonfinite_codes

import emulinalg
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul

cp = require_gpu()

from emulinalg.backends import cupy as cupy_backend  # noqa: E402  (needs cupy)

pytestmark = pytest.mark.gpu


EXPLICIT = [
    emulinalg.OzakiII(moduli=16),
    emulinalg.OzakiII(moduli=9),
    emulinalg.OzakiII(moduli=20),
    emulinalg.OzakiI(slices=8),
    emulinalg.OzakiI(slices=4),
]
SHAPES = [(1, 1, 1), (7, 68, 61), (64, 300, 50), (33, 1, 17)]


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 68, 61), (5, 70000, 3), (129, 257, 65)])
@pytest.mark.parametrize(
    "lo,hi,bound", [(-128, 127, 128 * 128), (0, 64, 4096), (0, 255, 255 * 255)]
)
def test_int_matmul_exact(shape, lo, hi, bound):
    m, k, n = shape
    rng = np.random.default_rng(m * 7 + k)
    a = rng.integers(lo, hi + 1, size=(m, k)).astype(np.float64)
    b = rng.integers(lo, hi + 1, size=(k, n)).astype(np.float64)
    if bound == 255 * 255:  # Scheme I operands: a signed leading slice beside unsigned ones
        a[:, : k // 2] = rng.integers(-128, 128, size=(m, k // 2))
        b[: k // 2] = rng.integers(-128, 128, size=(k // 2, n))
    want = a.astype(np.int64) @ b.astype(np.int64)
    got = cupy_backend.int_matmul(cp.asarray(a), cp.asarray(b), bound)
    assert got.dtype == cp.float64
    assert np.array_equal(cp.asnumpy(got).astype(np.int64), want)


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
@pytest.mark.parametrize("scheme", EXPLICIT, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bit_for_bit_with_cpu_reference(shape, scheme, dtype):
    m, k, n = shape
    a = phi_matrix((m, k), 1, dtype, seed=m + k)
    b = phi_matrix((k, n), 1, dtype, seed=k + n + 1)
    want, cpu_plan = _eager(emulinalg.matmul, a, b, precision=scheme)
    got, gpu_plan = _eager(emulinalg.matmul, cp.asarray(a), cp.asarray(b), precision=scheme)
    assert isinstance(got, cp.ndarray) and got.dtype == want.dtype
    assert gpu_plan.backend == "cupy" and gpu_plan.scheme == cpu_plan.scheme
    assert _bits_equal(cp.asnumpy(got), want)


def test_batched_broadcast_and_views_bit_for_bit():
    a = phi_matrix((3, 17, 40), 1, seed=1)
    b = phi_matrix((40, 9), 1, seed=2)
    s = emulinalg.OzakiII(moduli=15)
    want, _ = _eager(emulinalg.matmul, a, b, precision=s)
    got, _ = _eager(emulinalg.matmul, cp.asarray(a), cp.asarray(b), precision=s)
    assert _bits_equal(cp.asnumpy(got), want)
    # transposed, Fortran-ordered and negative-stride views
    at = phi_matrix((40, 17), 1, seed=3)
    bt = phi_matrix((9, 40), 1, seed=4)
    want, _ = _eager(emulinalg.matmul, at.T[::-1], np.asfortranarray(bt.T), precision=s)
    ga, gb = cp.asarray(at).T[::-1], cp.asfortranarray(cp.asarray(bt).T)
    got, _ = _eager(emulinalg.matmul, ga, gb, precision=s)
    assert _bits_equal(cp.asnumpy(got), want)


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
@pytest.mark.parametrize("phi", [0.5, 1, 2, 4])
def test_default_precision_no_worse_than_cublas(phi, dtype):
    n = 192
    a = phi_matrix((n, n), phi, dtype, seed=int(phi * 10))
    b = phi_matrix((n, n), phi, dtype, seed=int(phi * 10) + 1)
    ga, gb = cp.asarray(a), cp.asarray(b)
    ref = exact_matmul(a, b)
    native = accuracy(cp.asnumpy(ga @ gb), a, b, ref=ref)
    c, plan = _eager(emulinalg.matmul, ga, gb)
    got = accuracy(cp.asnumpy(c), a, b, ref=ref)
    info = f"{plan}\nemulated {got}\ncuBLAS {native}"
    assert got["bits_maxrel"] >= native["bits_maxrel"], info
    assert got["bits_cw"] >= native["bits_cw"], info


@pytest.mark.parametrize("precision", [None, "float64", emulinalg.OzakiII(moduli=8)], ids=str)
def test_float32_parts_narrow_equal_wide(precision, monkeypatch):
    """narrow_products: a float32 product hands the inputs' own parts to the kernels (no float64
    copy) and gives the bits and plan of the product of their float64 copies, with a NaN row
    and a column scaled into float32's subnormals."""
    a = phi_matrix((300, 500), 1, "float32", seed=3)
    b = phi_matrix((500, 200), 1, "float32", seed=4)
    a[7, 11] = np.nan
    b[:, 5] *= np.float32(2.0**-120)
    a, b = cp.asarray(a), cp.asarray(b)
    got, plan = _eager(emulinalg.matmul, a, b, precision=precision)
    monkeypatch.setattr(cupy_backend, "narrow_products", False)
    want, want_plan = _eager(emulinalg.matmul, a, b, precision=precision)
    assert _bits_equal(cp.asnumpy(got), cp.asnumpy(want))
    assert str(plan) == str(want_plan)


def test_nonfinite_pattern_like_cublas():
    a = phi_matrix((20, 30), 1, seed=5)
    b = phi_matrix((30, 25), 1, seed=6)
    a[2, 3], a[4, :] = np.nan, 1e300
    b[7, 9], b[:, 11] = np.inf, -1e300
    ga, gb = cp.asarray(a), cp.asarray(b)
    c, plan = _eager(emulinalg.matmul, ga, gb)
    assert np.array_equal(nonfinite_codes(cp.asnumpy(c)), nonfinite_codes(cp.asnumpy(ga @ gb)))
    assert plan.native_entries > 0


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_line_scan(cplx):
    """The engine's NaN/Inf check fused with the statistics' first pass: the line exponents
    are the generic ones (zero lines aside), the prescale given them is the same, and NaN/Inf
    in any part of a line make the operands not finite."""
    from emulinalg.algorithm.scaling import max_exponent

    rng = np.random.default_rng(3)
    parts = [phi_matrix((40, 300), 1, seed=8), phi_matrix((300, 30), 1, seed=9)]
    if cplx:
        parts = [parts[0], rng.standard_normal((40, 300)), parts[1], rng.standard_normal((300, 30))]
    else:
        parts = [parts[0], None, parts[1], None]
    parts[0][5, :] = 0.0
    g = [None if x is None else cp.asarray(x) for x in parts]
    finite, (ea, eb) = cupy_backend.line_scan(*g)
    assert finite is True
    for e, x, xi, axis in ((ea, parts[0], parts[1], -1), (eb, parts[2], parts[3], -2)):
        want = max_exponent(np, x, xi, axis)
        got = cp.asnumpy(e)[0].astype(np.int64)
        zero = np.max(np.abs(x), axis=axis) == 0
        if xi is not None:
            zero &= np.max(np.abs(xi), axis=axis) == 0
        assert np.array_equal(np.where(zero, 0, got), want) and np.all(got[zero] == -(2**31))
    want = cupy_backend.ozaki2_prescale(*g, "accurate")
    got = cupy_backend.ozaki2_prescale(*g, "accurate", exponents=(ea, eb))
    for x, y in zip(got, want):
        assert _bits_equal(cp.asnumpy(x), cp.asnumpy(y))
    for which, (i, j), value in ((0, (2, 5), np.nan), (2, (7, 4), np.inf), (1, (3, 3), -np.inf)):
        x = [None if v is None else v.copy() for v in g]
        if x[which] is None:
            continue
        x[which][i, j] = value
        assert cupy_backend.line_scan(*x)[0] is False


def test_streams():
    a = phi_matrix((96, 200), 1, seed=7)
    b = phi_matrix((200, 80), 1, seed=8)
    s = emulinalg.OzakiII(moduli=14)
    want, _ = _eager(emulinalg.matmul, a, b, precision=s)
    outs = []
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    for st in streams:  # work queued on two non-default streams, results read after both
        with st:
            outs.append(_eager(emulinalg.matmul, cp.asarray(a), cp.asarray(b), precision=s)[0])
    for st, out in zip(streams, outs):
        st.synchronize()
        assert _bits_equal(cp.asnumpy(out), want)


def test_namespace_and_plan():
    ga = cp.asarray(phi_matrix((8, 8), 1, seed=9))
    xp = emulinalg.namespace(ga)
    with emulinalg.config(strategy="eager"):
        c = xp.matmul(ga, ga)
    assert isinstance(c, cp.ndarray)
    assert emulinalg.last_plan().backend == "cupy"


def test_default_reuses_the_native_verdict_of_its_shapes(monkeypatch):
    # A repeated default call whose shapes the cost model sends to cuBLAS reuses that verdict
    # (emulinalg._api: the host time a small native product pays); the result is cuBLAS's.
    from emulinalg import _api, _planner

    asked = []
    likely = _planner.likely_faster
    monkeypatch.setattr(
        _planner, "likely_faster", lambda *a, **k: asked.append(1) or likely(*a, **k)
    )
    monkeypatch.setattr(_api, "_VERDICTS", {})
    ga = cp.asarray(phi_matrix((48, 40), 1, seed=21))
    gb = cp.asarray(phi_matrix((40, 24), 1, seed=22))
    for _ in range(3):
        c = emulinalg.matmul(ga, gb)
        assert isinstance(c, cp.ndarray)
        assert _bits_equal(cp.asnumpy(c), cp.asnumpy(cp.matmul(ga, gb)))
        plan = emulinalg.last_plan()
        assert (
            plan.backend == "cupy" and not plan.emulated and plan.fallback.startswith("performant")
        )
    assert len(asked) == 1
