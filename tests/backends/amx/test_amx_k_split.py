"""Symmetry zeros on the amx backend (tile model and AMX): the contraction index's classes run
as the backend's own products, with no native entries, as accurate as numpy's product against
the exact one, and bit-identical to the numpy backend's split."""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import matmul_amx_and_numpy

import emulinalg
from emulinalg.reference import accuracy, exact_matmul


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_symmetry_zeros_on_amx(eager, backend, monkeypatch, dtype):
    rng = np.random.default_rng(9)
    parity = [rng.integers(0, 2, size) for size in (33, 90, 27)]

    def make(rows, cols):
        x = rng.standard_normal((rows.shape[0], cols.shape[0]))
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(x.shape)
        return np.where(rows[:, None] != cols[None, :], x * 2.0**-52, x).astype(dtype)

    a, b = make(parity[0], parity[1]), make(parity[1], parity[2])
    got, plan = emulinalg.matmul(a, b, explain=True)
    assert plan.backend == "amx" and plan.native_entries == 0, plan
    assert "symmetry zeros" in str(plan)
    ref = exact_matmul(a, b)
    acc, native = accuracy(got, a, b, ref), accuracy(a @ b, a, b, ref)
    for name in ("bits_maxrel", "bits_cw"):
        assert acc[name] >= native[name], (name, acc[name], native[name])
    amx_c, numpy_c = matmul_amx_and_numpy(monkeypatch, a, b, None)
    np.testing.assert_array_equal(amx_c, numpy_c)
