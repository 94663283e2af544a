"""``emulinalg._amx.line_products``: the line patch's thin products in one OpenMP call (few rows,
few columns, thin blocks), each entry summed over pieces of K. Checked against the exact product
(its error within the pieces' bound, as the native GEMM's is within its blocked chains'),
against numpy's products of the same pieces, and through the engine's line patch."""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import _amx

from emulinalg.backends import amx as amx_backend
from emulinalg.reference import exact_matmul

pytestmark = pytest.mark.skipif(
    _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
)

U = 2.0**-53


def _chain_bound(k, step):
    """The deterministic error bound of a sum of k products in pieces of ``step`` (each piece
    at most ``step`` additions deep, then ceil(k / step) piece sums), relative to |x||y|."""
    depth = step + -(-k // step) + 1
    return depth * U / (1 - depth * U)


def _pieces(x, y, rows, cols, step):
    """numpy's sums of the same pieces (the engine's path without the hook)."""
    xs = x if rows is None else x[rows]
    ys = y if cols is None else y[:, cols]
    xs, ys = xs.astype(np.float64), ys.astype(np.float64)
    total = np.zeros((xs.shape[0], ys.shape[1]))
    for k0 in range(0, x.shape[1], step):
        total += xs[:, k0 : k0 + step] @ ys[k0 : k0 + step]
    return total


CASES = [  # (m, k, n, rows, cols): few rows, few columns, thin blocks either way, all of k tiny
    (40, 300, 530, [3, 17, 39], None),
    (530, 300, 40, None, [0, 7, 39]),
    (64, 257, 70, [5], list(range(0, 70, 3))),
    (64, 257, 70, list(range(0, 64, 2)), [69]),
    (9, 1, 600, [0, 8], None),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("step", [16, 64, 1000])
def test_line_products_within_the_pieces_bound(case, dtype, step, rng):
    m, k, n, rows, cols = case
    # magnitudes spread over many binades: cancellation and the bound both matter
    x = (rng.standard_normal((m, k)) * np.exp(2 * rng.standard_normal((m, k)))).astype(dtype)
    y = (rng.standard_normal((k, n)) * np.exp(2 * rng.standard_normal((k, n)))).astype(dtype)
    got = _amx.line_products(x, y, None if rows is None else np.array(rows),
                             None if cols is None else np.array(cols), step)  # fmt: skip
    xs = x if rows is None else x[rows]
    ys = y if cols is None else y[:, cols]
    assert got.dtype == np.float64 and got.flags.c_contiguous
    assert got.shape == (xs.shape[0], ys.shape[1])
    hi, lo = exact_matmul(xs.astype(np.float64), ys.astype(np.float64))
    mag = np.abs(xs).astype(np.float64) @ np.abs(ys).astype(np.float64)
    err = np.abs((got - hi) - lo)
    assert np.all(err <= _chain_bound(k, step) * mag * (1 + 1e-12))
    # numpy's pieces: the same bound, so the two differ by at most twice it
    want = _pieces(x, y, rows, cols, step)
    assert np.all(np.abs(got - want) <= 2 * _chain_bound(k, step) * mag * (1 + 1e-12))


def test_line_products_reads_any_strides_and_widens_float32_exactly(rng):
    """A transposed, a sliced and a complex part's operands give the contiguous ones' values;
    float32 operands give the float64 values of their widened copies, bit for bit."""
    x = rng.standard_normal((50, 200))
    y = rng.standard_normal((200, 90))
    rows, cols = np.array([1, 4, 49]), None
    want = _amx.line_products(x, y, rows, cols, 32)
    xt = np.asfortranarray(x)
    yc = (y + 1j * rng.standard_normal(y.shape)).real  # stride 16
    np.testing.assert_array_equal(_amx.line_products(xt, yc, rows, cols, 32), want)
    cols = np.array([0, 89, 5])
    want = _amx.line_products(x, y, None, cols, 32)
    np.testing.assert_array_equal(_amx.line_products(xt, yc, None, cols, 32), want)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    np.testing.assert_array_equal(
        _amx.line_products(x32, y32, rows, None, 32),
        _amx.line_products(x32.astype(np.float64), y32.astype(np.float64), rows, None, 32),
    )


def test_line_products_propagates_nan_and_inf(rng):
    x = rng.standard_normal((6, 40))
    y = rng.standard_normal((40, 50))
    x[2, 7], y[9, 30] = np.inf, np.nan
    got = _amx.line_products(x, y, np.array([1, 2]), None, 8)
    want = x[[1, 2]] @ y
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_line_products_rejects_bad_input(rng):
    x, y = rng.standard_normal((5, 8)), rng.standard_normal((8, 6))
    with pytest.raises(ValueError, match="out of range"):
        _amx.line_products(x, y, np.array([5]), None, 4)
    with pytest.raises(ValueError, match="out of range"):
        _amx.line_products(x, y, None, np.array([-1]), 4)
    with pytest.raises(ValueError, match="shape"):
        _amx.line_products(x, y.T, np.array([0]), None, 4)
    with pytest.raises(ValueError, match="both float64 or both float32"):
        _amx.line_products(x, y.astype(np.float32), np.array([0]), None, 4)
    with pytest.raises(ValueError, match="integers"):
        _amx.line_products(x, y, np.array([1.7]), None, 4)
    with pytest.raises(ValueError, match="integers"):
        _amx.line_products(x, y, None, np.array([True, False]), 4)
    with pytest.raises(ValueError, match="step"):
        _amx.line_products(x, y, np.array([0]), None, 0)
    assert _amx.line_products(x, y, np.array([], dtype=np.int64), None, 4).shape == (0, 6)
    z = _amx.line_products(np.zeros((3, 0)), np.zeros((0, 4)), np.array([1]), None, 4)
    np.testing.assert_array_equal(z, np.zeros((1, 4)))


def test_backend_hook_declines_what_it_does_not_take(rng):
    """The amx backend's ``line_products`` passes what the kernel takes and returns None for the
    rest (the engine then multiplies piece by piece)."""
    x, y = rng.standard_normal((100, 30)), rng.standard_normal((30, 100))
    got = amx_backend.line_products(x, y, [3, 4], None, 8)
    np.testing.assert_array_equal(got, _amx.line_products(x, y, np.array([3, 4]), None, 8))
    assert amx_backend.line_products(x, y.astype(np.float32), [3], None, 8) is None
    assert amx_backend.line_products(x, y, None, None, 8) is None  # no thin side
    assert amx_backend.line_products(x, y, [-1], None, 8) is None  # numpy's negative indices
    assert amx_backend.line_products(x[None], y, [3], None, 8) is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_engine_line_patch_takes_thin_lines_in_one_call(monkeypatch, dtype):
    """``_engine._native_lines`` on the amx backend: the patch's rows, columns and a thin block
    each in one ``line_products`` call per real product (complex: the four of a complex GEMM),
    a block of at least LINE_K_MIN lines each way through the GEMMs; every patched entry
    within the pieces' bound of the exact product."""
    import array_api_compat.numpy as xp

    from emulinalg import _engine
    from emulinalg.algorithm import refinement
    from emulinalg.inputs import phi_matrix

    k = 700
    a, b = phi_matrix((90, k), 1.0, seed=3), phi_matrix((k, 80), 1.0, seed=4)
    cplx = np.dtype(dtype).kind == "c"
    if cplx:
        a = a - 0.5j * phi_matrix((90, k), 1.0, seed=5)
        b = b + 2j * phi_matrix((k, 80), 1.0, seed=6)
    a, b = a.astype(dtype), b.astype(dtype)
    (ar, ai), (br, bi) = ((x.real, x.imag) if cplx else (x, None) for x in (a, b))
    step = _engine.line_step(k)
    a64, b64 = (x.astype(np.complex128 if cplx else np.float64) for x in (a, b))
    hi, lo = exact_matmul(a64, b64)
    mag = np.abs(a64.real) @ np.abs(b64.real) + np.abs(a64.imag) @ np.abs(b64.imag)
    mag = mag + np.abs(a64.real) @ np.abs(b64.imag) + np.abs(a64.imag) @ np.abs(b64.real)
    tol = 2 * _chain_bound(k, step) * mag  # two products per part, then their sum
    real = amx_backend.line_products
    for block in [(np.arange(2, 90, 2), np.arange(1, 80, 2)), (np.array([7]), np.arange(0, 80, 3))]:
        calls = []

        def spy(x, y, rows, cols, s, calls=calls):
            calls.append((rows is None, cols is None, s))
            return real(x, y, rows, cols, s)

        monkeypatch.setattr(amx_backend, "line_products", spy)
        lines = refinement.LinePatch(np.array([0, 5]), np.array([3]), block, np.zeros(0, np.int64))
        got = tuple(np.zeros((90, 80)) for _ in range(2 if cplx else 1))
        _engine._native_lines(xp, amx_backend, ar, ai, br, bi, got, lines, None)
        thin = min(map(len, block)) < _engine.LINE_K_MIN
        assert len(calls) == (4 if cplx else 1) * (3 if thin else 2)
        assert all(s == step for *_, s in calls)
        c = got[0] + 1j * got[1] if cplx else got[0]
        for at in ((lines.rows, slice(None)), (slice(None), lines.cols), np.ix_(*block)):
            err = np.abs(c[at] - hi[at] - lo[at])
            assert np.all(err <= tol[at] * (1 + 1e-12))
