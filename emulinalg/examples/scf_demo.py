"""``python -m emulinalg demo scf``: DF-RHF energies with emulated products against native.

For each molecule the SCF of :mod:`emulinalg.examples.scf` runs once per precision row:
``"native"`` (the array library's own products, the reference), the default level of the
float64 inputs (``precision=None``, Ozaki Scheme II) and an explicit ``OzakiII(moduli=14)``
(no certificate, no native entries); ``--precision all`` adds the same level with Scheme I, the
float32 level and more explicit Scheme I/II settings. Each row reports the converged total
energy, ``|E - E_native|`` in Hartree, the number of Fock builds, the wall time of the SCF and
the share of product entries the native product supplied (entries a level's certificate could
not cover: the molecule's symmetry zeros). PySCF's own DF-RHF energy is shown beside them.

The default molecule, water/cc-pVDZ, takes seconds per row on the numpy reference backend;
``--molecule benzene`` (cc-pVDZ, 114 basis functions) takes minutes per emulated row.

On numpy the default ``strategy="performant"`` computes every product natively (the numpy
reference backend is slower than BLAS), so the emulated rows run inside
``emulinalg.config(strategy="eager")`` unless ``--strategy performant`` is given.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import re
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from typing import Any

import array_api_compat

from emulinalg import _extras


@dataclass(frozen=True)
class Row:
    """One precision setting of the SCF: what is passed, and how it is labelled."""

    label: str  # the precision column (and --precision filter)
    precision: Any  # passed to rhf(precision=...)
    family: str | None = None  # config(scheme=...), None for "auto"
    default: bool = False  # precision=None: the level of the inputs' dtype
    shown: bool = False  # run without --precision


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
    shown = OzakiII(moduli=14)  # the default level's contrast: no certificate, no native entries
    return [
        Row("native", "native", shown=True),
        Row("float64", None, default=True, shown=True),
        Row("float64", "float64", family="ozaki1"),
        Row("float32", "float32"),
        *(Row(str(p), p, shown=str(p) == str(shown)) for p in explicit),
    ]


# The molecules run without --molecule, and the basis of a name given without one. Water in
# cc-pVDZ (24 basis functions) shows the point in seconds per row on the numpy reference
# backend; benzene in cc-pVDZ (114) takes minutes per emulated row there.
DEFAULT_MOLECULES = ("water",)
DEFAULT_BASIS = "cc-pvdz"

# Fock builds per row. Native converges in about 11; rows whose products are too coarse for the
# 1e-7 commutator criterion (float32 level, few moduli/slices) stall at their noise floor, and
# are reported as not converged after this many instead of running rhf's default 100.
MAX_CYCLE = 30


def _parse_molecules(specs, basis=None):
    """``["water", "benzene/cc-pvtz"]`` -> ``[("water", basis), ("benzene", "cc-pvtz")]``
    (``basis`` defaults to cc-pVDZ)."""
    out = []
    for spec in specs or DEFAULT_MOLECULES:
        name, _, own = spec.partition("/")
        out.append((name, own or basis or DEFAULT_BASIS))
    return out


def _selected(filters):
    """The rows to run: the shown ones, those ``filters`` match (``--precision``), or every row
    for ``all``; native always (it is the reference of |ΔE|)."""
    from emulinalg.harness.demo import _keep

    every = any(f.strip().lower() == "all" for f in filters or ())
    chosen = []
    for row in rows():
        if row.precision == "native" or every:
            chosen.append(row)
        elif filters:
            if _keep(row.label, filters):
                chosen.append(row)
        elif row.shown:
            chosen.append(row)
    return chosen


def unknown_filters(filters):
    """The ``--precision`` filters that match no row (``all`` matches every row)."""
    from emulinalg.harness.demo import _keep

    labels = [r.label for r in rows()]
    return [
        f
        for f in filters or ()
        if f.strip().lower() != "all" and not any(_keep(x, [f]) for x in labels)
    ]


# While a row runs, a line after this many seconds without one (four times as many once the
# row has run a minute): the last Fock build's energy and commutator, or what runs before it.
HEARTBEAT_SECONDS = 5.0


class _Heartbeat:
    """A thread that says how a row's SCF is going when no line has been printed for a while
    (a benzene Fock build at a level takes longer than that on the CPU)."""

    def __init__(self, say, last, running="Fock build 1"):
        self.say, self.last = say, last  # last[0]: when the last line was printed
        self.running = running  # what runs before the first Fock build is done
        self.build = None  # (iteration, energy, commutator) of the last Fock build
        self.t0 = time.perf_counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __call__(self, it, energy, err):  # rhf's callback
        self.build = (it, energy, err)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def _run(self):
        while not self.stop.wait(0.25):
            now = time.perf_counter()
            every = HEARTBEAT_SECONDS * (4 if now - self.t0 >= 60 else 1)
            if now - self.last[0] < every:
                continue
            if self.build is None:
                self.say(f"  {now - self.t0:.0f} s: {self.running} running")
            else:
                it, energy, err = self.build
                self.say(
                    f"  {now - self.t0:.0f} s: Fock build {it} done (E = {energy:.10f} Eh, "
                    f"commutator {err:.1e}), build {it + 1} running"
                )


def _native_by_product(plans):
    """``{name: (native entries, entries)}`` of the products of one Fock build."""
    out = {}
    for name, plan in plans.items():
        entries = math.prod(plan.shape[:3]) if plan.shape else 0
        out[name] = (plan.native_entries if plan.emulated else entries, entries)
    return out


def _fallbacks(plans):
    """``{name: reason}`` of the products of one Fock build whose plan took entries, or the
    whole product, from the native product (``Plan.fallback``)."""
    return {name: plan.fallback for name, plan in plans.items() if plan.fallback}


def device_description(x):
    """Where the array ``x`` (and the SCF on it) lives: the GPU's name for cupy arrays, else
    this machine's CPU."""
    if array_api_compat.is_cupy_array(x):
        from emulinalg.harness.devices import DEVICES

        return DEVICES["cupy"](None).description
    return f"{platform.machine()} CPU ({platform.processor() or platform.system()})"


def synchronize(x):
    """Wait for the work queued on the device of array ``x`` (cupy's run asynchronously; the
    host clock then sees it done); nothing for host arrays."""
    sync = getattr(array_api_compat.device(x), "synchronize", None)
    if callable(sync):
        sync()


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


def run(
    molecules=None, precisions=None, *, strategy="eager", asarray=None, progress=None, basis=None
):
    """Run the SCF rows and return one record per (molecule, row).

    Parameters
    ----------
    molecules : list of str, optional
        ``"name"`` or ``"name/basis"`` (built-in names: "water", "benzene", "naphthalene",
        "anthracene", or a PySCF atom string); default: water.
    precisions : list of str, optional
        Row filters as in ``python -m emulinalg demo --precision`` (the native row always runs);
        ``["all"]``: every row. Default: native, the float64 level and ``OzakiII(moduli=14)``.
    strategy : {"eager", "performant"}
        ``emulinalg.config(strategy=...)`` of the emulated rows.
    asarray : callable, optional
        Moves PySCF's numpy arrays to the array library to run on (default: numpy's own arrays),
        e.g. ``cupy.asarray``.
    progress : callable, optional
        Called with a line of text before each step (integrals, each row), after each row with
        its result, and while a row runs when ``HEARTBEAT_SECONDS`` have passed without a line
        (from another thread).
    basis : str, optional
        Orbital basis of the molecules given without one (default cc-pVDZ).

    Returns
    -------
    list of dict
        Keys ``molecule``, ``basis``, ``precision``, ``backend``, ``energy_hartree``,
        ``abs_diff_hartree`` (to the native row), ``iterations``, ``seconds``, and
        ``scheme_family``, ``schemes``, ``converged``, ``commutator`` (largest entry of the last
        orthogonal-basis ``FDS - SDF``), ``native_entry_fraction``, ``native_entries_last_build``
        (``{product: [native entries, entries]}`` of the last Fock build),
        ``fallbacks_last_build`` (``{product: the plan's fallback reason}`` of those with one),
        ``pyscf_energy_hartree``, ``native_seconds``, ``nao``, ``naux``, ``auxbasis``,
        ``device`` (the GPU for cupy arrays), ``date``, ``command``. ``seconds`` is the SCF's
        wall time with the device's queued work waited for at both ends.

    Raises
    ------
    ModuleNotFoundError
        Without PySCF, before the first progress line; the message is the one line
        ``... needs pyscf (not installed): pip install ".[scf]"``.
    """
    import emulinalg

    _extras.require("pyscf", needed_by="demo scf")
    from . import molecules as mols
    from .scf import rhf

    if asarray is None:
        import numpy as np

        asarray = np.asarray
    last = [time.perf_counter()]  # when the last progress line was printed

    def say(msg):
        if progress:
            progress(msg)
        last[0] = time.perf_counter()

    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    command = " ".join(["python -m emulinalg", *sys.argv[1:]]) if sys.argv else ""
    records = []
    for molecule, mol_basis in _parse_molecules(molecules, basis):
        say(f"{molecule}/{mol_basis}: integrals and PySCF's DF-RHF energy ...")
        with _Heartbeat(say, last, "PySCF"):
            ints = mols.integrals(molecule, mol_basis)
            e_pyscf = mols.pyscf_energy(ints)
        args = [asarray(x) for x in (ints.hcore, ints.overlap, ints.cderi)]
        dm0 = asarray(ints.dm0)
        device = device_description(dm0)
        native = None
        for row in _selected(precisions):
            label = row.label + (f" [{row.family}]" if row.family else "")
            say(f"{molecule}/{mol_basis} (nao={ints.nao}, naux={ints.naux}): {label} ...")
            settings: dict[str, Any] = {"strategy": strategy}
            if row.family:
                settings["scheme"] = row.family
            with emulinalg.config(**settings), _Heartbeat(say, last) as heartbeat:
                synchronize(dm0)
                t0 = time.perf_counter()
                res = rhf(
                    *args,
                    ints.nocc,
                    ints.e_nuc,
                    dm0=dm0,
                    precision=row.precision,
                    max_cycle=MAX_CYCLE,
                    callback=heartbeat,
                )
                synchronize(dm0)
                seconds = time.perf_counter() - t0
            if native is None:
                native = (res.energy, seconds)
            plans = list(res.plans.values())
            rec = {
                "molecule": molecule,
                "basis": mol_basis,
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
                "native_entries_last_build": {
                    k: list(v) for k, v in _native_by_product(res.plans).items()
                },
                "fallbacks_last_build": _fallbacks(res.plans),
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
            records.append(rec)
            say("  " + _summary(rec))
    return records


def _summary(r):
    """One line of a row's result."""
    conv = "" if r["converged"] else " (not converged)"
    text = f"E = {r['energy_hartree']:.10f} Eh, {r['iterations']} Fock builds{conv}, "
    if r["precision"] == "native":
        return text + f"{r['seconds']:.2f} s: the reference"
    ratio = r["seconds"] / r["native_seconds"] if r["native_seconds"] > 0 else float("nan")
    return text + (
        f"|E - E_native| = {r['abs_diff_hartree']:.1e} Eh, {r['seconds']:.2f} s "
        f"({ratio:.0f}x native), {100 * r['native_entry_fraction']:.1f}% of the products' "
        "entries from the native product"
    )


def explain_native_entries(records):
    """Why a level's rows take entries from the native product, with the counts of the first
    such row's last Fock build; '' when no emulated row took any."""
    row = next(
        (r for r in records if r["precision"] != "native" and r["native_entry_fraction"] > 0),
        None,
    )
    if row is None:
        return ""
    counts = [
        f"{name} {nat}/{total}"
        for name, (nat, total) in row["native_entries_last_build"].items()
        if nat
    ]
    same = [
        r["precision"]
        for r in records
        if r["precision"] != "native"
        and not r["native_entry_fraction"]
        and r["abs_diff_hartree"] <= 1e-9
    ]
    text = (
        "Native entries: a precision level certifies every entry of a product to native's error "
        "bound for that entry. A molecule's symmetry zeros (a function odd under a mirror plane "
        "times an even one: every term rounding noise on one side) have a bound at noise level "
        "that one product's scaling cannot meet; the level runs such a product as the sum of "
        "two products over the classes of its contraction index (each scaled on its own, "
        "docs/precision.md), and takes from the native product only the entries that still "
        "find no certificate (its plan's fallback says so). "
        f"{row['molecule']}/{row['basis']}, {row['precision']}, last Fock build: "
        f"{', '.join(counts)} (native/all entries)."
    )
    if same:
        text += (
            f" {', '.join(dict.fromkeys(same))}: no certificate, no native entries, and the "
            "energy within 1e-9 Eh all the same: it does not depend on those entries."
        )
    return text + " See docs/scf.md."


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

    hint = _extras.missing("pyscf", needed_by="demo scf")
    if hint:  # first: no progress line, no traceback, before anything runs
        print(hint, file=sys.stderr)
        return _extras.MISSING_EXTRA
    groups = getattr(args, "molecule", None) or []
    molecules = [m for g in groups for m in (g if isinstance(g, list) else [g])]
    unknown = unknown_filters(args.precision)
    if unknown:  # a filter that matches no row would silently run the native row only
        labels = dict.fromkeys(r.label + (f" [{r.family}]" if r.family else "") for r in rows())
        print(
            f"demo scf: --precision {', '.join(unknown)} matches no row; the rows are: "
            + ", ".join(labels)
            + " (or all)",
            file=sys.stderr,
        )
        return 2
    records = run(
        molecules,
        args.precision,
        strategy=args.strategy,
        progress=progress,
        basis=getattr(args, "basis", None),
    )
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
    note = explain_native_entries(records)
    if note:
        print()
        print(textwrap.fill(note, 100, break_on_hyphens=False))
    return 0
