"""Invalid calls raise clear ``ValueError`` / ``TypeError``, as numpy and the Array API do."""

from __future__ import annotations

import numpy as np
import pytest

import emulinalg

ERRORS = (TypeError, ValueError)


def products():
    return [
        ("matmul", lambda x, y, **kw: emulinalg.matmul(x, y, **kw)),
        ("tensordot", lambda x, y, **kw: emulinalg.tensordot(x, y, axes=1, **kw)),
        ("vecdot", lambda x, y, **kw: emulinalg.vecdot(x, y, **kw)),
    ]


@pytest.mark.parametrize(("name", "fn"), products(), ids=[p[0] for p in products()])
@pytest.mark.parametrize("scalar_first", [True, False])
def test_zero_dimensional_operands(name, fn, scalar_first):
    s, v = np.asarray(2.0), np.ones(3)
    x, y = (s, v) if scalar_first else (v, s)
    with pytest.raises(ValueError):
        fn(x, y)


def test_tensordot_zero_dimensional_with_too_many_axes():
    with pytest.raises(ValueError):
        emulinalg.tensordot(np.asarray(2.0), np.ones((3, 3)), axes=2)


@pytest.mark.parametrize(
    ("sa", "sb"),
    [((2, 3), (4, 5)), ((3,), (4,)), ((3,), (4, 2)), ((2, 3), (2,)), ((2, 2, 3), (2, 4, 2))],
)
def test_matmul_mismatched_contraction(sa, sb):
    with pytest.raises(ValueError, match=r"(?i)contract|dimension|size|shape"):
        emulinalg.matmul(np.ones(sa), np.ones(sb))


def test_matmul_batch_dimensions_that_do_not_broadcast():
    with pytest.raises(ValueError):
        emulinalg.matmul(np.ones((2, 3, 4)), np.ones((3, 4, 5)))


def test_contracted_axes_are_not_broadcast():
    """Size 1 against size 5 on a contracted axis is an error, not a broadcast."""
    with pytest.raises(ValueError):
        emulinalg.matmul(np.ones((2, 1)), np.ones((5, 3)))
    with pytest.raises(ValueError):
        emulinalg.tensordot(np.ones((2, 1)), np.ones((5, 3)), axes=([1], [0]))
    with pytest.raises(ValueError):
        emulinalg.vecdot(np.ones((3, 1)), np.ones((3, 5)))


@pytest.mark.parametrize(
    "axes",
    [
        ([0, 0], [0, 1]),  # duplicate in x1
        ([0, 1], [1, -2]),  # duplicate in x2 (1 and -2 are the same axis)
        ([2], [0]),  # out of range for x1 (2 dims)
        ([0], [-4]),  # out of range for x2 (3 dims)
        ([0, 1], [0]),  # unequal lengths
        -1,  # negative count
        3,  # more axes than x1 has
    ],
)
def test_tensordot_bad_axes(axes):
    with pytest.raises(ERRORS):
        emulinalg.tensordot(np.ones((3, 3)), np.ones((3, 3, 3)), axes=axes)


@pytest.mark.parametrize("axes", [1.5, "1", ([0.5], [0]), None])
def test_tensordot_non_integer_axes(axes):
    with pytest.raises(ERRORS):
        emulinalg.tensordot(np.ones((3, 3)), np.ones((3, 3)), axes=axes)


@pytest.mark.parametrize("axis", [-3, 2, 5])
def test_vecdot_axis_out_of_range(axis):
    with pytest.raises(ValueError):
        emulinalg.vecdot(np.ones((2, 3)), np.ones((2, 3)), axis=axis)


def test_vecdot_mismatched_sizes():
    with pytest.raises(ValueError):
        emulinalg.vecdot(np.ones((2, 3)), np.ones((2, 4)))


def test_mixing_array_libraries():
    xs = pytest.importorskip("array_api_strict")
    a = np.ones((2, 2))
    b = xs.ones((2, 2))
    for fn in (emulinalg.matmul, emulinalg.tensordot, emulinalg.vecdot):
        with pytest.raises(ERRORS, match=r"(?i)librar|namespace"):
            fn(a, b)
        with pytest.raises(ERRORS):
            fn(b, a)
    with pytest.raises(ERRORS):
        emulinalg.namespace(a, b)


def test_non_arrays():
    with pytest.raises(TypeError):
        emulinalg.matmul([[1.0, 2.0]], [[1.0], [2.0]])
    with pytest.raises(TypeError):
        emulinalg.matmul(np.ones((2, 2)), 3.0)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([[1, 2], [3, 4]], dtype=object),
        np.array([["a", "b"], ["c", "d"]]),
        np.array([[b"a", b"b"], [b"c", b"d"]]),
        np.array([["2020-01-01", "2020-01-02"]] * 2, dtype="datetime64[D]"),
        np.array([[1, 2], [3, 4]], dtype="timedelta64[s]"),
    ],
    ids=["object", "str", "bytes", "datetime64", "timedelta64"],
)
@pytest.mark.parametrize("op", ["matmul", "tensordot", "vecdot"])
def test_unsupported_dtypes(bad, op):
    good = np.ones((2, 2))
    fn = getattr(emulinalg, op)
    with pytest.raises(ERRORS, match=r"(?i)dtype"):
        fn(bad, good)
    with pytest.raises(ERRORS, match=r"(?i)dtype"):
        fn(good, bad)


# ----------------------------------------------------------------------------------------------
# odd inputs (issue #26, class 4)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "fn"), products(), ids=[p[0] for p in products()])
def test_last_plan_is_none_after_a_call_that_raised(name, fn):
    emulinalg.matmul(np.ones((3, 4)), np.ones((4, 2)))
    assert emulinalg.last_plan() is not None
    with pytest.raises(ERRORS):
        fn(np.ones((3, 4)), np.ones((5, 2)))
    assert emulinalg.last_plan() is None


@pytest.mark.parametrize("strategy", ["eager", "performant"])
def test_an_output_too_large_to_allocate_raises_memoryerror_before_the_scan(strategy):
    """A broadcast view of 2**46 entries costs nothing to make; its product's output (512 TiB,
    beyond a 47-bit address space) cannot be allocated: numpy raises MemoryError at once, and
    so must the emulation, before it reads the operands for NaN/Inf."""
    big = np.broadcast_to(np.ones((1, 1)), (1 << 23, 1 << 23))
    with pytest.raises(MemoryError):
        np.matmul(big, big)
    with emulinalg.config(strategy=strategy), pytest.raises(MemoryError):
        emulinalg.matmul(big, big)


@pytest.mark.parametrize("precision", [None, 60, emulinalg.OzakiII(moduli=8)])
def test_vecdot_of_32_dimensional_operands_is_exact_on_integers(precision):
    """numpy.vecdot takes 32-D operands; the emulation's (..., 1, k) @ (..., k, 1) products
    would need 33 dimensions. Small integers: every product and sum is exact, natively and
    emulated, so the result must equal the exact integer sums."""
    rng = np.random.default_rng(3)
    x = rng.integers(-8, 9, size=(2,) + (1,) * 29 + (3, 5)).astype(np.float64)
    y = rng.integers(-8, 9, size=(1,) * 30 + (3, 5)).astype(np.float64)
    exact = (x.astype(np.int64) * y.astype(np.int64)).sum(axis=-1)
    with emulinalg.config(strategy="eager"):
        c = emulinalg.vecdot(x, y, precision=precision)
    assert c.shape == np.vecdot(x, y).shape == (2,) + (1,) * 29 + (3,)
    assert np.array_equal(c, exact.astype(np.float64))
    assert emulinalg.last_plan().scheme != "native"
