"""Density-fitted restricted Hartree–Fock with every product through ``emulinalg.namespace``.

The SCF loop is written against the Array API only: ``xp = emulinalg.namespace(...)`` supplies
``xp.tensordot``, ``xp.matmul`` and ``xp.vecdot`` (emulated at ``precision``) and everything else
(``xp.linalg.eigh``, ``xp.linalg.solve``, elementwise functions) from the arrays' own library,
so the same function runs on numpy arrays, cupy arrays, or any Array API library. The integrals
come in as arrays (see :mod:`emulinalg.examples.molecules` for PySCF); nothing here imports a
particular array library.

Density fitting (resolution of the identity): with the Cholesky-decomposed 3-index tensor
``L[P, μ, ν]`` (``(μν|λσ) ≈ Σ_P L[P, μ, ν] L[P, λ, σ]``),

- Coulomb: ``ρ_P = Σ_μν L[P, μ, ν] D[μ, ν]``, ``J = Σ_P ρ_P L[P]`` (two tensordots);
- exchange: ``X[P, μ, i] = Σ_ν L[P, μ, ν] C[ν, i]`` over the occupied orbitals,
  ``K = 2 Σ_Pi X[P, μ, i] X[P, ν, i]`` (two tensordots);
- Fock ``F = h + J - K/2``, energy ``E = ½ Σ D (h + F) + E_nuc``;
- Roothaan–Hall ``F C = S C ε`` through the canonical orthogonalizer ``X = U s^-1/2`` of the
  overlap (``xp.linalg.eigh`` of S, then of ``Xᵀ F X``), density ``D = 2 C_occ C_occᵀ``;
- DIIS (Pulay) on the orthogonal-basis commutator ``Xᵀ (F D S - S D F) X``.

The DF tensor takes part in three products of every Fock build (ρ, J and the half transform)
and does not change: it is prepared once (``emulinalg.prepare``), which keeps the work that
depends on it alone between builds; the results are bit-identical to the unprepared products.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import array_api_compat

import emulinalg

# Eigenvalues of the overlap below this (relative to the largest) are dropped by the canonical
# orthogonalizer: near-linear dependence would otherwise amplify rounding by 1/sqrt(s).
LINDEP = 1e-9


@dataclass
class SCFResult:
    """The outcome of :func:`rhf`.

    Attributes
    ----------
    energy : float
        Total energy (electronic + nuclear repulsion) in Hartree, evaluated with the last density
        and its own Fock matrix.
    converged : bool
        Whether both criteria of :func:`rhf` were met within ``max_cycle`` Fock builds.
    iterations : int
        Number of Fock builds.
    mo_energy : array, shape (nmo,)
    mo_coeff : array, shape (nao, nmo)
    density : array, shape (nao, nao)
        Arrays of the input library (nmo <= nao: the orthogonalizer drops linear dependencies).
    error : float
        Largest entry of the last orthogonal-basis commutator ``Xᵀ(FDS - SDF)X``.
    plans : dict of str to emulinalg.Plan
        The plan of each named product of the last Fock build (``"rho"``, ``"J"``,
        ``"half_transform"``, ``"K"``, ``"energy"``, ``"FDS"``, ``"orthogonal_fock"``,
        ``"mo_coeff"``, ``"density"``, ``"diis"``, ...): which scheme ran and any native
        fallback.
    entries, native_entries : int
        Output entries of all products of the run, and how many of them were computed by the
        native product (all of them for ``precision="native"``; for a level, the entries its
        certificate could not cover, see ``emulinalg.Plan.native_entries``).
    """

    energy: float
    converged: bool
    iterations: int
    mo_energy: Any
    mo_coeff: Any
    density: Any
    error: float
    plans: dict = field(default_factory=dict)
    entries: int = 0
    native_entries: int = 0


class _Recorder:
    """Calls the namespace's products and keeps the plan each one reports."""

    def __init__(self, xp):
        self.xp = xp
        self.plans = {}

        self.entries = 0  # output entries of all products of the run...
        self.native_entries = 0  # ...and how many of them the native product supplied

    def __call__(self, name, op, *args, **kw):
        out = getattr(self.xp, op)(*args, **kw)
        plan = emulinalg.last_plan()
        self.plans[name] = plan
        if plan is None:
            entries = 0
        elif plan.shape:
            entries = math.prod(plan.shape[:3])
        else:  # a plan without the GEMM's shape (a library without an emulation backend)
            entries = math.prod(getattr(out, "shape", ()))
        self.entries += entries
        if plan is not None:
            self.native_entries += entries if not plan.emulated else plan.native_entries
        return out


def orthogonalizer(xp, s, lindep=LINDEP):
    """Canonical orthogonalizer ``X = U s^-1/2`` of the overlap, ``Xᵀ S X = 1``.

    Parameters
    ----------
    xp : Array API namespace (e.g. ``emulinalg.namespace(s)``)
    s : array, shape (nao, nao), real floating
        Symmetric positive (semi)definite overlap matrix.
    lindep : float
        Eigenvalues of ``s`` below ``lindep * max(eigenvalue)`` are dropped.

    Returns
    -------
    array, shape (nao, nmo)
        nmo = nao minus the dropped directions.

    Raises
    ------
    ValueError
        When ``s`` has no eigenvalue above the threshold.
    """
    w, u = xp.linalg.eigh(s)
    # eigh sorts ascending, so the dropped directions are a leading block (no boolean indexing)
    drop = int(xp.sum(xp.astype(w < lindep * float(w[-1]), xp.int32)))
    if drop == w.shape[0]:
        raise ValueError("overlap matrix has no eigenvalue above the linear-dependence threshold")
    return u[:, drop:] / xp.sqrt(w[drop:])


class DIIS:
    """Pulay's direct inversion in the iterative subspace, in Array API terms.

    Parameters
    ----------
    xp : Array API namespace
        Its ``matmul`` (emulated in an ``emulinalg`` namespace) builds the error overlap matrix;
        ``xp.linalg.solve`` solves the bordered system.
    space : int
        Number of (Fock, error) pairs kept.
    recorder : callable, optional
        ``recorder(name, op, *args, **kw)`` calls ``getattr(xp, op)`` and keeps its plan
        (:func:`rhf` passes its own, so the DIIS products appear in ``SCFResult.plans``).

    Notes
    -----
    P. Pulay, Chem. Phys. Lett. 73, 393 (1980); J. Comput. Chem. 3, 556 (1982).
    """

    def __init__(self, xp, space=8, recorder=None):
        self.xp = xp
        self.space = space
        self.focks = []
        self.errors = []
        self.product = recorder or _Recorder(xp)

    def extrapolate(self, fock, error):
        """Store ``(fock, error)`` and return the extrapolated Fock matrix (same shape)."""
        xp = self.xp
        self.focks = (self.focks + [fock])[-self.space :]
        self.errors = (self.errors + [xp.reshape(error, (-1,))])[-self.space :]
        n = len(self.errors)
        if n == 1:
            return fock
        e = xp.stack(self.errors)
        b = self.product("diis", "matmul", e, xp.matrix_transpose(e))
        # Scaling B leaves the coefficients unchanged and keeps the solve well scaled when the
        # errors are tiny near convergence.
        scale = float(xp.max(xp.abs(b)))
        if scale == 0.0:  # every stored error is exactly zero: nothing to extrapolate
            return fock
        b = b / scale
        dev = array_api_compat.device(fock)
        ones = xp.ones((n, 1), dtype=b.dtype, device=dev)
        zero = xp.zeros((1, 1), dtype=b.dtype, device=dev)
        lhs = xp.concat(
            [xp.concat([b, -ones], axis=1), xp.concat([-xp.matrix_transpose(ones), zero], axis=1)],
            axis=0,
        )
        rhs = xp.concat([xp.zeros((n,), dtype=b.dtype, device=dev), -ones[0, :]])
        c = xp.linalg.solve(lhs, rhs)[:n]
        return self.product("diis_extrapolate", "tensordot", c, xp.stack(self.focks), axes=1)


def coulomb(product, cderi, dm):
    """``J[μ, ν] = Σ_P L[P, μ, ν] Σ_λσ L[P, λ, σ] D[λ, σ]`` (two tensordots)."""
    rho = product("rho", "tensordot", cderi, dm, axes=2)
    return product("J", "tensordot", rho, cderi, axes=1)


def exchange_from_orbitals(product, cderi, c_occ):
    """``K = 2 Σ_Pi X[P, μ, i] X[P, ν, i]``, ``X = L C_occ`` (for ``D = 2 C_occ C_occᵀ``)."""
    x = product("half_transform", "tensordot", cderi, c_occ, axes=([2], [0]))
    return 2.0 * product("K", "tensordot", x, x, axes=([0, 2], [0, 2]))


def exchange_from_density(product, cderi, dm):
    """``K[μ, ν] = Σ_P Σ_λσ L[P, μ, λ] D[λ, σ] L[P, σ, ν]`` for any density (initial guess)."""
    x = product("half_transform", "tensordot", cderi, dm, axes=([2], [0]))
    return product("K", "tensordot", x, cderi, axes=([0, 2], [0, 1]))


def prepared(cderi, precision):
    """The DF tensor prepared once for every product of the SCF (``emulinalg.prepare``: its
    one-sided work, e.g. its scaling statistics and residues, is kept between Fock builds), or
    as it is where the products run natively: ``precision="native"`` (ValueError; namespace()
    has validated the precision already) or a library without an emulation backend
    (TypeError; the dtypes are checked by the products)."""
    try:
        return emulinalg.prepare(cderi, precision=precision)
    except (ValueError, TypeError):
        return cderi


def rhf(
    hcore,
    overlap,
    cderi,
    nocc,
    e_nuc=0.0,
    *,
    dm0=None,
    precision=None,
    conv_tol=1e-10,
    conv_tol_grad=1e-7,
    max_cycle=100,
    diis_space=8,
    callback=None,
):
    """Restricted Hartree–Fock with density fitting; all products emulated at ``precision``.

    Parameters
    ----------
    hcore : array, shape (nao, nao), float64 (or float32)
        Core Hamiltonian (kinetic + nuclear attraction) in the AO basis.
    overlap : array, shape (nao, nao)
        AO overlap matrix S.
    cderi : array, shape (naux, nao, nao)
        Cholesky-decomposed DF tensor L, ``(μν|λσ) ≈ Σ_P L[P, μ, ν] L[P, λ, σ]``.
    nocc : int
        Number of doubly occupied orbitals (electrons / 2).
    e_nuc : float
        Nuclear repulsion energy, added to the electronic energy.
    dm0 : array, shape (nao, nao), optional
        Initial density matrix (e.g. PySCF's MINAO guess); default: the core-Hamiltonian guess.
    precision : see :func:`emulinalg.matmul`
        Precision of every product (``None``: the level of the arrays' dtype, ``"native"``: the
        library's own products). On the numpy reference backend the default
        ``emulinalg.config(strategy="performant")`` runs products natively; run inside
        ``emulinalg.config(strategy="eager")`` to emulate them.
    conv_tol : float
        Converged when the energy changes by less than this (Hartree) between Fock builds...
    conv_tol_grad : float
        ...and the largest entry of the orthogonal-basis commutator is below this.
    max_cycle : int
        Maximum number of Fock builds.
    diis_space : int
        DIIS subspace size (0 disables DIIS).
    callback : callable, optional
        Called after each Fock build as ``callback(iteration, energy, error)``: the build's
        number (from 1), its total energy in Hartree and the largest entry of its
        orthogonal-basis commutator (e.g. to show progress).

    Returns
    -------
    SCFResult
        Energy, convergence flag, iterations, orbitals, density and the products' plans. Arrays
        belong to the input library and device.

    Raises
    ------
    ValueError
        Mismatched shapes, ``nocc`` out of range, or a singular overlap matrix.
    TypeError
        Arrays of different libraries (from :func:`emulinalg.namespace`).

    Notes
    -----
    Roothaan–Hall SCF with canonical orthogonalization (Szabo and Ostlund, *Modern Quantum
    Chemistry*, §3.4) and density-fitted J/K (Weigend, PCCP 4, 4285 (2002)); the emulated
    products are the Ozaki schemes (Ozaki, Uchino, Imamura, arXiv:2504.08009; Ozaki, Ogita,
    Oishi, Rump 2012). Reduced precision in SCF: Dawson, Ozaki et al., JCTC 2024.
    """
    xp = emulinalg.namespace(hcore, overlap, cderi, precision=precision)
    nao = hcore.shape[0]
    if hcore.shape != (nao, nao) or overlap.shape != (nao, nao):
        raise ValueError(f"hcore {hcore.shape} and overlap {overlap.shape} must be (nao, nao)")
    if cderi.ndim != 3 or cderi.shape[1:] != (nao, nao):
        raise ValueError(f"cderi must have shape (naux, {nao}, {nao}), got {cderi.shape}")
    product = _Recorder(xp)
    cderi = prepared(cderi, precision)
    mt = xp.matrix_transpose
    x = orthogonalizer(xp, overlap)
    if not 0 < nocc <= x.shape[1]:
        raise ValueError(f"nocc={nocc} must be in [1, {x.shape[1]}] (the number of orbitals)")

    def diagonalize(fock):
        f_orth = product("orthogonal_fock", "matmul", mt(x), product("XF", "matmul", fock, x))
        eps, c_orth = xp.linalg.eigh((f_orth + mt(f_orth)) / 2)
        c = product("mo_coeff", "matmul", x, c_orth)
        c_occ = c[:, :nocc]
        return eps, c, c_occ, 2.0 * product("density", "matmul", c_occ, mt(c_occ))

    if dm0 is None:
        eps, c, c_occ, dm = diagonalize(hcore)
    else:
        eps, c, c_occ, dm = None, None, None, dm0
    diis = DIIS(xp, diis_space, product) if diis_space else None
    energy_old, energy, err = math.inf, math.nan, math.inf
    for it in range(1, max_cycle + 1):
        j = coulomb(product, cderi, dm)
        if c_occ is None:  # a guess density need not come from orbitals
            k = exchange_from_density(product, cderi, dm)
        else:
            k = exchange_from_orbitals(product, cderi, c_occ)
        fock = hcore + j - 0.5 * k
        fock = (fock + mt(fock)) / 2  # the products need not return exactly symmetric matrices
        e_elec = product("energy", "vecdot", xp.reshape(dm, (-1,)), xp.reshape(hcore + fock, (-1,)))
        energy = 0.5 * float(e_elec) + e_nuc
        fds = product("FDS", "matmul", product("FD", "matmul", fock, dm), overlap)
        comm = product("EX", "matmul", fds - mt(fds), x)
        comm = product("orthogonal_error", "matmul", mt(x), comm)
        err = float(xp.max(xp.abs(comm)))
        if callback is not None:
            callback(it, energy, err)
        if abs(energy - energy_old) < conv_tol and err < conv_tol_grad:
            return _result(product, energy, True, it, eps, c, dm, err)
        energy_old = energy
        if diis is not None:
            fock = diis.extrapolate(fock, comm)
        eps, c, c_occ, dm = diagonalize(fock)
    return _result(product, energy, False, max_cycle, eps, c, dm, err)


def _result(product, *fields):
    return SCFResult(*fields, dict(product.plans), product.entries, product.native_entries)
