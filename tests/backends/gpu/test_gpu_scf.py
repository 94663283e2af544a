"""DF-RHF (``emulinalg.examples.scf``) on cupy arrays: the default float64 level within 1e-9 Eh
of cupy's native products, J/K against PySCF's, the demo driver with ``asarray=cupy.asarray``
(issue #28). Runs only where cupy sees a CUDA GPU and PySCF is installed (the GPU machine gets
a trimmed wheel: ``docs/benchmarks/tools/trim_pyscf_wheel.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from _gpu_helpers import require_gpu

import emulinalg

cp = require_gpu()
pytest.importorskip("pyscf", reason="the SCF example needs PySCF")

from emulinalg.examples import molecules, scf, scf_demo  # noqa: E402

pytestmark = pytest.mark.gpu
HARTREE_TOL = 1e-9


@pytest.fixture(scope="module")
def water():
    return molecules.integrals("water", "cc-pvdz")


def on_gpu(ints):
    return [cp.asarray(x) for x in (ints.hcore, ints.overlap, ints.cderi, ints.dm0)]


def test_scf_on_cupy_arrays_matches_native(water, eager):
    h, s, L, dm0 = on_gpu(water)
    native = scf.rhf(h, s, L, water.nocc, water.e_nuc, dm0=dm0, precision="native")
    res = scf.rhf(h, s, L, water.nocc, water.e_nuc, dm0=dm0)
    assert native.converged and res.converged
    assert isinstance(res.density, cp.ndarray) and isinstance(res.mo_coeff, cp.ndarray)
    assert abs(res.energy - native.energy) <= HARTREE_TOL, (res.energy, native.energy)
    assert abs(native.energy - molecules.pyscf_energy(water)) <= HARTREE_TOL
    for name in ("rho", "J", "half_transform", "K", "FD", "orthogonal_fock", "density"):
        plan = res.plans[name]
        assert plan.backend == "cupy" and plan.scheme.startswith("OzakiII"), (name, plan)
    # the molecule's mirror zeros (J: 2 * 6 * 18 of its 576 entries) split the contraction
    # index instead of coming from the native product (none left on numpy)
    assert res.plans["J"].native_entries == 0
    assert res.native_entries <= 0.01 * res.entries
    assert any("symmetry zeros" in str(p) for p in res.plans.values())


def test_coulomb_and_exchange_on_cupy_match_pyscf(water, eager):
    from pyscf import scf as pyscf_scf

    mf = pyscf_scf.RHF(water.mol).density_fit(auxbasis=water.auxbasis)
    j_ref, k_ref = mf.get_jk(water.mol, water.dm0)
    L, dm0 = cp.asarray(water.cderi), cp.asarray(water.dm0)
    product = scf._Recorder(emulinalg.namespace(L))
    j = scf.coulomb(product, L, dm0)
    k = scf.exchange_from_density(product, L, dm0)
    assert product.plans["K"].emulated and product.plans["K"].backend == "cupy"
    np.testing.assert_allclose(cp.asnumpy(j), j_ref, rtol=0, atol=1e-11)
    np.testing.assert_allclose(cp.asnumpy(k), k_ref, rtol=0, atol=1e-11)


def test_demo_driver_runs_on_cupy():
    records = scf_demo.run(["water"], ["OzakiII(moduli=14, mode=accurate)"], asarray=cp.asarray)
    assert [r["precision"] for r in records] == ["native", "OzakiII(moduli=14, mode=accurate)"]
    for r in records:
        assert r["backend"] == "cupy" and r["converged"]
        assert r["abs_diff_hartree"] <= HARTREE_TOL
        assert "CPU" not in r["device"]  # the GPU's name
    assert records[1]["native_entry_fraction"] == 0 and records[0]["native_entry_fraction"] == 1
