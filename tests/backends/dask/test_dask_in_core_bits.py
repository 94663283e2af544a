"""The dask layer's results are the in-core engine's on the whole matrices bit for bit (entries
taken from the native product aside).

Dask's threaded scheduler, explicit ``OzakiII``, the rounding switch at large k, the other
levels and those above the dtype's, the double-double graph's overflowing partials, batches with
k = 1 and fast mode, non-finite values and zero lines; cupy chunks on the GPU (marked ``gpu``).
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest
from _dask_helpers import (
    _assert_in_core_bits,
    _bits_equal,
    _count_task_result,
    _eager,
    _engine_certificate,
    _numpy_in_core,
    _split,
    _split_certificate,
)
from _helpers import RTOL, assert_close_to

import emulinalg
import emulinalg.backends
from emulinalg import _planner
from emulinalg.algorithm import operands, products
from emulinalg.algorithm.moduli import MAX_MODULI, crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest
from emulinalg.backends import numpy as numpy_backend
from emulinalg.backends.dask import crt as dask_crt
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

pytestmark = pytest.mark.dask


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
    if _split(plan):  # the stacked parts' product's blocks (complex φ = 4: the split route)
        _, beyond, _ = _split_certificate(A, B, fold=False)
        rows, cols = [0, 53, 106, 150, 203, 256], [0, 29, 58, 70, 99, 128]
    else:
        _, beyond, _ = _engine_certificate(A, B)
        rows, cols = [0, 53, 106], [0, 29, 58]
    flags = np.add.reduceat(np.add.reduceat(beyond, rows, 0), cols, 1) > 0
    assert np.array_equal(cfg["need"], flags)


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
            products, "rounds_to_nearest", lambda *args: not rounds_to_nearest(*args)
        )
        with _numpy_in_core():  # the generic residues (the amx backend's are its own code)
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
def test_other_levels_in_core_bits(sync, monkeypatch, precision, dtype):
    # bits (strict: the l1 worst case) and the named levels (native: the l2 form)
    # 60 bits is beyond float64's native precision: the engine's most accurate count where any
    # entry is beyond the certificate, no native entries. Complex: the complex route (these
    # wide-range operands have parts the part check would split: test_complex_parts.py).
    if dtype.startswith("complex"):
        monkeypatch.setattr(_planner, "part_checked", lambda request, complex_: False)
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
def test_wide_range_native_entries(sync, dtype):
    """Issue #26, class 3: φ = 8 operands, three K-blocks, the default level: entries beyond
    every count are taken from the native product (complex128: on the split route). The
    emulated entries are the in-core product's bit for bit; the native-taken ones come from
    dask's blocked native product (block products summed over K-blocks, not the in-core call's
    one GEMM), so they are held to native's own worst-case bound against the exact product
    (python-flint): per part |err| <= gamma_{2k} P_p for complex (each part is a real sum of
    2k products, in any order), gamma_k (|A||B|) for real."""
    A = phi_matrix((40, 300), 8.0, dtype, seed=61)
    B = phi_matrix((300, 30), 8.0, dtype, seed=62)
    a, b = da.from_array(A, chunks=(17, 100)), da.from_array(B, chunks=(100, 11))
    out = _eager(emulinalg.matmul, a, b).compute()
    plan = _assert_in_core_bits(out, A, B)  # (a): every emulated entry
    assert plan.native_entries > 0, str(plan)
    certify = _split_certificate if _split(plan) else _engine_certificate
    beyond = certify(A, B)[1]
    assert int(beyond.sum()) == plan.native_entries
    hi, lo = exact_matmul(A, B)
    k, u = A.shape[-1], np.finfo(A.real.dtype).eps / 2
    if dtype == "float64":
        sums = [np.abs(A) @ np.abs(B)]
        terms, get = k, [np.real]
    else:
        ar, ai, br, bi = (np.abs(x) for x in (A.real, A.imag, B.real, B.imag))
        sums = [ar @ br + ai @ bi, ar @ bi + ai @ br]  # P_re, P_im (float64: to 2**-40)
        terms, get = 2 * k, [np.real, np.imag]
    gamma = terms * u / (1 - terms * u)
    for part, P in zip(get, sums):  # (b): the native-taken entries
        exact = part(hi) + part(lo)
        err = np.abs(part(out) - exact)[beyond]
        assert np.all(err <= gamma * P[beyond] * (1 + 2.0**-40)), float((err / P[beyond]).max())


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize(
    ("precision", "mode"),
    [
        (emulinalg.BF16xN(), "dd"),
        (emulinalg.OzakiI(slices=7), "dd"),
        (None, "dd"),
        (None, "shared"),
        (emulinalg.OzakiII(moduli=15), "shared"),
    ],
    ids=str,
)
def test_partials_that_overflow_do_not_make_nan(sync, monkeypatch, precision, mode, dtype):
    """Issue #26: K-blocks of +-1e308 entries whose partial sums overflow where the whole sum
    does not (a block sums to +4e308, the next to -4e308). Every graph: the dd graph (Scheme I,
    BF16xN, Scheme II with EMULINALG_DASK_MODE=dd) and the shared graph (Scheme II's level and
    an explicit count: residues added over K-blocks, one CRT) give the in-core product's finite
    values; where the exact sum itself overflows, inf as in core."""
    monkeypatch.setenv("EMULINALG_DASK_MODE", mode)
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
