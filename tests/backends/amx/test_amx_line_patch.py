"""The amx backend's certificate takes the native form's line patch (``refinement.line_patch``)
as the generic one does: its C++ refinement step reports up to ``fails_limit`` failing entries,
and the level through the amx backend (the tile model, and AMX where present) takes the numpy
backend's count and lines, whose entries are the native product's."""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import AMX_AVAILABLE, _amx, force_amx_backend
from _helpers import level_lines, line_patch_case

from emulinalg._engine import line_step

pytestmark = [
    pytest.mark.skipif(
        _amx is None, reason="emulinalg._amx is not built (not x86-64, or no C++ compiler)"
    ),
    pytest.mark.usefixtures("host_loops"),
]


def _level(monkeypatch, a, b, emulate):
    return level_lines(
        monkeypatch, a, b, None if emulate is None else lambda mp: force_amx_backend(mp, emulate)
    )


@pytest.mark.parametrize("emulate", [True, pytest.param(False, marks=pytest.mark.amx)])
@pytest.mark.parametrize("name", ["float64", "float32"])
def test_amx_level_takes_the_generic_lines(name, emulate, monkeypatch):
    if not emulate and not AMX_AVAILABLE:
        pytest.skip("no AMX tiles on this CPU")
    a, b = line_patch_case(name)
    c, plan, lines = _level(monkeypatch, a, b, emulate)
    want, want_plan, want_lines = _level(monkeypatch, a, b, None)
    assert plan.backend == "amx" and want_plan.backend == "numpy"
    assert plan.scheme == want_plan.scheme
    assert lines.rows.tolist() == want_lines.rows.tolist()
    assert lines.cols.tolist() == want_lines.cols.tolist()
    assert (lines.block is None) == (want_lines.block is None)
    if lines.block is not None:
        assert all(np.array_equal(x, y) for x, y in zip(lines.block, want_lines.block))
    # both from float64 products by pieces of K (the amx backend's in one call,
    # ``line_products``, another order of the same sums): within twice the pieces' bound
    k, rows = a.shape[1], lines.rows
    step = line_step(k)
    depth = step + -(-k // step) + 1
    mag = np.abs(a[rows]).astype(np.float64) @ np.abs(b).astype(np.float64)
    tol = 2 * depth * 2.0**-53 * mag
    if name == "float32":  # each rounded once to float32 after
        tol = tol + 2.0**-23 * np.abs(want[rows].astype(np.float64))
    assert np.all(np.abs(c[rows].astype(np.float64) - want[rows]) <= tol)
    assert np.array_equal(lines.entries, want_lines.entries)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["C", "F", "T"])
def test_take_columns_is_numpys_take_widened(dtype, layout, rng):
    """``emulinalg._amx.take_columns`` (OpenMP over rows) gives numpy's ``take`` along axis 1,
    widened to float64, for any whole-element strides; bad columns and dtypes raise."""
    x = rng.standard_normal((70, 45)).astype(dtype)
    x[3, 4], x[5, 6] = np.inf, np.nan
    if layout == "F":
        x = np.asfortranarray(x)
    elif layout == "T":
        x = np.ascontiguousarray(x.T).T[2:60]  # a strided piece of a transposed array
    cols = np.array([44, 0, 6, 6, 3, 17, 4])  # the Inf (3, 4) and the NaN (5, 6) among them
    got = _amx.take_columns(x, cols)
    assert got.dtype == np.float64 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.take(x, cols, axis=1).astype(np.float64))
    assert _amx.take_columns(x, cols[:0]).shape == (x.shape[0], 0)
    with pytest.raises(ValueError, match="out of range"):
        _amx.take_columns(x, np.array([0, 45]))
    with pytest.raises(ValueError, match="out of range"):
        _amx.take_columns(x, np.array([-1]))
    with pytest.raises(ValueError, match="float64 or float32"):
        _amx.take_columns(np.zeros((4, 45), np.int32), cols)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("order", ["C", "F"])
def test_line_patch_block_columns_gathered_by_the_backend(monkeypatch, dtype, order):
    """The line patch's block on the amx backend gathers B's columns with ``take_columns`` and
    writes the numpy backend's values bit for bit (float32 parts widened, complex parts, B in
    either memory order); indices numpy's take would treat otherwise are left to numpy. (The
    backend's ``line_products``, which takes the patch's row and column in one call each, is
    declined here: its sums run in another order; the block is its GEMMs' either way.)"""
    import array_api_compat.numpy as xp

    from emulinalg import _engine
    from emulinalg.algorithm import refinement
    from emulinalg.backends import amx as amx_backend
    from emulinalg.backends import numpy as npb
    from emulinalg.inputs import phi_matrix

    k = 700
    a, b = phi_matrix((90, k), 1.0, seed=3), phi_matrix((k, 80), 1.0, seed=4)
    cplx = np.dtype(dtype).kind == "c"
    if cplx:
        a = a - 0.5j * phi_matrix((90, k), 1.0, seed=5)
        b = b + 2j * phi_matrix((k, 80), 1.0, seed=6)
    a, b = a.astype(dtype), np.asarray(b.astype(dtype), order=order)
    (ar, ai), (br, bi) = ((x.real, x.imag) if cplx else (x, None) for x in (a, b))
    rows, cols = np.arange(2, 90, 2), np.arange(1, 80, 2)  # 44 x 40: a block
    lines = refinement.LinePatch(np.array([0]), np.array([3]), (rows, cols), np.zeros(0, np.int64))
    calls = []
    real = amx_backend.take_columns

    def spy(x, idx):
        calls.append((x.shape, len(idx)))
        return real(x, idx)

    monkeypatch.setattr(amx_backend, "take_columns", spy)
    monkeypatch.setattr(amx_backend, "line_products", lambda *args: None)
    got = tuple(np.zeros((90, 80)) for _ in range(2 if cplx else 1))
    want = tuple(np.zeros((90, 80)) for _ in got)
    _engine._native_lines(xp, amx_backend, ar, ai, br, bi, got, lines, None)
    _engine._native_lines(xp, npb, ar, ai, br, bi, want, lines, None)
    assert calls and all(n == len(cols) for _, n in calls)  # the block's pieces of K
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert g[np.ix_(rows, cols)].all()
    assert real(br, np.array([-1])) is None and real(br, np.array([1.0])) is None
