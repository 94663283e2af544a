"""Built-in molecules and their integrals from PySCF (``pip install ".[scf]"``).

PySCF supplies what the example does not compute itself: the one-electron integrals, the
Cholesky-decomposed density-fitting tensor, the nuclear repulsion, the MINAO initial guess and,
for comparison, its own DF-RHF energy. All arrays are numpy float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulinalg import _extras

# Geometries in Ångström. Water: the experimental equilibrium (r = 0.9578 Å, 104.5°); benzene:
# D6h with C-C 1.396 Å and C-H 1.083 Å. Naphthalene and anthracene (bigger systems for the GPU,
# 412 and 560 basis functions in cc-pVTZ): benzene's regular hexagons fused along x, D2h, every
# C-C 1.396 Å and C-H 1.083 Å (idealized, not the equilibrium geometries).
GEOMETRIES = {
    "water": "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692",
    "benzene": (
        "C 0 1.396 0; C 1.209 0.698 0; C 1.209 -0.698 0; "
        "C 0 -1.396 0; C -1.209 -0.698 0; C -1.209 0.698 0; "
        "H 0 2.479 0; H 2.147 1.240 0; H 2.147 -1.240 0; "
        "H 0 -2.479 0; H -2.147 -1.240 0; H -2.147 1.240 0"
    ),
    "naphthalene": (
        "C -2.4179 -0.698 0; C -2.4179 0.698 0; C -1.209 -1.396 0; C -1.209 1.396 0; "
        "C 0 -0.698 0; C 0 0.698 0; C 1.209 -1.396 0; C 1.209 1.396 0; "
        "C 2.4179 -0.698 0; C 2.4179 0.698 0; "
        "H -3.3558 -1.2395 0; H -3.3558 1.2395 0; H -1.209 -2.479 0; H -1.209 2.479 0; "
        "H 1.209 -2.479 0; H 1.209 2.479 0; H 3.3558 -1.2395 0; H 3.3558 1.2395 0"
    ),
    "anthracene": (
        "C -3.6269 -0.698 0; C -3.6269 0.698 0; C -2.4179 -1.396 0; C -2.4179 1.396 0; "
        "C -1.209 -0.698 0; C -1.209 0.698 0; C 0 -1.396 0; C 0 1.396 0; "
        "C 1.209 -0.698 0; C 1.209 0.698 0; C 2.4179 -1.396 0; C 2.4179 1.396 0; "
        "C 3.6269 -0.698 0; C 3.6269 0.698 0; "
        "H -4.5648 -1.2395 0; H -4.5648 1.2395 0; H -2.4179 -2.479 0; H -2.4179 2.479 0; "
        "H 0 -2.479 0; H 0 2.479 0; H 2.4179 -2.479 0; H 2.4179 2.479 0; "
        "H 4.5648 -1.2395 0; H 4.5648 1.2395 0"
    ),
}


@dataclass
class Integrals:
    """What :func:`emulinalg.examples.scf.rhf` needs for one molecule and basis.

    Attributes
    ----------
    molecule, basis : str
    auxbasis : str or dict
        The fitting basis (one name for every element, or PySCF's per-element dict).
    hcore, overlap : numpy.ndarray, shape (nao, nao), float64
    cderi : numpy.ndarray, shape (naux, nao, nao), float64
        ``(μν|λσ) ≈ Σ_P cderi[P, μ, ν] cderi[P, λ, σ]``.
    dm0 : numpy.ndarray, shape (nao, nao), float64
        PySCF's MINAO initial density.
    nocc : int
    e_nuc : float
    mol : pyscf.gto.Mole
    """

    molecule: str
    basis: str
    auxbasis: str
    hcore: Any
    overlap: Any
    cderi: Any
    dm0: Any
    nocc: int
    e_nuc: float
    mol: Any

    @property
    def nao(self):
        return self.hcore.shape[0]

    @property
    def naux(self):
        return self.cderi.shape[0]


def _pyscf():
    _extras.require("pyscf", needed_by="emulinalg.examples.molecules")
    from pyscf import df, gto, lib, scf

    return df, gto, lib, scf


def integrals(molecule="water", basis="cc-pvdz", auxbasis=None):
    """Integrals of a built-in molecule (or any geometry string PySCF reads).

    Parameters
    ----------
    molecule : str
        A key of :data:`GEOMETRIES` ("water", "benzene", "naphthalene", "anthracene") or a
        PySCF atom string in Ångström.
    basis : str
        Orbital basis set, e.g. "cc-pvdz", "cc-pvtz".
    auxbasis : str, optional
        Fitting basis; default: PySCF's choice for ``basis`` (the JK-fit set, e.g.
        "cc-pvdz-jkfit"), the same PySCF's own DF-RHF uses.

    Returns
    -------
    Integrals

    Raises
    ------
    ModuleNotFoundError
        Without PySCF; the message is one line naming the extra
        (``... needs pyscf (not installed): pip install ".[scf]"``).
    ValueError
        An odd number of electrons (restricted HF needs a closed shell).
    """
    df, gto, lib, _ = _pyscf()
    atom = GEOMETRIES.get(molecule, molecule)
    mol = gto.M(atom=atom, basis=basis, verbose=0)
    if mol.nelectron % 2:
        raise ValueError(f"{molecule}: {mol.nelectron} electrons; RHF needs a closed shell")
    if auxbasis is None:
        aux = df.make_auxbasis(mol)
        names = sorted(set(aux.values())) if isinstance(aux, dict) else [str(aux)]
        auxbasis = names[0] if len(names) == 1 else aux
    cderi = df.incore.cholesky_eri(mol, auxbasis=auxbasis)
    from pyscf.scf import hf

    return Integrals(
        molecule=molecule if molecule in GEOMETRIES else "custom",
        basis=basis,
        auxbasis=auxbasis,
        hcore=mol.intor_symmetric("int1e_kin") + mol.intor_symmetric("int1e_nuc"),
        overlap=mol.intor_symmetric("int1e_ovlp"),
        cderi=lib.unpack_tril(cderi),
        dm0=hf.init_guess_by_minao(mol),
        nocc=mol.nelectron // 2,
        e_nuc=float(mol.energy_nuc()),
        mol=mol,
    )


def pyscf_energy(ints, conv_tol=1e-12):
    """PySCF's own DF-RHF total energy for the same molecule, basis and fitting basis.

    Parameters
    ----------
    ints : Integrals
    conv_tol : float
        PySCF's energy convergence threshold (its gradient threshold is its default,
        ``sqrt(conv_tol)``).

    Returns
    -------
    float
        Total energy in Hartree.

    Raises
    ------
    RuntimeError
        When PySCF does not converge.
    """
    _, _, _, scf = _pyscf()
    mf = scf.RHF(ints.mol).density_fit(auxbasis=ints.auxbasis)
    mf.conv_tol = conv_tol
    energy = mf.kernel()
    if not mf.converged:
        raise RuntimeError(f"PySCF DF-RHF did not converge for {ints.molecule}/{ints.basis}")
    return float(energy)
