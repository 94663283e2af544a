"""The exact reference itself, checked against ``fractions.Fraction`` arithmetic.

Every accuracy claim of the library is measured with ``emulinalg.reference``, so these tests
check it independently: products are recomputed with Python's exact rationals and rounded with
``float(Fraction)``, which is correctly rounded.
"""

from __future__ import annotations

import ast
import math
import pathlib
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulinalg import reference
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, effective_bits, exact_matmul

# ----------------------------------------------------------------------------------------------
# Fraction oracle
# ----------------------------------------------------------------------------------------------


def _round(x: Fraction) -> tuple[float, float]:
    """Correctly rounded (hi, lo) of an exact rational, with overflow -> (+-inf, 0)."""
    try:
        hi = float(x)
    except OverflowError:
        return (math.inf if x > 0 else -math.inf), 0.0
    return hi, float(x - Fraction(hi))


def fraction_matmul(a, b):
    """(hi, lo) of the exact product computed with Fractions, entry by entry."""
    a, b = np.asarray(a), np.asarray(b)
    cplx = a.dtype.kind == "c" or b.dtype.kind == "c"
    m, k = a.shape
    n = b.shape[1]

    def parts(x):
        if x.dtype.kind == "c":
            return [[(Fraction(float(v.real)), Fraction(float(v.imag))) for v in row] for row in x]
        if x.dtype.kind in "iub":
            return [[(Fraction(int(v)), Fraction(0)) for v in row] for row in x]
        return [[(Fraction(float(v)), Fraction(0)) for v in row] for row in x]

    fa, fb = parts(a), parts(b)
    hi = np.zeros((m, n), dtype=np.complex128 if cplx else np.float64)
    lo = np.zeros_like(hi)
    for i in range(m):
        for j in range(n):
            re = sum(
                (fa[i][h][0] * fb[h][j][0] - fa[i][h][1] * fb[h][j][1] for h in range(k)),
                Fraction(0),
            )
            im = sum(
                (fa[i][h][0] * fb[h][j][1] + fa[i][h][1] * fb[h][j][0] for h in range(k)),
                Fraction(0),
            )
            rh, rl = _round(re)
            if cplx:
                ih, il = _round(im)
                hi[i, j] = complex(rh, ih)
                lo[i, j] = complex(rl, il)
            else:
                hi[i, j], lo[i, j] = rh, rl
    return hi, lo


def assert_identical(got, want):
    """Bitwise-equal float arrays (NaN compared as NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True), (got, want)


# ----------------------------------------------------------------------------------------------
# strategies: doubles spread over chosen binades (normal, subnormal, huge)
# ----------------------------------------------------------------------------------------------

EXPONENT_RANGES = {
    "moderate": (-60, 60),
    "wide": (-330, 330),
    "subnormal": (-1126, -1000),  # ldexp rounds these into the subnormal range
    "huge": (900, 971),
    "mixed": (-1126, 971),
}


def doubles(exp_range):
    """Finite doubles m * 2**e over the binades of ``exp_range`` (zeros included)."""
    lo, hi = EXPONENT_RANGES[exp_range]
    # full 53-bit significands, and short ones that exercise trailing-zero stripping
    mant = st.one_of(st.integers(-(2**53) + 1, 2**53 - 1), st.integers(-256, 256))
    finite = st.builds(math.ldexp, mant, st.integers(lo - 53, hi - 53))
    return st.one_of(finite, st.just(0.0))


@st.composite
def operand_pairs(draw, complex_prob=0.3):
    m, k, n = (draw(st.integers(1, 5)) for _ in range(3))
    ra = draw(st.sampled_from(list(EXPONENT_RANGES)))
    rb = draw(st.sampled_from(["moderate", "wide", "subnormal"]))

    def mat(rows, cols, rng_name):
        vals = draw(st.lists(doubles(rng_name), min_size=rows * cols, max_size=rows * cols))
        return np.array(vals, dtype=np.float64).reshape(rows, cols)

    a, b = mat(m, k, ra), mat(k, n, rb)
    if draw(st.floats(0, 1)) < complex_prob:
        a = a + 1j * mat(m, k, ra)
    if draw(st.floats(0, 1)) < complex_prob:
        b = b + 1j * mat(k, n, rb)
    return a, b


# ----------------------------------------------------------------------------------------------
# exact_matmul against Fractions
# ----------------------------------------------------------------------------------------------


@given(operand_pairs())
def test_exact_matmul_matches_fractions(pair):
    a, b = pair
    hi, lo = exact_matmul(a, b)
    want_hi, want_lo = fraction_matmul(a, b)
    assert_identical(hi, want_hi)
    assert_identical(lo, want_lo)


@given(operand_pairs(complex_prob=0.0))
def test_exact_matmul_without_flint_matches(pair):
    """The pure-Python fallback gives the same bits as the flint path."""
    a, b = pair
    want = exact_matmul(a, b)
    saved = reference._flint
    reference._flint = None
    try:
        got = exact_matmul(a, b)
    finally:
        reference._flint = saved
    assert_identical(got[0], want[0])
    assert_identical(got[1], want[1])


@pytest.mark.parametrize("dtype", ["float16", "float32", "complex64"])
def test_exact_matmul_narrow_dtypes(dtype, rng):
    a = phi_matrix((4, 6), 2, dtype=dtype, seed=1)
    b = phi_matrix((6, 3), 2, dtype=dtype, seed=2)
    hi, lo = exact_matmul(a, b)
    assert hi.dtype == (np.complex128 if "complex" in dtype else np.float64)
    want_hi, want_lo = fraction_matmul(
        a.astype(np.complex128 if "complex" in dtype else np.float64),
        b.astype(np.complex128 if "complex" in dtype else np.float64),
    )
    assert_identical(hi, want_hi)
    assert_identical(lo, want_lo)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int64", "uint64", "bool"])
def test_exact_matmul_integers(dtype, rng):
    info = np.iinfo(dtype) if dtype != "bool" else None
    if info is None:
        a = rng.random((5, 7)) < 0.5
        b = rng.random((7, 4)) < 0.5
    else:
        a = rng.integers(info.min, info.max, (5, 7), dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, (7, 4), dtype=dtype, endpoint=True)
    hi, lo = exact_matmul(a, b)
    want_hi, want_lo = fraction_matmul(a, b)
    assert_identical(hi, want_hi)
    assert_identical(lo, want_lo)


def test_rounding_ties_and_subnormal_results():
    """Hand-made cases where double rounding or naive ldexp would go wrong."""
    cases = [
        # exact tie between two doubles: 1 + 2**-53 rounds to even (1.0), lo = 2**-53
        ([[1.0, 2.0**-27]], [[1.0], [2.0**-26]], 1.0, 2.0**-53),
        # just above the tie rounds up
        ([[1.0, 2.0**-27, 2.0**-80]], [[1.0], [2.0**-26], [1.0]], 1.0 + 2.0**-52, None),
        # result between subnormals: 3 * 2**-1076 = 0.75 * 2**-1074 rounds to 2**-1074
        ([[2.0**-538]], [[3 * 2.0**-538]], 2.0**-1074, None),
        # tie in the subnormal range: 2**-1075 rounds to even (0)
        ([[2.0**-537]], [[2.0**-538]], 0.0, None),
        # 1.5 * 2**-1074 - tiny must round down to 2**-1074; rounding first to 53 bits gives the
        # tie 1.5 * 2**-1074, which a second rounding sends up to 2**-1073 (double rounding)
        ([[2.0**-537, 2.0**-600]], [[3 * 2.0**-538], [-(2.0**-600)]], 2.0**-1074, None),
    ]
    for a, b, hi_want, lo_want in cases:
        a, b = np.array(a), np.array(b)
        hi, lo = exact_matmul(a, b)
        assert hi[0, 0] == hi_want, (a, b, hi, hi_want)
        if lo_want is not None:
            assert lo[0, 0] == lo_want
        want = fraction_matmul(a, b)
        assert_identical(hi, want[0])
        assert_identical(lo, want[1])


def test_overflow_gives_inf_and_zero_lo():
    a = np.array([[1e300, 1e300], [1e300, -1e300], [-1e300, -1e300]])
    b = np.array([[1e10, 1.0], [1e10, 1.0]])
    hi, lo = exact_matmul(a, b)
    assert hi[0, 0] == np.inf and hi[2, 0] == -np.inf
    assert hi[1, 0] == 0.0  # exact cancellation, although every product overflows
    assert hi[0, 1] == 2e300
    assert (lo[:, 0] == 0).all()
    # the largest finite double and its neighbourhood
    big = np.finfo(np.float64).max
    hi, _ = exact_matmul(np.array([[big, big]]), np.array([[1.0], [-0.5]]))
    assert hi[0, 0] == big / 2
    ulp = 2.0**971  # the spacing of doubles just below 2**1024
    hi, lo = exact_matmul(np.array([[big, ulp / 4]]), np.array([[1.0], [1.0]]))
    assert (hi[0, 0], lo[0, 0]) == (big, ulp / 4)
    hi, lo = exact_matmul(np.array([[big, ulp / 2]]), np.array([[1.0], [1.0]]))
    assert hi[0, 0] == np.inf  # a tie at the overflow threshold rounds to inf


def test_zero_rows_columns_and_empty():
    a = np.array([[0.0, 0.0], [1e-310, 3.0]])
    b = np.array([[0.0, 5e300], [0.0, 2.0]])
    hi, lo = exact_matmul(a, b)
    assert_identical(hi, fraction_matmul(a, b)[0])
    for shape_a, shape_b in [((0, 3), (3, 4)), ((3, 0), (0, 4)), ((2, 3), (3, 0))]:
        hi, lo = exact_matmul(np.ones(shape_a), np.ones(shape_b))
        assert hi.shape == (shape_a[0], shape_b[1]) and not hi.any() and not lo.any()
    hi, lo = exact_matmul(np.ones((3, 0), dtype=complex), np.ones((0, 2)))
    assert hi.dtype == np.complex128 and hi.shape == (3, 2)


def test_hi_plus_lo_is_much_more_accurate_than_float():
    a = phi_matrix((8, 200), 1, seed=3)
    b = phi_matrix((200, 8), 1, seed=4)
    hi, lo = exact_matmul(a, b)
    want_hi, want_lo = fraction_matmul(a, b)
    assert_identical(hi, want_hi)
    assert_identical(lo, want_lo)
    assert (np.abs(lo) <= np.abs(np.spacing(hi)) / 2).all()


def test_bad_arguments():
    with pytest.raises(ValueError):
        exact_matmul(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError):
        exact_matmul(np.ones(3), np.ones((3, 2)))
    with pytest.raises(TypeError):
        exact_matmul(np.ones((2, 2), dtype=object), np.ones((2, 2)))
    with pytest.raises(TypeError):
        exact_matmul(np.array([["a"]]), np.ones((1, 1)))


def test_reference_shares_no_code_with_the_library():
    """The yardstick must be independent of what it measures."""
    src = pathlib.Path(reference.__file__).read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("emulinalg"), node.module
        if isinstance(node, ast.Import):
            assert all(not alias.name.startswith("emulinalg") for alias in node.names)


# ----------------------------------------------------------------------------------------------
# non-finite inputs: the IEEE pattern of a sum of products
# ----------------------------------------------------------------------------------------------

specials = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, 1.0, -2.0, 0.5, -0.25])


@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.data())
def test_nonfinite_pattern_matches_numpy_real(m, k, n, data):
    a = np.array(data.draw(st.lists(specials, min_size=m * k, max_size=m * k))).reshape(m, k)
    b = np.array(data.draw(st.lists(specials, min_size=k * n, max_size=k * n))).reshape(k, n)
    hi, lo = exact_matmul(a, b)
    with np.errstate(all="ignore"):
        want = a @ b
    assert_identical(hi, want)  # these values are exact in float64, finite or not
    assert not lo[~np.isfinite(hi)].any()


def test_nonfinite_complex_pattern_positions():
    a = np.ones((3, 3), dtype=complex)
    a[1, 0] = complex(np.inf, 0)
    b = np.full((3, 2), 1 + 1j)
    b[2, 1] = complex(np.nan, 0)
    hi, _ = exact_matmul(a, b)
    bad = ~(np.isfinite(hi.real) & np.isfinite(hi.imag))
    assert bad.tolist() == [[False, True], [True, True], [False, True]]
    # conventional formula: (inf + 0j)(1 + 1j) summed with finite terms = inf + inf j, but
    # (inf + 0j)(1 + 0j) = inf + nan j (inf * 0 in the imaginary part)
    assert hi[1, 0] == complex(np.inf, np.inf)
    hi, _ = exact_matmul(a, np.ones((3, 1), dtype=complex))
    assert hi[1, 0].real == np.inf and np.isnan(hi[1, 0].imag)


# ----------------------------------------------------------------------------------------------
# accuracy() and effective_bits()
# ----------------------------------------------------------------------------------------------


def test_effective_bits():
    assert effective_bits(0.0) == math.inf
    assert effective_bits(2.0**-53) == 53
    assert effective_bits(1.0) == 0
    assert effective_bits(math.inf) == -math.inf


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_accuracy_of_the_rounded_exact_product(dtype):
    a = phi_matrix((16, 50), 2, dtype=dtype, seed=5)
    b = phi_matrix((50, 12), 2, dtype=dtype, seed=6)
    hi, lo = exact_matmul(a, b)
    acc = accuracy(hi, a, b)
    assert acc["bits_maxrel"] >= 53 - 1e-6
    assert acc["bits_cw"] >= 53 - 1e-6
    assert acc["nonfinite_mismatch"] == 0 and acc["compared"] == hi.size
    # the exact hi + lo is off by at most a rounding of lo: ~106 bits
    acc2 = accuracy(hi, a, b, ref=(hi, lo))
    assert acc2["maxrel"] == pytest.approx(acc["maxrel"], rel=1e-6)


def test_accuracy_measures_known_errors():
    a = phi_matrix((6, 20), 0.5, seed=7)
    b = phi_matrix((20, 5), 0.5, seed=8)
    hi, lo = exact_matmul(a, b)
    c = hi.copy()
    c[2, 3] = hi[2, 3] * (1 + 2.0**-30)
    acc = accuracy(c, a, b, ref=(hi, lo))
    assert acc["bits_maxrel"] == pytest.approx(30, abs=1e-6)
    den = np.abs(a) @ np.abs(b)
    assert acc["maxcw"] == pytest.approx(abs(hi[2, 3]) * 2.0**-30 / den[2, 3], rel=1e-6)
    assert acc["normwise"] == pytest.approx(abs(hi[2, 3]) * 2.0**-30 / np.linalg.norm(hi), rel=1e-6)
    # a NaN where the reference is finite: excluded from the metrics, counted as a mismatch
    c[0, 0] = np.nan
    acc = accuracy(c, a, b, ref=(hi, lo))
    assert acc["nonfinite_mismatch"] == 1 and acc["compared"] == hi.size - 1
    assert acc["bits_maxrel"] == pytest.approx(30, abs=1e-6)


def test_accuracy_in_the_subnormal_range():
    """Without ``ref``, errors of subnormal results are measured exactly."""
    a = np.array([[2.0**-540, 2.0**-541]])
    b = np.array([[2.0**-540], [2.0**-541]])  # C = 1.25 * 2**-1080: rounds to 0
    acc = accuracy(np.zeros((1, 1)), a, b)
    assert acc["maxrel"] == 1.0 and acc["maxcw"] == 1.0
    acc = accuracy(np.full((1, 1), 2.0**-1074), a, b)
    assert acc["maxrel"] == pytest.approx((2**6 - 1.25) / 1.25)


def test_accuracy_of_numpy_is_plausible():
    a = phi_matrix((32, 256), 1, seed=9)
    b = phi_matrix((256, 32), 1, seed=10)
    acc = accuracy(a @ b, a, b)
    assert 45 < acc["bits_cw"] < 54
    assert 20 < acc["bits_maxrel"] < 54
    assert 0 < acc["normwise"] < 1e-14


def test_accuracy_with_nonfinite_inputs():
    a = phi_matrix((6, 5), 1, seed=11)
    b = phi_matrix((5, 4), 1, seed=12)
    a[2, 1] = np.inf
    b[3, 2] = np.nan
    with np.errstate(all="ignore"):
        c = a @ b
    acc = accuracy(c, a, b)
    assert acc["nonfinite_mismatch"] == 0
    assert acc["compared"] == 5 * 3  # row 2 and column 2 are non-finite
    assert acc["bits_cw"] > 50


# ----------------------------------------------------------------------------------------------
# speed: the reference must stay cheap enough for the suite and the benchmarks
# ----------------------------------------------------------------------------------------------


def test_reference_speed_512_cubed_phi4():
    a = phi_matrix((512, 512), 4, seed=13)
    b = phi_matrix((512, 512), 4, seed=14)
    t0 = time.perf_counter()
    hi, lo = exact_matmul(a, b)
    elapsed = time.perf_counter() - t0
    # spot-check a few entries against Fractions
    for i, j in [(0, 0), (17, 400), (511, 3)]:
        s = sum(Fraction(float(a[i, h])) * Fraction(float(b[h, j])) for h in range(512))
        assert hi[i, j] == float(s) and lo[i, j] == float(s - Fraction(float(s)))
    assert elapsed < 30  # ~1 s on one core of a 2025 server
