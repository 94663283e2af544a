"""Prepared dask operands: the chunks copied and persisted once; the products' results are
bit-identical to the unprepared ones, and a product that would rechunk the prepared operand
along K is refused."""

from __future__ import annotations

import numpy as np
import pytest

import emulinalg
from emulinalg import OzakiII
from emulinalg.inputs import phi_matrix

da = pytest.importorskip("dask.array", reason="dask is not installed")


@pytest.mark.parametrize("precision", [OzakiII(moduli=14), None], ids=str)
def test_prepared_dask_bit_identical(eager, sync, precision):
    a_np = phi_matrix((40, 96), 1, seed=1)
    b_np = phi_matrix((96, 24), 1, seed=2)
    a, b = da.from_array(a_np, chunks=(20, 48)), da.from_array(b_np, chunks=(48, 12))
    want = emulinalg.matmul(a, b, precision=precision).compute()
    p = emulinalg.prepare(a, precision=precision)
    a_np[:] = 0.0  # from_array reads the caller's array: the prepared chunks are copies
    assert p.backend == "dask"
    for _ in range(2):
        got, plan = emulinalg.matmul(p, b, precision=precision, explain=True)
        np.testing.assert_array_equal(got.compute(), want, strict=True)
    assert "prepared x1: reused its persisted chunks" in plan.notes
    in_core = emulinalg.matmul(phi_matrix((40, 96), 1, seed=1), b_np, precision=precision)
    if isinstance(precision, OzakiII):  # the shared graph's emulated entries: the in-core bits
        np.testing.assert_array_equal(want, in_core)


def test_prepared_dask_operator_and_default_precision(eager, sync):
    """``a @ p`` with a dask ``a`` is emulinalg.matmul, at the precision ``p`` was prepared
    for: the same bits as asking for it."""
    a = da.from_array(phi_matrix((40, 96), 1, seed=3), chunks=(20, 48))
    b = da.from_array(phi_matrix((96, 24), 1, seed=4), chunks=(48, 12))
    want = emulinalg.matmul(a, b, precision=OzakiII(moduli=14)).compute()
    q = emulinalg.prepare(b, precision=OzakiII(moduli=14))
    got = a @ q
    assert isinstance(got, da.Array)
    np.testing.assert_array_equal(got.compute(), want, strict=True)


def test_prepared_dask_refuses_rechunking_along_k(eager, sync):
    a = da.from_array(phi_matrix((40, 96), 1, seed=3), chunks=(20, 24))
    b = da.from_array(phi_matrix((96, 24), 1, seed=4), chunks=(48, 12))
    p = emulinalg.prepare(a)
    with pytest.raises(ValueError, match="prepared with contraction chunks"):
        emulinalg.matmul(p, b)  # a's 4 K-blocks would become b's 2
    got = emulinalg.matmul(p, b.rechunk((24, 12))).compute()
    np.testing.assert_array_equal(got, emulinalg.matmul(a, b.rechunk((24, 12))).compute())
    with pytest.raises(ValueError, match="backend"):  # a numpy operand beside a dask one
        emulinalg.matmul(emulinalg.prepare(phi_matrix((8, 96), 1, seed=5)), b)
