"""Complex products modulo the Gaussian moduli in the amx backend's C++ stages
(``src_amx/ozaki2_host.cpp``: ``ozaki2_pack(..., gaussian=True)`` writes u = re + iota im and
v = re - iota im, ``ozaki2_multiply`` combines U and V into the parts' residues, the CRT takes
the Gaussian moduli's tables).

Their residues against Python integers; the product bit for bit the generic
``emulinalg.algorithm.products.product(..., gaussian=True)`` (float64, float32, double-double,
views, float32 parts, both rounding modes), on the tile model and on AMX (marked ``amx``); the
float64 level of a complex product through the amx backend takes them and equals the numpy
backend's. Every test runs on both forms of the C++ loops (explicit AVX-512 and portable).
"""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import _amx, matmul_amx_and_numpy
from _helpers import scaled_integer

import emulinalg
from emulinalg.algorithm.moduli import crt_constants
from emulinalg.inputs import phi_matrix

pytestmark = [
    pytest.mark.skipif(
        _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
    ),
    pytest.mark.usefixtures("host_loops"),
]


def _symmetric(x, m):
    return (x + m // 2) % m - m // 2


@pytest.mark.parametrize("nearest", [False, True])
@pytest.mark.parametrize("order", ["C", "F"])
def test_gaussian_residues_equal_python_integers(order, nearest, rng):
    """ozaki2_residues3(..., gaussian=True): planes u, v of x 2**shift (rounded to nearest or
    toward zero) modulo each of the 20 Gaussian moduli, against Python integers; lines of 70
    entries (a whole run of 64 and a partial one), integers up to 2**81, subnormals, +-0."""
    R, C = 7, 70
    x = rng.standard_normal((R, C)) * np.exp2(rng.integers(-60, 60, (R, C)))
    x[0, :4] = [5e-324, -0.0, 0.0, -1.5]
    x[2] = 2.0**-1074 * rng.integers(-(2**20), 2**20, C)
    y = x[:, ::-1] * rng.uniform(-1, 1, (R, C))
    shift = (80 - np.frexp(np.abs(x).max(1))[1]).astype(np.int32)
    shift[2] = 1074 + 40
    xs, ys = (x, y) if order == "C" else (np.asfortranarray(x), np.asfortranarray(y))
    got = _amx.ozaki2_residues3(xs, ys, shift, 20, True, nearest=nearest, gaussian=True)
    assert got.shape == (2, 20, R, C)
    c = crt_constants(20, True)
    X = [[scaled_integer(x[r, j], shift[r], nearest) for j in range(C)] for r in range(R)]
    Y = [[scaled_integer(y[r, j], shift[r], nearest) for j in range(C)] for r in range(R)]
    for ell, (m, iota) in enumerate(zip(c.moduli, c.iota)):
        for p, sign in enumerate((1, -1)):
            want = np.array([[_symmetric(X[r][j] + sign * iota * Y[r][j], m) for j in range(C)]
                             for r in range(R)])  # fmt: skip
            assert np.array_equal(got[p, ell], want), (m, p)


def _assert_gaussian_product_equal(ar, ai, br, bi, moduli, mode, out_dtype):
    """amx.ozaki2_product(..., gaussian=True) == products.product(..., gaussian=True) byte for
    byte, part by part, on the generic prescale."""
    import array_api_compat.numpy as xp

    from emulinalg.algorithm import products
    from emulinalg.algorithm.scaling import ozaki2_prescale
    from emulinalg.backends import amx
    from emulinalg.backends import numpy as npb

    wide = [x.astype(np.float64) for x in (ar, ai, br, bi)]  # the generic code's float64 parts
    pre = ozaki2_prescale(xp, npb.int_matmul, *wide, mode)
    got = amx.ozaki2_product(ar, ai, br, bi, moduli, mode, out_dtype, pre, gaussian=True)
    with np.errstate(over="ignore"):
        want = products.product(
            xp, npb.int_matmul, *wide, moduli, mode, out_dtype, pre, gaussian=True
        )
    assert got is not None and len(got) == len(want) == 2
    for g, w in zip(got, want):
        g, w = (tuple(np.asarray(v) for v in x) if isinstance(x, tuple) else (np.asarray(x),)
                for x in (g, w))  # fmt: skip
        for gv, wv in zip(g, w, strict=True):
            assert gv.dtype == wv.dtype and np.array_equal(gv.view(np.uint8), wv.view(np.uint8))
    return got


@pytest.mark.parametrize("case", ["phi", "imaginary", "wide", "float32"])
@pytest.mark.parametrize("out_dtype", ["float64", "float32", "dd"])
@pytest.mark.parametrize("moduli", [2, 8, 16, 20])
def test_gaussian_product_equals_the_generic_product(backend, case, out_dtype, moduli, rng):
    """The C++ stages modulo the Gaussian moduli (u, v panels, two tile GEMMs per modulus, U and
    V combined into Re and Im, the CRT with the Gaussian tables) against the generic product,
    bit for bit: strided and Fortran-ordered views, a purely imaginary operand, exponents
    spread over 2**+-300 with a zero column, float32 parts read as they are."""
    a = phi_matrix((23, 70), 1.0, "complex128", seed=91)
    b = phi_matrix((70, 17), 1.0, "complex128", seed=92)
    if case == "imaginary":
        a = 1j * a.imag
    elif case == "wide":
        a = a * np.exp2(rng.integers(-300, 300, (23, 1)))
        b = b * np.exp2(rng.integers(-300, 300, (1, 17)))
        b[:, 3] = 0
    elif case == "float32":
        a, b = a.astype(np.complex64), b.astype(np.complex64)
    ar, ai = np.real(a)[::-1], np.imag(a)[::-1]  # strided views
    br, bi = np.asfortranarray(np.real(b)), np.asfortranarray(np.imag(b))
    if case == "float32":
        ar, ai = np.ascontiguousarray(ar), np.ascontiguousarray(ai)
    for mode in ("accurate", "fast"):
        _assert_gaussian_product_equal(ar, ai, br, bi, moduli, mode, out_dtype)


@pytest.mark.parametrize("shape", [(21, 70, 13), (64, 300, 96)])
def test_complex_level_takes_the_gaussian_moduli(eager, backend, monkeypatch, shape):
    """The float64 level of a complex128 product on the amx backend (``gaussian_moduli``) runs
    modulo the Gaussian moduli (its plan says so, two GEMMs per modulus plus the bound GEMM) and
    equals the numpy backend's product to the last bit."""
    m, k, n = shape
    a = phi_matrix((m, k), 1, "complex128", seed=23)
    b = phi_matrix((k, n), 1, "complex128", seed=24)
    got = emulinalg.matmul(a, b, precision="float64")
    plan = emulinalg.last_plan()
    assert plan.backend == "amx" and plan.scheme.endswith("gaussian)"), plan.scheme
    count = int(plan.scheme.split("moduli=")[1].split(",")[0])
    assert plan.gemms == 2 * count + 1
    monkeypatch.setattr(emulinalg.backends, "for_namespace", lambda xp: backend)
    again, want = matmul_amx_and_numpy(monkeypatch, a, b, "float64")
    assert np.array_equal(got.view(np.uint8), again.view(np.uint8))
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
