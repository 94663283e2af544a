"""Density-fitted RHF on water/cc-pVDZ (``emulinalg.examples.scf``): energies to 1e-9 Hartree.

References are independent of the code under test: PySCF's own DF-RHF energy and its DF
Coulomb/exchange matrices for the same fitting basis, and the native products on the same
integrals. PySCF comes with the ``test`` extra, so CI runs these.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _helpers import assert_quiet_demo

import emulinalg
import emulinalg.backends

pytest.importorskip("pyscf", reason='the SCF example needs PySCF (pip install ".[scf]")')

from emulinalg.examples import molecules, scf, scf_demo

HARTREE_TOL = 1e-9  # the target: |E_emulated - E_native| <= 1e-9 Eh
# J/K products the certificate of the default level covers with Ozaki Scheme II
MAIN_PRODUCTS = ("rho", "J", "half_transform", "K", "FD", "orthogonal_fock", "density")


@pytest.fixture(scope="module")
def water():
    return molecules.integrals("water", "cc-pvdz")


@pytest.fixture(scope="module")
def pyscf_energy(water):
    return molecules.pyscf_energy(water)


def run_rhf(ints, precision, **kw):
    args = (ints.hcore, ints.overlap, ints.cderi, ints.nocc, ints.e_nuc)
    return scf.rhf(*args, dm0=kw.pop("dm0", ints.dm0), precision=precision, **kw)


@pytest.fixture(scope="module")
def native(water):
    return run_rhf(water, "native")


def test_water_integrals_shapes(water):
    assert (water.nao, water.naux, water.nocc) == (24, 116, 5)
    assert water.cderi.shape == (116, 24, 24)
    # the unpacked DF tensor is symmetric in its orbital pair, as (μν|λσ) is
    np.testing.assert_array_equal(water.cderi, np.swapaxes(water.cderi, 1, 2))


def test_native_energy_equals_pyscf_df_rhf(native, pyscf_energy):
    assert native.converged
    assert abs(native.energy - pyscf_energy) <= HARTREE_TOL, (native.energy, pyscf_energy)
    assert all(not p.emulated for p in native.plans.values())
    assert native.native_entries == native.entries > 0


def test_default_precision_energy_within_1e9_of_native(water, native, eager):
    res = run_rhf(water, None)
    assert res.converged
    assert abs(res.energy - native.energy) <= HARTREE_TOL, (res.energy, native.energy)
    for name in MAIN_PRODUCTS:  # the products really were emulated, at the float64 level
        plan = res.plans[name]
        assert plan.precision == "float64" and plan.scheme.startswith("OzakiII"), (name, plan)
    # the molecule's symmetry zeros (42 % of the entries in one product) split the contraction
    # index instead of coming from the native product
    assert res.native_entries == 0
    assert any("symmetry zeros" in str(p) for p in res.plans.values())


def test_explicit_scheme_energy_within_1e9_of_native(water, native, eager):
    # An explicit scheme has no certificate and no native entries: all of it is emulated.
    res = run_rhf(water, emulinalg.OzakiII(moduli=14))
    assert res.converged and res.native_entries == 0
    assert {p.scheme for p in res.plans.values()} == {"OzakiII(moduli=14, mode=accurate)"}
    assert abs(res.energy - native.energy) <= HARTREE_TOL


def test_float32_level_products_stay_within_microhartree(water, native, eager):
    res = run_rhf(water, "float32")
    assert res.plans["K"].precision == "float32" and res.plans["K"].emulated
    assert abs(res.energy - native.energy) <= 1e-6


def test_coulomb_and_exchange_match_pyscf(water, native, eager):
    """J and K of the guess density (general route) and of the converged orbitals (occupied
    route) against PySCF's DF J/K for the same fitting basis."""
    from pyscf import scf as pyscf_scf

    mf = pyscf_scf.RHF(water.mol).density_fit(auxbasis=water.auxbasis)
    xp = emulinalg.namespace(water.cderi)
    product = scf._Recorder(xp)
    for dm, c_occ in ((water.dm0, None), (native.density, native.mo_coeff[:, : water.nocc])):
        j_ref, k_ref = mf.get_jk(water.mol, dm)
        j = scf.coulomb(product, water.cderi, dm)
        if c_occ is None:
            k = scf.exchange_from_density(product, water.cderi, dm)
        else:
            k = scf.exchange_from_orbitals(product, water.cderi, c_occ)
        np.testing.assert_allclose(j, j_ref, rtol=0, atol=1e-11)
        np.testing.assert_allclose(k, k_ref, rtol=0, atol=1e-11)
        assert product.plans["K"].emulated


def test_core_guess_converges_to_the_same_energy(water, native):
    res = run_rhf(water, "native", dm0=None)
    assert res.converged
    assert abs(res.energy - native.energy) <= HARTREE_TOL


def test_scf_loop_is_plain_array_api(water, native):
    """array_api_strict rejects anything outside the standard: the same SCF runs on its arrays
    (natively: emulinalg has no backend for it) and gives numpy's energy."""
    xs = pytest.importorskip("array_api_strict")
    args = [xs.asarray(x) for x in (water.hcore, water.overlap, water.cderi)]
    res = scf.rhf(*args, water.nocc, water.e_nuc, dm0=xs.asarray(water.dm0))
    assert res.converged and isinstance(res.density, type(args[0]))
    assert abs(res.energy - native.energy) <= 1e-10


def test_orthogonalizer_is_orthonormal_and_drops_linear_dependence():
    xp = emulinalg.namespace(np.ones(1))
    rng = np.random.default_rng(7)
    b = rng.standard_normal((6, 4))
    s = b @ b.T + np.diag([0, 0, 0, 0, 1e-14, 0])  # rank 4 (plus noise below the threshold)
    x = scf.orthogonalizer(xp, s)
    assert x.shape == (6, 4)
    np.testing.assert_allclose(x.T @ s @ x, np.eye(4), atol=1e-10)
    s_full = s + np.eye(6)
    x = scf.orthogonalizer(xp, s_full)
    np.testing.assert_allclose(x.T @ s_full @ x, np.eye(6), atol=1e-12)


def test_rhf_rejects_bad_inputs(water):
    with pytest.raises(ValueError, match="nocc"):
        scf.rhf(water.hcore, water.overlap, water.cderi, 0, precision="native")
    with pytest.raises(ValueError, match="cderi"):
        scf.rhf(water.hcore, water.overlap, water.cderi[:, :5], 5, precision="native")
    with pytest.raises(ValueError, match="overlap"):
        scf.rhf(water.hcore, water.overlap[:5, :5], water.cderi, 5, precision="native")


def test_summarize_schemes():
    def plan(scheme):
        return emulinalg.Plan(backend="numpy", precision="float64", scheme=scheme)

    plans = [plan(f"OzakiII(moduli={n}, mode=accurate)") for n in (18, 16, 20)] + [plan("native")]
    assert scf_demo.summarize_schemes(plans) == "OzakiII(moduli=16..20, mode=accurate); native"
    assert scf_demo.summarize_schemes([plan("OzakiI(slices=7)")]) == "OzakiI(slices=7)"


def test_cli_parses_demo_forms():
    from emulinalg.harness.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["demo", "--size", "8"])
    assert args.workload == "matmul" and args.size == 8  # the matmul demo is unchanged
    args = parser.parse_args(["demo", "scf", "--json", "--molecule", "water/cc-pvtz"])
    assert args.workload == "scf" and args.json and args.molecule == [["water/cc-pvtz"]]
    args = parser.parse_args(["demo", "scf", "--molecule", "benzene", "--basis", "sto-3g"])
    assert args.molecule == [["benzene"]] and args.basis == "sto-3g"


def test_demo_defaults_are_sized_for_a_newcomer():
    """Water in cc-pVDZ by default (benzene on request), and three rows: native, the default
    level and an explicit scheme (no certificate, no native entries); 'all' runs every row."""
    assert scf_demo._parse_molecules(None) == [("water", "cc-pvdz")]
    assert scf_demo._parse_molecules(["benzene", "water/cc-pvtz"], "sto-3g") == [
        ("benzene", "sto-3g"),
        ("water", "cc-pvtz"),
    ]
    shown = scf_demo._selected(None)
    assert [(r.label, r.default) for r in shown] == [
        ("native", False),
        ("float64", True),
        ("OzakiII(moduli=14, mode=accurate)", False),
    ]
    assert scf_demo._selected(["all"]) == scf_demo.rows()
    assert [r.label for r in scf_demo._selected(["float32"])] == ["native", "float32"]
    assert scf_demo.unknown_filters(["all", "OzakiI", "fp64"]) == ["fp64"]


def test_demo_rejects_a_precision_filter_matching_no_row(capsys):
    from emulinalg.harness.cli import main

    assert main(["demo", "scf", "--precision", "fp64"]) == 2
    err = capsys.readouterr().err
    assert "fp64 matches no row" in err and "(or all)" in err


def test_rhf_calls_back_after_every_fock_build(water, native):
    seen = []
    res = run_rhf(water, "native", callback=lambda *a: seen.append(a))
    assert [it for it, _, _ in seen] == list(range(1, res.iterations + 1))
    assert seen[-1][1] == res.energy and seen[-1][2] == res.error


def test_demo_scf_reports_each_step_without_warnings(recwarn, caplog, capfd):
    argv = ["demo", "scf", "--precision", "OzakiII(moduli=12"]
    out, lines = assert_quiet_demo(argv, recwarn, caplog, capfd)
    assert lines[0] == "water/cc-pvdz: integrals and PySCF's DF-RHF energy ..."
    starts = [line for line in lines if line.startswith("water/cc-pvdz (nao=24, naux=116): ")]
    assert [line.split(": ", 1)[1] for line in starts] == [
        "native ...",
        "OzakiII(moduli=12, mode=accurate) ...",
    ]
    results = [line for line in lines if line.startswith("  E = ")]
    assert len(results) == 2 and "the reference" in results[0]
    assert "|E - E_native| = " in results[1] and "0.0% of the products' entries" in results[1]
    assert "|E-E_native|" in out and "Native entries:" not in out  # none to explain


@pytest.mark.slow
def test_demo_scf_default_without_warnings(recwarn, caplog, capfd):
    """The default run in full: the level within 1e-9 Eh of native, with no native entries
    (its products with symmetry zeros split their contraction index) and nothing to explain."""
    out, lines = assert_quiet_demo(["demo", "scf"], recwarn, caplog, capfd)
    results = [line for line in lines if line.startswith("  E = ")]
    assert len(results) == 3
    level = results[1]
    assert float(level.split("|E - E_native| = ")[1].split(" Eh")[0]) <= HARTREE_TOL
    assert float(level.split("x native), ")[1].split("%")[0]) == 0
    assert "Native entries:" not in " ".join(out.split())


def test_cli_demo_scf_json(capsys, native, pyscf_energy):
    from emulinalg.harness.cli import main

    rc = main(["demo", "scf", "--json", "--molecule", "water", "--precision", "OzakiI(slices=7"])
    assert rc == 0
    records = json.loads(capsys.readouterr().out)
    keys = {
        "molecule",
        "basis",
        "precision",
        "backend",
        "energy_hartree",
        "abs_diff_hartree",
        "iterations",
        "seconds",
    }
    assert [r["precision"] for r in records] == ["native", "OzakiI(slices=7)"]
    for r in records:
        assert keys <= r.keys()
        assert (r["molecule"], r["basis"]) == ("water", "cc-pvdz")
        assert r["backend"] == emulinalg.backends.for_namespace(np).name  # numpy, amx on AMX
        assert r["converged"] and r["iterations"] > 1 and r["seconds"] > 0
        assert r["abs_diff_hartree"] <= HARTREE_TOL
        assert r["abs_diff_hartree"] == abs(r["energy_hartree"] - records[0]["energy_hartree"])
    assert abs(records[0]["energy_hartree"] - native.energy) <= 1e-12
    assert abs(records[0]["energy_hartree"] - pyscf_energy) <= HARTREE_TOL
    assert records[1]["schemes"] == "OzakiI(slices=7)"  # emulated: eager is the demo's default


def test_demo_runs_on_another_array_library():
    """scf_demo.run(asarray=...) as for cupy (issue #28), here with array_api_strict arrays
    (no emulation backend: every product native, and counted so)."""
    xs = pytest.importorskip("array_api_strict")
    records = scf_demo.run(["water"], ["OzakiII(moduli=12"], asarray=xs.asarray)
    assert [r["backend"] for r in records] == ["array_api_strict"] * 2
    for r in records:
        assert r["converged"] and r["abs_diff_hartree"] <= 1e-10
        assert r["native_entry_fraction"] == 1.0  # the products' plans carry no GEMM shape
        assert "no emulation" in r["fallbacks_last_build"]["K"]
        assert "CPU" in r["device"]


def test_demo_waits_for_the_arrays_device():
    calls = []

    class Device:
        def synchronize(self):
            calls.append(True)

    class Array:  # array_api_compat.device() of an unknown array is its .device
        device = Device()

    scf_demo.synchronize(Array())
    scf_demo.synchronize(np.ones(2))  # host arrays: nothing to wait for
    assert calls == [True]


def test_built_in_molecules_are_closed_shell_and_planar():
    from pyscf import gto

    sizes = {"water": 58, "benzene": 264, "naphthalene": 412, "anthracene": 560}
    for name, nao in sizes.items():
        mol = gto.M(atom=molecules.GEOMETRIES[name], basis="cc-pvtz", verbose=0)
        assert mol.nelectron % 2 == 0 and mol.nao == nao, name
        assert np.any(np.all(np.abs(mol.atom_coords()) < 1e-12, axis=0)), name  # a plane
        r = np.linalg.norm(mol.atom_coords()[:, None] - mol.atom_coords()[None], axis=-1)
        assert np.min(r + 10 * np.eye(mol.natm)) > 0.9 / 0.529177, name  # no atoms too close
