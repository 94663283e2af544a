"""Array API semantics of matmul, tensordot and vecdot, checked against numpy's own functions.

Shapes and dtypes must equal numpy's exactly; floating values must agree with numpy's to a
tolerance relative to |A||B| (the emulated product is more accurate than numpy's, so it cannot
be compared bit for bit); integer and bool results must be identical, overflow wrap-around
included, since those products are exact natively and never emulated.
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import RTOL, assert_close_to, plain_numpy
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.extra import numpy as hnp

import emulinalg

FLOAT_DTYPES = ["float16", "float32", "float64", "complex64", "complex128"]
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "bool"]
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES

# ----------------------------------------------------------------------------------------------
# strategies
# ----------------------------------------------------------------------------------------------


def elements(dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        bound = 50.0 if dt.itemsize == 2 else 1e3
        return st.floats(-bound, bound, width=8 * dt.itemsize, allow_subnormal=False)
    if dt.kind == "c":
        return st.complex_numbers(max_magnitude=1e3, width=8 * dt.itemsize, allow_subnormal=False)
    return None  # hypothesis' default: the whole range of the integer/bool dtype


def array(draw, dtype, shape):
    return draw(hnp.arrays(np.dtype(dtype), shape, elements=elements(dtype)))


def absolute_bound(fn, a, b, **kw):
    """The same contraction applied to |a| and |b| in float64 (moduli for complex)."""
    return fn(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64), **kw)


def check_against_numpy(got, want, bound, dtype):
    if currently_in_test_context():
        note(f"got={got!r}\nwant={want!r}")
    assert plain_numpy(got), type(got)
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    if np.dtype(dtype).kind in "iub":
        assert np.array_equal(got, want)
    else:
        assert_close_to(got, want, bound, RTOL[str(np.asarray(want).dtype)])


# ----------------------------------------------------------------------------------------------
# matmul
# ----------------------------------------------------------------------------------------------

matmul_shapes = hnp.mutually_broadcastable_shapes(
    signature=np.matmul.signature, max_dims=3, min_side=1, max_side=5
)
matmul_shapes_with_zeros = hnp.mutually_broadcastable_shapes(
    signature=np.matmul.signature, max_dims=2, min_side=0, max_side=3
)


@given(st.sampled_from(ALL_DTYPES), st.one_of(matmul_shapes, matmul_shapes_with_zeros), st.data())
def test_matmul_matches_numpy(dtype, shapes, data):
    sa, sb = shapes.input_shapes
    a = array(data.draw, dtype, sa)
    b = array(data.draw, dtype, sb)
    with np.errstate(all="ignore"):
        want = np.matmul(a, b)
        got = emulinalg.matmul(a, b)
    check_against_numpy(got, want, absolute_bound(np.matmul, a, b), dtype)


@given(st.sampled_from(FLOAT_DTYPES), matmul_shapes, st.data())
def test_matmul_matches_numpy_eager(dtype, shapes, data):
    """Same as above with emulation forced on (the numpy backend's default runs natively)."""
    sa, sb = shapes.input_shapes
    a = array(data.draw, dtype, sa)
    b = array(data.draw, dtype, sb)
    with emulinalg.config(strategy="eager"):
        got = emulinalg.matmul(a, b)
    want = np.matmul(a, b)
    check_against_numpy(got, want, absolute_bound(np.matmul, a, b), dtype)


@pytest.mark.parametrize(
    ("da", "db"),
    [
        ("float32", "float64"),
        ("float64", "complex64"),
        ("float32", "complex64"),
        ("complex64", "complex128"),
        ("float16", "float32"),
    ],
)
def test_matmul_mixed_floating_dtypes(da, db, rng, eager):
    a = rng.standard_normal((3, 4)).astype(da)
    b = rng.standard_normal((4, 2)).astype(db)
    got, want = emulinalg.matmul(a, b), a @ b
    check_against_numpy(got, want, absolute_bound(np.matmul, a, b), str(want.dtype))


def test_matmul_one_dimensional_promotion_and_removal(rng, eager):
    v = rng.standard_normal(4)
    m = rng.standard_normal((2, 4, 3))
    for x, y in [(v, v), (v, m), (m.swapaxes(-1, -2), v), (v, m[0])]:
        got, want = emulinalg.matmul(x, y), np.matmul(x, y)
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# tensordot
# ----------------------------------------------------------------------------------------------


@st.composite
def tensordot_cases(draw):
    """(shape_a, shape_b, axes) with an int or a pair of sequences (any order, negative
    indices, lists or tuples)."""
    nc = draw(st.integers(0, 3))
    sizes = draw(st.lists(st.integers(1, 4), min_size=nc, max_size=nc))
    free_a = draw(st.lists(st.integers(1, 3), max_size=3 - min(nc, 2)))
    free_b = draw(st.lists(st.integers(1, 3), max_size=3 - min(nc, 2)))
    if draw(st.booleans()):
        return tuple(free_a + sizes), tuple(sizes + free_b), nc

    def place(free):
        rank = nc + len(free)
        order = draw(st.permutations(list(range(rank))))
        shape = [0] * rank
        for pos, size in zip(order[:nc], sizes):
            shape[pos] = size
        for pos, size in zip(sorted(order[nc:]), free):
            shape[pos] = size
        axes = [p - rank if draw(st.booleans()) else p for p in order[:nc]]
        return tuple(shape), axes

    sa, axa = place(free_a)
    sb, axb = place(free_b)
    container = draw(st.sampled_from([list, tuple]))
    axes = (container(axa), container(axb))
    if nc == 1 and draw(st.booleans()):
        axes = (axa[0], axb[0])  # numpy's (int, int) pair form
    return sa, sb, axes


@given(st.sampled_from(ALL_DTYPES), tensordot_cases(), st.data())
def test_tensordot_matches_numpy(dtype, case, data):
    sa, sb, axes = case
    a = array(data.draw, dtype, sa)
    b = array(data.draw, dtype, sb)
    with np.errstate(all="ignore"):
        want = np.tensordot(a, b, axes=axes)
        got = emulinalg.tensordot(a, b, axes=axes)
    check_against_numpy(got, want, absolute_bound(np.tensordot, a, b, axes=axes), dtype)


@given(st.sampled_from(["float64", "complex128", "float32"]), tensordot_cases(), st.data())
def test_tensordot_matches_numpy_eager(dtype, case, data):
    sa, sb, axes = case
    a = array(data.draw, dtype, sa)
    b = array(data.draw, dtype, sb)
    with emulinalg.config(strategy="eager"):
        got = emulinalg.tensordot(a, b, axes=axes)
    want = np.tensordot(a, b, axes=axes)
    check_against_numpy(got, want, absolute_bound(np.tensordot, a, b, axes=axes), dtype)


def test_tensordot_default_axes(rng, eager):
    a = rng.standard_normal((2, 3, 4))
    b = rng.standard_normal((3, 4, 5))
    got = emulinalg.tensordot(a, b)
    np.testing.assert_allclose(got, np.tensordot(a, b), rtol=1e-13, atol=1e-14)
    assert got.shape == (2, 5)


# ----------------------------------------------------------------------------------------------
# vecdot
# ----------------------------------------------------------------------------------------------


@st.composite
def vecdot_cases(draw):
    """(shape_1, shape_2, axis): broadcastable batch shapes, equal contracted sizes, a
    negative axis counted from the end of both operands."""
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    s1, s2 = batch.input_shapes
    k = draw(st.integers(1, 5))
    axis = -draw(st.integers(1, min(len(s1), len(s2)) + 1))

    def insert(s):
        at = len(s) + axis + 1
        return s[:at] + (k,) + s[at:]

    return insert(s1), insert(s2), axis


@given(st.sampled_from(ALL_DTYPES), vecdot_cases(), st.data())
def test_vecdot_matches_numpy(dtype, case, data):
    s1, s2, axis = case
    a = array(data.draw, dtype, s1)
    b = array(data.draw, dtype, s2)
    with np.errstate(all="ignore"):
        want = np.vecdot(a, b, axis=axis)
        got = emulinalg.vecdot(a, b, axis=axis)
    check_against_numpy(got, want, absolute_bound(np.vecdot, a, b, axis=axis), dtype)


@given(st.sampled_from(["complex128", "complex64", "float64"]), vecdot_cases(), st.data())
def test_vecdot_matches_numpy_eager(dtype, case, data):
    """Complex: x1 is conjugated (numpy.vecdot does the same)."""
    s1, s2, axis = case
    a = array(data.draw, dtype, s1)
    b = array(data.draw, dtype, s2)
    with emulinalg.config(strategy="eager"):
        got = emulinalg.vecdot(a, b, axis=axis)
    want = np.vecdot(a, b, axis=axis)
    check_against_numpy(got, want, absolute_bound(np.vecdot, a, b, axis=axis), dtype)


def test_vecdot_conjugates_first_argument(eager):
    x = np.array([1 + 2j, 3 - 1j])
    y = np.array([2 - 1j, 1j])
    got = emulinalg.vecdot(x, y)
    assert got == np.sum(np.conj(x) * y)
    assert emulinalg.vecdot(y, x) == np.conj(got)


def test_vecdot_positive_axis_equal_ranks(rng, eager):
    a = rng.standard_normal((3, 4, 2))
    b = rng.standard_normal((3, 4, 2))
    got = emulinalg.vecdot(a, b, axis=1)
    np.testing.assert_allclose(got, np.vecdot(a, b, axis=1), rtol=1e-13)
    assert got.shape == (3, 2)


# ----------------------------------------------------------------------------------------------
# aliases and namespaces
# ----------------------------------------------------------------------------------------------


def test_linalg_aliases(rng, eager):
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 2))
    np.testing.assert_array_equal(emulinalg.linalg.matmul(a, b), emulinalg.matmul(a, b))
    np.testing.assert_array_equal(
        emulinalg.linalg.tensordot(a, b, axes=1), emulinalg.tensordot(a, b, axes=1)
    )
    np.testing.assert_array_equal(emulinalg.linalg.vecdot(a, a), emulinalg.vecdot(a, a))


@pytest.mark.parametrize("make", ["namespace", "module"])
def test_namespace_has_everything_with_emulated_products(make, rng):
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 2))
    if make == "namespace":
        xp = emulinalg.namespace(a, b, precision=emulinalg.OzakiII(moduli=18))
    else:
        import emulinalg.numpy as xp
    # the rest of the Array API comes from array_api_compat
    assert xp.sum(xp.asarray([1.0, 2.0])) == 3.0
    assert xp.float64 == np.float64
    for fn in (xp.matmul, xp.linalg.matmul):
        c = fn(a, b)
        np.testing.assert_allclose(c, a @ b, rtol=1e-13)
        if make == "namespace":
            assert "OzakiII(moduli=18" in emulinalg.last_plan().scheme
    np.testing.assert_allclose(xp.tensordot(a, b, axes=1), a @ b, rtol=1e-13)
    np.testing.assert_allclose(xp.vecdot(a, a), np.vecdot(a, a), rtol=1e-13)
    np.testing.assert_allclose(xp.linalg.vecdot(a, a), np.vecdot(a, a), rtol=1e-13)


def test_array_api_strict_arrays_stay_strict():
    xs = pytest.importorskip("array_api_strict")
    a = xs.asarray([[1.0, 2.0], [3.0, 4.0]])
    b = xs.asarray([[1.0], [1.0]])
    c = emulinalg.matmul(a, b)
    assert type(c) is type(a)
    assert c.shape == (2, 1)
    assert [[float(c[i, 0])] for i in range(2)] == [[3.0], [7.0]]


@pytest.mark.skipif(not hasattr(np, "longdouble") or np.dtype(np.longdouble).itemsize <= 8,
                    reason="longdouble is float64 here")  # fmt: skip
@pytest.mark.parametrize("dt", ["longdouble", "clongdouble"])
def test_extended_precision_dtypes_run_natively_and_say_so(dt):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)).astype(dt)
    b = rng.standard_normal((5, 3)).astype(dt)
    c = emulinalg.matmul(a, b)
    assert c.dtype == (a @ b).dtype
    np.testing.assert_array_equal(c, a @ b)
    assert "no emulation for this dtype" in emulinalg.last_plan().fallback


def test_float16_dask_arrays_follow_numpy_float16():
    da = pytest.importorskip("dask.array")
    a = np.linspace(-1, 1, 30 * 20).reshape(30, 20).astype(np.float16)
    c = emulinalg.matmul(da.from_array(a, chunks=10), da.from_array(a.T, chunks=10)).compute()
    want = emulinalg.matmul(a, a.T)
    assert c.dtype == np.float16
    np.testing.assert_allclose(c.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=1e-3)


def test_dask_beside_another_library_is_a_clear_error():
    da = pytest.importorskip("dask.array")
    xs = pytest.importorskip("array_api_strict")
    with pytest.raises(TypeError, match="different array libraries"):
        emulinalg.matmul(xs.asarray(np.ones((3, 4))), da.ones((4, 2)))


@pytest.mark.parametrize(
    "dtype,k,precision,exact",
    [("float64", 1, None, True), ("float32", 1, None, True), ("float64", 1, 40, False),
     ("complex128", 1, None, False), ("float64", 2, None, False)],
)  # fmt: skip
def test_k1_exact_note_only_where_taken(rng, dtype, k, precision, exact):
    """The plan's "k=1: exact product" note exactly where the engine takes the exact k = 1
    configuration (real float64/float32 levels), the certificate's note elsewhere; the k = 1
    result is then the correctly rounded product."""
    a = rng.standard_normal((5, k)).astype(dtype)
    b = rng.standard_normal((k, 4)).astype(dtype)
    if dtype == "complex128":
        a, b = a + 1j * rng.standard_normal(a.shape), b + 1j * rng.standard_normal(b.shape)
    kw = {} if precision is None else {"precision": precision}
    with emulinalg.config(strategy="eager"):
        c = emulinalg.matmul(a, b, **kw)
    notes = " ".join(emulinalg.last_plan().notes)
    assert ("k=1: exact product" in notes) == exact
    # complex k = 1 at a named level: the most moduli, not a certificate
    most = dtype == "complex128" and k == 1 and precision in (None, "float64")
    assert ("k=1, complex: not certified" in notes) == most
    assert ("certified per entry" in notes or "certified |err|" in notes) != (exact or most)
    if exact:
        np.testing.assert_array_equal(c, a @ b)  # one rounding of the exact k = 1 product
