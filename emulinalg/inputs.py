"""Input generators for tests, the demo and benchmarks (numpy only).

``phi_matrix`` draws the field's standard test matrices, whose exponent range
grows with ``phi``; ``special_cases`` is a small catalogue of inputs that stress
scaling, cancellation, overflow/underflow and non-finite handling.

References
----------
Ootomo, Ozaki, Yokota 2024 (ozIMMU) and Uchino et al. 2025 (GEMMul8) use
``a_ij = (U(0,1) - 0.5) * exp(phi * N(0,1))`` to grade emulated GEMMs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["phi_matrix", "special_cases"]

_FLOAT_DTYPES = ("float16", "float32", "float64", "complex64", "complex128")


def phi_matrix(
    shape: int | tuple[int, ...], phi: float, dtype: DTypeLike = "float64", seed: int | None = 0
) -> np.ndarray:
    """Random matrix with entries ``(U(0,1) - 0.5) * exp(phi * N(0,1))``.

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the result (any number of dimensions).
    phi : float
        Spread of the exponents: 0 gives entries in (-0.5, 0.5); each unit
        of ``phi`` widens the range by roughly ``exp(N(0,1))``.
    dtype : str or numpy dtype, optional
        ``"float64"`` (default), ``"float32"``, ``"float16"``, ``"complex128"``
        or ``"complex64"``.  Narrower dtypes are generated in float64 and then
        rounded; complex dtypes get independent real and imaginary parts drawn
        the same way.
    seed : int, optional
        Seed for :func:`numpy.random.default_rng`; the same arguments always
        give the same matrix.

    Returns
    -------
    numpy.ndarray
        Array of the given shape and dtype.

    Raises
    ------
    ValueError
        If ``phi`` is negative or not finite.
    TypeError
        If ``dtype`` is not one of the floating dtypes above.
    """
    dt = np.dtype(dtype)
    if dt.name not in _FLOAT_DTYPES:
        raise TypeError(f"phi_matrix: dtype must be one of {_FLOAT_DTYPES}, got {dt}")
    phi = float(phi)
    if not np.isfinite(phi) or phi < 0:
        raise ValueError(f"phi_matrix: phi must be finite and >= 0, got {phi}")
    rng = np.random.default_rng(seed)

    def draw():
        u = rng.random(shape)
        g = rng.standard_normal(shape)
        return (u - 0.5) * np.exp(phi * g)

    if dt.kind == "c":
        re = draw()
        im = draw()
        out = np.empty(re.shape, dtype=np.complex128)
        out.real = re
        out.imag = im
        return out.astype(dt)
    return draw().astype(dt)


def _random_signed(rng, shape, low=0.5, high=1.0):
    """Uniform magnitudes in [low, high) with random signs."""
    mag = rng.uniform(low, high, shape)
    return np.where(rng.random(shape) < 0.5, -mag, mag)


def special_cases(seed: int | None = 0) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Catalogue of special input pairs ``(name, a, b)`` for ``a @ b``.

    Parameters
    ----------
    seed : int, optional
        Seed for :func:`numpy.random.default_rng`.

    Returns
    -------
    list of tuple (str, numpy.ndarray, numpy.ndarray)
        2-D float64 (complex128 for the complex cases) operands of modest
        size (8 to 40 along each axis), with a compatible inner dimension.

    Notes
    -----
    The cases are:

    ``zero_rows_cols``
        Zero rows of ``a``, zero columns of ``b`` and a zero inner index.
    ``subnormal``
        Subnormal entries mixed with normal ones in the same rows.
    ``subnormal_results``
        Normal tiny operands whose products are subnormal (~1e-320).
    ``huge_overflow``
        Entries near 1e300 in some rows of ``a`` and a column of ``b`` near
        1e10 with equal signs: those products overflow to ``+inf``.
    ``huge_finite``
        Entries near 1e300 times entries near 1e-300: huge operands, modest
        result.
    ``tiny``
        Entries around 1e-300 times entries around 1: results near 1e-300.
    ``wide_rows``
        Every row and column spans magnitudes 2**-300 .. 2**300.
    ``cancellation``
        ``[X, X, S] @ [[Y], [-Y], [T]]`` with ``X, Y`` near 1e10 and ``S, T``
        near 1: the exact result ``S T`` is tiny compared with ``|A||B|``.
    ``rank_deficient``
        Rank-2 operands.
    ``complex_equal_parts``
        Complex entries with ``|Re| == |Im|`` up to a relative 1e-3.
    ``purely_imaginary``
        Both operands purely imaginary (real result with a zero imaginary part).
    ``nan_inf``
        NaN, ``+inf`` and ``-inf`` in a few rows of ``a`` and columns of ``b``.
    ``inf_times_zero``
        An infinite row of ``a`` against zero entries of ``b`` (NaN results).
    ``complex_nan_inf``
        A complex pair with NaN and infinite parts in a row and a column.
    """
    rng = np.random.default_rng(seed)
    cases: list[tuple[str, np.ndarray, np.ndarray]] = []

    def normal(m, n):
        return rng.standard_normal((m, n))

    # zero rows of A, zero columns of B, a zero inner index
    a = normal(16, 12)
    b = normal(12, 10)
    a[[0, 5], :] = 0.0
    b[:, [2, 9]] = 0.0
    a[:, 3] = 0.0
    b[7, :] = 0.0
    cases.append(("zero_rows_cols", a, b))

    # subnormal entries next to normal ones in the same row / column
    a = normal(12, 20)
    b = normal(20, 9)
    a[::2, ::3] = _random_signed(rng, a[::2, ::3].shape) * 2.0**-1060
    b[1::3, :] = _random_signed(rng, b[1::3, :].shape) * 2.0**-1050
    cases.append(("subnormal", a, b))

    # normal operands whose products land in the subnormal range
    a = _random_signed(rng, (10, 16)) * 1e-160
    b = _random_signed(rng, (16, 8)) * 1e-160
    cases.append(("subnormal_results", a, b))

    # huge: rows 0..3 of A near 1e300 (positive), column 0 of B near 1e10
    # (positive): those products overflow to +inf; the rest stays finite
    a = normal(12, 16)
    a[:4] = rng.uniform(0.5, 1.0, (4, 16)) * 1e300
    b = normal(16, 8) * 1e-10
    b[:, 0] = rng.uniform(0.5, 1.0, 16) * 1e10
    cases.append(("huge_overflow", a, b))

    # huge operands with a modest exact product
    a = _random_signed(rng, (9, 24)) * 1e300
    b = _random_signed(rng, (24, 11)) * 1e-300
    cases.append(("huge_finite", a, b))

    # tiny operands
    a = _random_signed(rng, (14, 18)) * 1e-300
    b = normal(18, 12)
    cases.append(("tiny", a, b))

    # rows and columns spanning 2**-300 .. 2**300
    a = _random_signed(rng, (16, 32)) * np.exp2(rng.integers(-300, 301, (16, 32)))
    b = _random_signed(rng, (32, 12)) * np.exp2(rng.integers(-300, 301, (32, 12)))
    cases.append(("wide_rows", a, b))

    # cancellation: [X, X, S] @ [[Y], [-Y], [T]] = S @ T exactly, tiny compared
    # with |A||B| ~ 1e20 (floating-point sums leave rounding errors ~1e4)
    x = normal(12, 10) * 1e10
    y = normal(10, 14) * 1e10
    a = np.concatenate([x, x, normal(12, 4)], axis=1)
    b = np.concatenate([y, -y, normal(4, 14)], axis=0)
    cases.append(("cancellation", a, b))

    # rank 2
    a = normal(20, 2) @ normal(2, 30)
    b = normal(30, 2) @ normal(2, 16)
    cases.append(("rank_deficient", a, b))

    # complex with |Re| ~ |Im|
    def equal_parts(m, n):
        r = rng.standard_normal((m, n))
        s = np.where(rng.random((m, n)) < 0.5, -1.0, 1.0)
        return r + 1j * s * r * (1 + 1e-3 * rng.standard_normal((m, n)))

    cases.append(("complex_equal_parts", equal_parts(16, 40), equal_parts(40, 12)))

    cases.append(("purely_imaginary", 1j * normal(12, 20), 1j * normal(20, 10)))

    # NaN / inf in a few rows of A and columns of B
    a = normal(12, 16)
    b = normal(16, 10)
    a[2, 5] = np.nan
    a[4, 1] = np.inf
    a[7, 7] = -np.inf
    a[9, 3] = np.inf
    a[9, 11] = -np.inf  # +inf and -inf products in one row: NaN
    b[0, 3] = np.nan
    b[6, 6] = np.inf
    cases.append(("nan_inf", a, b))

    # inf times zero
    a = normal(8, 12)
    b = normal(12, 8)
    a[3, 4] = np.inf
    b[4, ::2] = 0.0
    cases.append(("inf_times_zero", a, b))

    # complex with non-finite parts
    a = normal(10, 12) + 1j * normal(10, 12)
    b = normal(12, 9) + 1j * normal(12, 9)
    a[1, 2] = complex(np.inf, 0.0)
    a[6, 0] = complex(1.0, np.nan)
    b[5, 4] = complex(0.0, -np.inf)
    cases.append(("complex_nan_inf", a, b))

    return cases
