"""The dask layer through a real ``distributed.LocalCluster`` (two worker processes, one thread
each; one cluster for the module).

Scheme II's shared-preprocessing graph: bits >= the native product of the whole matrices and
the in-core engine's bits, the patch sent to the workers included; Scheme I's and
``EMULINALG_DASK_MODE=dd``'s double-double graph no less accurate than the same scheme on the
whole matrices; the out-of-core example on the cluster.
"""

from __future__ import annotations

import numpy as np
import pytest
from _dask_helpers import CHUNKS, _assert_in_core_bits, _eager, _patch_inputs

import emulinalg
import emulinalg.backends
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
import dask  # noqa: E402

pytestmark = pytest.mark.dask


def _grade(c, A, B):
    got = accuracy(c, A, B)
    nat = accuracy(np.matmul(A, B), A, B)
    return got, nat


@pytest.mark.parametrize(
    "phi",
    [pytest.param(0.5, marks=pytest.mark.slow), 1.0, pytest.param(4.0, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize(
    "dtype",
    [
        "float64",
        pytest.param("float32", marks=pytest.mark.slow),
        pytest.param("complex128", marks=pytest.mark.slow),
    ],
)
def test_in_core_bits_on_a_cluster(client, dtype, phi):
    A = phi_matrix((160, 256), phi, dtype, seed=11)
    B = phi_matrix((256, 96), phi, dtype, seed=12)
    a = da.from_array(A, chunks=(53, 61))  # 5 K-blocks, odd sizes
    b = da.from_array(B, chunks=(61, 37))
    with dask.config.set(split_every=2):  # a three-level tree: combine and aggregate
        c = _eager(emulinalg.matmul, a, b)
    assert "5 K-blocks" in str(emulinalg.last_plan())
    out = client.compute(c).result()
    assert type(out) is np.ndarray and out.dtype == np.dtype(dtype)
    plan = _assert_in_core_bits(out, A, B)
    got, nat = _grade(out, A, B)
    print(
        f"{dtype} phi={phi}: {plan.scheme}, native entries {plan.native_entries}: bits maxrel "
        f"{got['bits_maxrel']:.1f} (native {nat['bits_maxrel']:.1f}), componentwise "
        f"{got['bits_cw']:.1f} ({nat['bits_cw']:.1f})"
    )
    assert got["nonfinite_mismatch"] == 0
    assert got["bits_maxrel"] >= nat["bits_maxrel"]
    assert got["bits_cw"] >= nat["bits_cw"]


@pytest.mark.slow
def test_patch_on_a_cluster(client):
    """The patch (host indices in the decision) travels to the workers: the in-core bits."""
    A, B, precision, chunks = _patch_inputs("float32")
    a, b = da.from_array(A, chunks=chunks[:2]), da.from_array(B, chunks=chunks[1:])
    c = _eager(emulinalg.matmul, a, b, precision=precision)
    _assert_in_core_bits(client.compute(c).result(), A, B, precision=precision)


@pytest.mark.slow
def test_explicit_scheme_on_a_cluster(client):
    # Scheme I runs the double-double graph: blocking it over K must not lose accuracy against
    # the same scheme on the whole matrices (each block is scaled on its own, never coarser).
    scheme = emulinalg.OzakiI(slices=7)
    A = phi_matrix((96, 192), 1.0, "float64", seed=5)
    B = phi_matrix((192, 64), 1.0, "float64", seed=6)
    a, b = da.from_array(A, chunks=(48, 64)), da.from_array(B, chunks=(64, 32))
    c = _eager(emulinalg.matmul, a, b, precision=scheme)
    assert emulinalg.last_plan().scheme == f"blocked: [{CHUNKS}] {scheme}"
    got = accuracy(client.compute(c).result(), A, B)
    whole = accuracy(_eager(emulinalg.matmul, A, B, precision=scheme), A, B)
    assert got["bits_maxrel"] >= whole["bits_maxrel"] - 1
    assert got["bits_cw"] >= whole["bits_cw"] - 1
    # The dd graph for Scheme II too (EMULINALG_DASK_MODE=dd), on the same cluster.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMULINALG_DASK_MODE", "dd")
        c = _eager(emulinalg.matmul, a, b)
    assert "double-double" in str(emulinalg.last_plan())
    got, nat = _grade(client.compute(c).result(), A, B)
    assert got["bits_maxrel"] >= nat["bits_maxrel"] and got["bits_cw"] >= nat["bits_cw"]


@pytest.mark.slow
def test_out_of_core_example_small(client):
    from emulinalg.examples import out_of_core

    res = out_of_core.run(client, m=192, k=256, n=96, chunks=(64, 64, 48), rows=8, progress=False)
    assert "4 K-blocks" in res["plan"] and res["nonfinite_mismatch"] == 0
    assert res["bits_maxrel"] >= res["native_bits_maxrel"]
    assert res["bits_cw"] >= res["native_bits_cw"]
