"""Prepared operands on the amx backend (tile model and AMX): its kernels compute the statistics
and the whole Scheme II product, so a prepared operand reuses its float64 parts (its NaN/Inf
check is the line scan's, per product, as on cupy), and the results are bit-identical to the
unprepared product and to the numpy backend's."""

from __future__ import annotations

import numpy as np
import pytest
from _amx_helpers import matmul_amx_and_numpy

import emulinalg
from emulinalg import OzakiII
from emulinalg.inputs import phi_matrix


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("precision", [OzakiII(moduli=14), None], ids=str)
def test_prepared_on_amx_bit_identical(eager, backend, monkeypatch, dtype, precision):
    a = phi_matrix((21, 70), 1, dtype=dtype, seed=3)
    b = phi_matrix((70, 13), 1, dtype=dtype, seed=4)
    want = emulinalg.matmul(a, b, precision=precision)
    p = emulinalg.prepare(b, precision=precision)
    assert p.backend == "amx"
    for _ in range(2):
        got, plan = emulinalg.matmul(a, p, precision=precision, explain=True)
        assert plan.backend == "amx"
        np.testing.assert_array_equal(got, want, strict=True)
    assert plan.notes[-1].startswith("prepared x2 (B): reused float64 parts")
    got, numpy_want = matmul_amx_and_numpy(monkeypatch, a, b, precision)
    np.testing.assert_array_equal(want, numpy_want)
    with pytest.raises(ValueError, match="prepared for backend amx"):  # now on numpy's
        emulinalg.matmul(a, p, precision=precision)
