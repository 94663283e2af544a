"""The input generators: φ-matrices and the catalogue of special cases."""

from __future__ import annotations

import numpy as np
import pytest

from emulinalg.inputs import phi_matrix, special_cases


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "complex128", "complex64"])
def test_phi_matrix_dtype_shape_determinism(dtype):
    a = phi_matrix((5, 7), 1.5, dtype=dtype, seed=3)
    assert a.dtype == np.dtype(dtype) and a.shape == (5, 7)
    np.testing.assert_array_equal(a, phi_matrix((5, 7), 1.5, dtype=dtype, seed=3))
    assert not np.array_equal(a, phi_matrix((5, 7), 1.5, dtype=dtype, seed=4))
    assert phi_matrix(4, 0).shape == (4,)
    assert phi_matrix((2, 3, 4), 0).shape == (2, 3, 4)


def test_phi_matrix_formula():
    shape, phi, seed = (6, 8), 2.0, 11
    rng = np.random.default_rng(seed)
    u = rng.random(shape)
    g = rng.standard_normal(shape)
    np.testing.assert_array_equal(phi_matrix(shape, phi, seed=seed), (u - 0.5) * np.exp(phi * g))


def test_phi_matrix_narrow_dtypes_are_rounded_float64():
    a64 = phi_matrix((9, 9), 3, seed=5)
    np.testing.assert_array_equal(
        phi_matrix((9, 9), 3, dtype="float32", seed=5), a64.astype(np.float32)
    )
    c128 = phi_matrix((9, 9), 3, dtype="complex128", seed=5)
    np.testing.assert_array_equal(
        phi_matrix((9, 9), 3, dtype="complex64", seed=5), c128.astype(np.complex64)
    )


def test_phi_matrix_complex_parts_are_independent():
    c = phi_matrix((200, 200), 1, dtype="complex128", seed=6)
    assert abs(np.corrcoef(c.real.ravel(), c.imag.ravel())[0, 1]) < 0.02
    assert abs(np.corrcoef(np.abs(c.real).ravel(), np.abs(c.imag).ravel())[0, 1]) < 0.02
    # the real part is the real φ-matrix of the same seed
    np.testing.assert_array_equal(c.real, phi_matrix((200, 200), 1, seed=6))


def test_phi_controls_the_exponent_range():
    spans = []
    for phi in (0, 0.5, 1, 2, 4):
        a = np.abs(phi_matrix((100, 100), phi, seed=7))
        spans.append(np.log2(a.max()) - np.median(np.log2(a)))
    assert spans == sorted(spans)
    assert np.abs(phi_matrix((100, 100), 0, seed=7)).max() < 0.5


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_phi_matrix_rejects_bad_phi(bad):
    with pytest.raises(ValueError):
        phi_matrix((2, 2), bad)


@pytest.mark.parametrize("bad", ["int32", "bool", object, "longdouble"])
def test_phi_matrix_rejects_bad_dtype(bad):
    with pytest.raises(TypeError):
        phi_matrix((2, 2), 1, dtype=bad)


def test_special_cases_catalogue():
    cases = special_cases()
    names = [c[0] for c in cases]
    assert len(names) == len(set(names))
    for wanted in (
        "zero_rows_cols",
        "subnormal",
        "huge_overflow",
        "tiny",
        "wide_rows",
        "cancellation",
        "rank_deficient",
        "complex_equal_parts",
        "purely_imaginary",
        "nan_inf",
    ):
        assert wanted in names
    for name, a, b in cases:
        assert a.ndim == b.ndim == 2 and a.shape[1] == b.shape[0], name
        assert all(8 <= s <= 40 for s in a.shape + b.shape), (name, a.shape, b.shape)
        assert a.dtype in (np.float64, np.complex128) and b.dtype in (np.float64, np.complex128)
    by_name = {n: (a, b) for n, a, b in cases}
    a, b = by_name["subnormal"]
    tiny = np.finfo(np.float64).tiny
    assert ((np.abs(a) < tiny) & (a != 0)).any() and ((np.abs(b) < tiny) & (b != 0)).any()
    a, b = by_name["nan_inf"]
    assert np.isnan(a).any() and np.isposinf(a).any() and np.isneginf(a).any()
    assert np.isnan(b).any() and np.isinf(b).any()
    a, _ = by_name["rank_deficient"]
    assert np.linalg.matrix_rank(a) == 2
    a, _ = by_name["complex_equal_parts"]
    np.testing.assert_allclose(np.abs(a.real), np.abs(a.imag), rtol=1e-2)
    a, b = by_name["purely_imaginary"]
    assert not a.real.any() and not b.real.any()
    a, b = by_name["wide_rows"]
    span = np.log2(np.abs(a).max(axis=1)) - np.log2(np.abs(a).min(axis=1))
    assert (span > 400).all()
    a, b = by_name["huge_overflow"]
    with np.errstate(over="ignore"):
        assert np.isposinf(a @ b).any() and np.isfinite(a @ b).any()
    # deterministic
    again = special_cases()
    for (n1, a1, b1), (n2, a2, b2) in zip(cases, again):
        assert n1 == n2
        np.testing.assert_array_equal(a1, a2)
        np.testing.assert_array_equal(b1, b2)
