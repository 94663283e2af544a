"""Special inputs: non-finite values, overflow, subnormals, zeros, empty and strided arrays.

Non-finite outputs must sit where numpy's own matmul puts them (NaN, +inf and -inf for real
results; positions for complex ones, whose NaN-vs-inf components depend on the BLAS kernel);
the finite part must keep the accuracy contract; results are plain numpy arrays of numpy's
dtype.
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import assert_same_nonfinite_pattern

import emulinalg
from emulinalg import OzakiI, OzakiII
from emulinalg.inputs import phi_matrix, special_cases
from emulinalg.reference import accuracy

CASES = special_cases()
PRECISIONS = [None, "float64", OzakiII(moduli=16), OzakiI(slices=8)]


def numpy_matmul(a, b):
    with np.errstate(all="ignore"):
        return np.matmul(a, b)


@pytest.mark.parametrize("precision", PRECISIONS, ids=[str(p) for p in PRECISIONS])
@pytest.mark.parametrize(("name", "a", "b"), CASES, ids=[c[0] for c in CASES])
def test_special_case_pattern_and_accuracy(name, a, b, precision, eager):
    with np.errstate(all="ignore"):  # numpy itself warns on these inputs
        c = emulinalg.matmul(a, b, precision=precision)
    plan = emulinalg.last_plan()
    want = numpy_matmul(a, b)
    assert type(c) is np.ndarray and c.dtype == want.dtype and c.shape == want.shape
    assert_same_nonfinite_pattern(c, want)
    acc = accuracy(c, a, b)
    nat = accuracy(want, a, b)
    info = f"{name}: emulated {acc}\nnative {nat}\nplan {plan}"
    # entries numpy gets finite must be finite here too (checked above); compare the rest
    if precision in (None, "float64"):
        assert acc["bits_cw"] >= nat["bits_cw"], info
        assert acc["bits_maxrel"] >= nat["bits_maxrel"], info
    elif name != "wide_rows":
        # Explicit schemes carry no certificate, but no garbage either. (Their error is bounded
        # by ~2**-L max|a_i| max|b_j|, which for rows and columns spanning 2**+-300 exceeds
        # |A||B| itself: wide_rows is what the levels' native fallback is for.)
        assert acc["bits_cw"] >= min(30, nat["bits_cw"]), info


@pytest.mark.parametrize("dtype", ["float32", "complex64", "complex128"])
@pytest.mark.parametrize("name", ["nan_inf", "inf_times_zero", "huge_overflow"])
def test_nonfinite_other_dtypes(name, dtype, eager):
    _, a, b = next(c for c in CASES if c[0] == name)
    with np.errstate(all="ignore"):
        if dtype == "float32" and name == "huge_overflow":
            a = a * 1e-270  # rows near 1e30 times a column near 1e10 overflow float32
        a, b = a.astype(dtype), b.astype(dtype)
        if np.dtype(dtype).kind == "c":
            a = a + 1j * a[::-1]
    c = emulinalg.matmul(a, b)
    want = numpy_matmul(a, b)
    assert c.dtype == want.dtype
    assert_same_nonfinite_pattern(c, want)


def test_nonfinite_in_batched_and_vector_products(eager):
    a = phi_matrix((3, 4, 5), 1, seed=1)
    b = phi_matrix((3, 5, 2), 1, seed=2)
    a[1, 2, 3] = np.nan
    b[2, 0, 1] = -np.inf
    assert_same_nonfinite_pattern(emulinalg.matmul(a, b), numpy_matmul(a, b))
    v = phi_matrix(5, 1, seed=3)
    v[4] = np.inf
    assert_same_nonfinite_pattern(emulinalg.matmul(a, v), numpy_matmul(a, v))
    y = phi_matrix((4, 5), 1, seed=4)
    y[2, 1] = np.inf
    with np.errstate(all="ignore"):
        want = np.vecdot(a, y)
    assert_same_nonfinite_pattern(emulinalg.vecdot(a, y), want)


def test_overflow_becomes_inf_where_numpy_overflows(eager):
    a = np.full((4, 6), 1e200)
    b = np.full((6, 3), 1e200)
    b[:, 1] = -1e200
    b[:, 2] = 1e-200
    c = emulinalg.matmul(a, b)
    want = numpy_matmul(a, b)
    assert_same_nonfinite_pattern(c, want)
    assert (c[:, 0] == np.inf).all() and (c[:, 1] == -np.inf).all()
    np.testing.assert_allclose(c[:, 2], 6.0, rtol=1e-15)


def test_largest_finite_results_do_not_overflow(eager):
    big = np.finfo(np.float64).max
    a = np.array([[big / 2, big / 4], [big, -big / 2]])
    b = np.array([[1.0], [1.0]])
    c = emulinalg.matmul(a, b)
    np.testing.assert_array_equal(c, [[0.75 * big], [big / 2]])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_subnormal_inputs_and_results(dtype, eager):
    tiny = np.finfo(dtype).smallest_subnormal
    a = np.array([[tiny, 3 * tiny, 1.0], [0.5, 2.0, tiny]], dtype=dtype)
    b = np.array([[1.0, 2.0], [0.25, 4.0], [tiny, 1.0]], dtype=dtype)
    c = emulinalg.matmul(a, b)
    want = a @ b
    assert c.dtype == want.dtype
    got, nat = accuracy(c, a, b), accuracy(want, a, b)
    assert got["bits_cw"] >= nat["bits_cw"] and got["bits_maxrel"] >= nat["bits_maxrel"]


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((0, 3), (3, 4)),
        ((3, 0), (0, 4)),
        ((3, 4), (4, 0)),
        ((2, 0, 3), (3, 4)),
        ((0,), (0,)),
        ((0,), (0, 5)),
        ((2, 3, 0), (2, 0, 1)),
    ],
)
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "int32"])
def test_zero_size_dimensions(sa, sb, dtype, eager):
    a, b = np.ones(sa, dtype=dtype), np.ones(sb, dtype=dtype)
    c = emulinalg.matmul(a, b)
    want = np.matmul(a, b)
    assert np.shape(c) == np.shape(want) and np.asarray(c).dtype == want.dtype
    assert not np.any(c)


def test_zero_size_tensordot_and_vecdot(eager):
    assert emulinalg.tensordot(np.ones((2, 0)), np.ones((0, 3)), axes=1).shape == (2, 3)
    assert not emulinalg.tensordot(np.ones((2, 0)), np.ones((0, 3)), axes=1).any()
    assert emulinalg.vecdot(np.ones((4, 0)), np.ones((4, 0))).shape == (4,)


def test_zero_rows_and_columns(eager):
    a = phi_matrix((6, 8), 1, seed=4)
    b = phi_matrix((8, 5), 1, seed=5)
    a[2] = 0
    b[:, 3] = 0
    a[:, 5] = 0
    c = emulinalg.matmul(a, b)
    assert (c[2] == 0).all() and (c[:, 3] == 0).all()
    assert accuracy(c, a, b)["bits_cw"] >= accuracy(a @ b, a, b)["bits_cw"]
    z = emulinalg.matmul(np.zeros((3, 4)), np.zeros((4, 2)))
    np.testing.assert_array_equal(z, np.zeros((3, 2)))


def _layouts(x):
    """The same values in different memory layouts."""
    yield "C", np.ascontiguousarray(x)
    yield "F", np.asfortranarray(x)
    yield "transposed", np.ascontiguousarray(x.T).T
    yield "negative-stride", np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]
    big = np.zeros((2 * x.shape[0] + 1, 3 * x.shape[1] + 2), dtype=x.dtype)
    big[1::2, 2::3] = x
    yield "strided", big[1::2, 2::3]
    big = np.zeros_like(big)
    big[1::2, 2::3] = x[::-1, ::-1]
    yield "strided-negative", big[1::2, 2::3][::-1, ::-1]


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_memory_layouts(dtype, eager):
    a0 = phi_matrix((7, 9), 1, dtype=dtype, seed=6)
    b0 = phi_matrix((9, 5), 1, dtype=dtype, seed=7)
    scheme = OzakiII(moduli=16)
    exact_scheme = emulinalg.matmul(a0, b0, precision=scheme)
    level = emulinalg.matmul(a0, b0)
    for la, a in _layouts(a0):
        for lb, b in _layouts(b0):
            np.testing.assert_array_equal(a, a0)
            np.testing.assert_array_equal(b, b0)
            c = emulinalg.matmul(a, b, precision=scheme)
            assert type(c) is np.ndarray and c.dtype == a0.dtype, (la, lb)
            # an explicit scheme is a function of the values, not of their layout
            np.testing.assert_array_equal(c, exact_scheme, err_msg=f"{la} @ {lb}")
            c = emulinalg.matmul(a, b)
            assert type(c) is np.ndarray and c.dtype == a0.dtype, (la, lb)
            tol = 1e-13 if dtype != "float32" else 1e-6
            np.testing.assert_allclose(c, level, rtol=tol, err_msg=f"{la} @ {lb}")


def test_inputs_are_not_modified(eager):
    a = phi_matrix((5, 6), 2, seed=8)
    b = phi_matrix((6, 4), 2, seed=9)
    a[1, 1] = np.nan
    a0, b0 = a.copy(), b.copy()
    a.setflags(write=False)
    b.setflags(write=False)
    emulinalg.matmul(a, b)
    emulinalg.tensordot(a, b, axes=1)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_results_are_plain_numpy_with_numpy_dtype(eager):
    a = phi_matrix((3, 4), 1, seed=10)
    b = phi_matrix((4, 2), 1, seed=11)
    for got, want in [
        (emulinalg.matmul(a, b), a @ b),
        (emulinalg.tensordot(a, b, axes=1), np.tensordot(a, b, axes=1)),
        (emulinalg.vecdot(a, a), np.vecdot(a, a)),
        (emulinalg.matmul(h := a.astype(np.float16), g := b.astype(np.float16)), h @ g),
        (emulinalg.matmul(u := (a > 0).astype(np.uint8), w := (b > 0).astype(np.uint8)), u @ w),
    ]:
        assert type(got) is np.ndarray
        assert got.dtype == want.dtype and got.shape == want.shape


def test_large_k_blocking(eager):
    """k beyond the exact range of one int GEMM pass (the backend must block k)."""
    k = 70000
    a = phi_matrix((2, k), 0.5, seed=12)
    b = phi_matrix((k, 3), 0.5, seed=13)
    c = emulinalg.matmul(a, b)
    acc = accuracy(c, a, b)
    nat = accuracy(a @ b, a, b)
    assert acc["bits_cw"] >= nat["bits_cw"] and acc["bits_maxrel"] >= nat["bits_maxrel"]
