"""``python -m emulinalg demo scf``: DF-RHF energies with emulated products against native.

For each built-in molecule the SCF of :mod:`emulinalg.examples.scf` runs once per precision row:
``"native"`` (the array library's own products, the reference), the default level of the
float64 inputs (``precision=None``, Ozaki Scheme II), the same level with Scheme I, the float32
level, and explicit Scheme I/II settings. Each row reports the converged total energy,
``|E - E_native|`` in Hartree, the number of Fock builds, the wall time of the SCF and the
share of product entries the native product supplied (entries a level's certificate could not
cover). PySCF's own DF-RHF energy is shown beside them.

On numpy the default ``strategy="performant"`` computes every product natively (the numpy
reference backend is slower than BLAS), so the emulated rows run inside
``emulinalg.config(strategy="eager")`` unless ``--strategy performant`` is given.
"""

from __future__ import annotations

import datetime
import json
import platform
import re
import sys
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    """One precision setting of the SCF: what is passed, and how it is labelled."""

    label: str  # the precision column (and --precision filter)
    precision: Any  # passed to rhf(precision=...)
    family: str | None = None  # config(scheme=...), None for "auto"
    default: bool = False  # precision=None: the level of the inputs' dtype


def rows():
    """All precision rows, in display order (native first: it is the reference)."""
    from emulinalg import OzakiI, OzakiII

    explicit = [
        OzakiII(moduli=12),
        OzakiII(moduli=14),
        OzakiII(moduli=14, mode="fast"),
        OzakiI(slices=6),
        OzakiI(slices=7),
    ]
    return [
        Row("native", "native"),
        Row("float64", None, default=True),
        Row("float64", "float64", family="ozaki1"),
        Row("float32", "float32"),
        *(Row(str(p), p) for p in explicit),
    ]


# The built-in runs: molecule, basis, and the rows shown without --precision. Every emulated
# row of the larger molecule takes minutes on the numpy reference backend, so by default it
# runs the precision levels only; --precision selects rows for every molecule.
@dataclass(frozen=True)
class Builtin:
    molecule: str
    basis: str
    levels_only: bool = False


BUILTINS = (Builtin("water", "cc-pvdz"), Builtin("benzene", "cc-pvdz", levels_only=True))

# Fock builds per row. Native converges in about 11; rows whose products are too coarse for the
# 1e-7 commutator criterion (float32 level, few moduli/slices) stall at their noise floor, and
# are reported as not converged after this many instead of running rhf's default 100.
MAX_CYCLE = 30


def _parse_molecules(specs):
    """``["water", "benzene/cc-pvtz"]`` -> Builtin runs (the basis defaults to cc-pVDZ)."""
    if not specs:
        return list(BUILTINS)
    known = {b.molecule: b for b in BUILTINS}
    out = []
    for spec in specs:
        name, _, basis = spec.partition("/")
        base = known.get(name, Builtin(name, "cc-pvdz"))
        out.append(Builtin(name, basis or base.basis, base.levels_only))
    return out


def _selected(run, filters):
    from emulinalg.harness.demo import _keep

    chosen = []
    for row in rows():
        if row.precision == "native":  # always: it is the reference of |ΔE|
            chosen.append(row)
        elif filters:
            if _keep(row.label, filters):
                chosen.append(row)
        elif not run.levels_only or isinstance(row.precision, str) or row.default:
            chosen.append(row)
    return chosen


def summarize_schemes(plans):
    """The schemes the products ran, collapsed: ``OzakiII(moduli=16..20, mode=accurate)``."""
    counts = {}
    for plan in plans:
        m = re.fullmatch(r"(\w+)\((\w+)=(\d+)(.*)\)", plan.scheme)
        if m is None:
            counts.setdefault((plan.scheme, "", ""), set())
            continue
        counts.setdefault((m[1], m[2], m[4]), set()).add(int(m[3]))
    parts = []
    for (name, key, rest), values in sorted(counts.items()):
        if not values:
            parts.append(name)
            continue
        lo, hi = min(values), max(values)
        parts.append(f"{name}({key}={lo if lo == hi else f'{lo}..{hi}'}{rest})")
    return "; ".join(parts)


def run(molecules=None, precisions=None, *, strategy="eager", asarray=None, progress=None):
    """Run the SCF rows and return one record per (molecule, row).

    Parameters
    ----------
    molecules : list of str, optional
        ``"name"`` or ``"name/basis"`` (built-in names: "water", "benzene"; default basis
        cc-pVDZ); default: water/cc-pVDZ and benzene/cc-pVDZ.
    precisions : list of str, optional
        Row filters as in ``python -m emulinalg demo --precision`` (the native row always runs).
    strategy : {"eager", "performant"}
        ``emulinalg.config(strategy=...)`` of the emulated rows.
    asarray : callable, optional
        Moves PySCF's numpy arrays to the array library to run on (default: numpy's own arrays),
        e.g. ``cupy.asarray``.
    progress : callable, optional
        Called with a line of text before each row.

    Returns
    -------
    list of dict
        Keys ``molecule``, ``basis``, ``precision``, ``backend``, ``energy_hartree``,
        ``abs_diff_hartree`` (to the native row), ``iterations``, ``seconds``, and
        ``scheme_family``, ``schemes``, ``converged``, ``commutator`` (largest entry of the last
        orthogonal-basis ``FDS - SDF``), ``native_entry_fraction``,
        ``pyscf_energy_hartree``, ``native_seconds``, ``nao``, ``naux``, ``auxbasis``,
        ``device``, ``date``, ``command``.

    Raises
    ------
    ImportError
        Without PySCF.
    """
    import emulinalg

    from . import molecules as mols
    from .scf import rhf

    if asarray is None:
        import numpy as np

        asarray = np.asarray
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    device = f"{platform.machine()} CPU ({platform.processor() or platform.system()})"
    command = " ".join(["python -m emulinalg", *sys.argv[1:]]) if sys.argv else ""
    records = []
    for spec in _parse_molecules(molecules):
        if progress:
            progress(f"{spec.molecule}/{spec.basis}: integrals and PySCF's DF-RHF energy ...")
        ints = mols.integrals(spec.molecule, spec.basis)
        e_pyscf = mols.pyscf_energy(ints)
        args = [asarray(x) for x in (ints.hcore, ints.overlap, ints.cderi)]
        dm0 = asarray(ints.dm0)
        native = None
        for row in _selected(spec, precisions):
            label = row.label + (f" [{row.family}]" if row.family else "")
            if progress:
                progress(f"{spec.molecule}/{spec.basis} (nao={ints.nao}): {label} ...")
            settings = {"strategy": strategy}
            if row.family:
                settings["scheme"] = row.family
            with emulinalg.config(**settings):
                t0 = time.perf_counter()
                res = rhf(
                    *args,
                    ints.nocc,
                    ints.e_nuc,
                    dm0=dm0,
                    precision=row.precision,
                    max_cycle=MAX_CYCLE,
                )
                seconds = time.perf_counter() - t0
            if native is None:
                native = (res.energy, seconds)
            plans = list(res.plans.values())
            records.append(
                {
                    "molecule": spec.molecule,
                    "basis": spec.basis,
                    "precision": row.label,
                    "scheme_family": row.family or "auto",
                    "backend": plans[-1].backend if plans else "?",
                    "energy_hartree": res.energy,
                    "abs_diff_hartree": abs(res.energy - native[0]),
                    "iterations": res.iterations,
                    "seconds": seconds,
                    "converged": res.converged,
                    "commutator": res.error,
                    "schemes": summarize_schemes(plans),
                    "native_entry_fraction": res.native_entries / max(1, res.entries),
                    "pyscf_energy_hartree": e_pyscf,
                    "native_seconds": native[1],
                    "nao": ints.nao,
                    "naux": ints.naux,
                    "nocc": ints.nocc,
                    "auxbasis": str(ints.auxbasis),
                    "strategy": strategy,
                    "device": device,
                    "date": date,
                    "command": command,
                }
            )
    return records


def format_table(records):
    """The records as a fixed-width text table."""
    head = (
        "molecule",
        "precision",
        "schemes",
        "energy [Eh]",
        "|E-E_native|",
        "iter",
        "native entries",
        "time [s]",
        "x native",
    )
    out_rows = []
    for r in records:
        precision = r["precision"]
        if r["scheme_family"] != "auto":
            precision += f" [{r['scheme_family']}]"
        elif precision == "float64":
            precision += " (default)"
        ratio = r["seconds"] / r["native_seconds"] if r["native_seconds"] > 0 else float("nan")
        out_rows.append(
            (
                f"{r['molecule']}/{r['basis']}",
                precision,
                r["schemes"],
                f"{r['energy_hartree']:.10f}",
                f"{r['abs_diff_hartree']:.1e}",
                f"{r['iterations']}" + ("" if r["converged"] else "*"),
                f"{100 * r['native_entry_fraction']:.1f}%",
                f"{r['seconds']:.3g}",
                f"{ratio:.0f}",
            )
        )
    widths = [max([len(h)] + [len(row[i]) for row in out_rows]) for i, h in enumerate(head)]
    right = {3, 4, 5, 6, 7, 8}

    def line(cells):
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in out_rows])


def main(args):
    """Entry point of ``python -m emulinalg demo scf`` (``args`` from the command line)."""

    def progress(msg):
        if not args.json and not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    groups = getattr(args, "molecule", None) or []
    molecules = [m for g in groups for m in (g if isinstance(g, list) else [g])]
    try:
        records = run(molecules, args.precision, strategy=args.strategy, progress=progress)
    except ImportError as exc:
        print(f"demo scf: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(records, allow_nan=False))
        return 0
    print(
        "emulinalg demo scf: density-fitted RHF, every J/K, Fock and density product through "
        "emulinalg.namespace"
    )
    print(
        f"emulated rows under emulinalg.config(strategy={args.strategy!r}) (numpy's default "
        "'performant' strategy would compute them natively); |E-E_native| in Hartree; "
        "* = not converged"
    )
    seen = set()
    for r in records:
        key = (r["molecule"], r["basis"])
        if key not in seen:
            seen.add(key)
            nat = next(x for x in records if (x["molecule"], x["basis"]) == key)
            print(
                f"{r['molecule']}/{r['basis']}: nao={r['nao']}, naux={r['naux']} "
                f"({r['auxbasis']}), PySCF DF-RHF {r['pyscf_energy_hartree']:.10f} Eh, "
                f"native - PySCF = {nat['energy_hartree'] - r['pyscf_energy_hartree']:.1e} Eh"
            )
    print()
    print(format_table(records))
    return 0
