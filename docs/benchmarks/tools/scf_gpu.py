"""Density-fitted RHF on the GPU (issue #28): ``emulinalg.examples.scf`` on cupy arrays, the
default float64 level against the same SCF with cupy's native products.

Per case (molecule/basis) PySCF computes the integrals on the host (its threads: all cores)
and its own DF-RHF energy; the arrays then move to the GPU once and the SCF runs there in
rows: ``native`` (cupy's own products: the reference), then the default float64 level
(``precision=None``: Ozaki Scheme II with the level's certificate) under
``emulinalg.config(strategy="eager")`` (every product emulated) and under the default
``strategy="performant"`` (the cost model may keep products native). Each row is one JSON line:

- ``energy_hartree``, ``native_energy_hartree``, ``pyscf_energy_hartree``, ``abs_diff_hartree``
  (|E - E_native|), ``abs_diff_pyscf_hartree``, ``converged``, ``iterations``, ``commutator``;
- ``seconds`` (the SCF's wall time, device synchronized at both ends; the DF tensor's
  preparation included), ``seconds_per_build``, ``native_seconds``, ``x_native``
  (seconds / native_seconds), and per case ``seconds_integrals``, ``seconds_pyscf``,
  ``seconds_to_device``;
- ``native_entry_fraction`` (output entries of all products taken from the native product),
  ``native_entries_last_build`` (``{product: [native, all]}``), ``fallbacks_last_build``
  (``{product: the plan's reason}``), ``fallback_counts`` (products of the whole run that fell
  back, fully or in part, per reason class: "precision" = entries the level's certificate
  cannot cover, "performant" = the cost model chose native), ``plans_last_build`` (each
  product's plan as text), ``schemes``;
- ``mirror_plane``, ``mirror_odd_aos``, ``mirror_zero_pairs``: for a planar molecule the AOs odd
  under its plane (2 * odd * even of the nao^2 entries of an AO-pair matrix such as J are exact
  zeros by symmetry: rounding noise in floating point, which no count of moduli certifies);
- ``nao``, ``naux``, ``nocc``, ``auxbasis``, ``df_tensor_gib`` (naux * nao^2 * 8 bytes),
  ``device_pool_gib`` (cupy's memory pool after the row), ``device``, ``fused`` (whether the
  fused CUTLASS kernels ran), versions, ``date``, ``command``.

    python3 docs/benchmarks/tools/scf_gpu.py --out OUT.jsonl \\
        [--case water/cc-pvtz --case benzene/cc-pvtz --case anthracene/cc-pvtz] \\
        [--strategies eager,performant] [--budget SECONDS] [--array cupy|numpy]

Before the cases, untimed rows on water/STO-3G take the process's one-time work (kernel
compilation on a fresh machine, library handles; ``warmup_seconds``), and before each case's
rows one untimed native Fock build warms the library for its shapes.

``--budget``: a case that would start after that many seconds (from the script's start) is
skipped, so an outer ``timeout`` does not cut a case in half. ``--array numpy`` runs the same
rows on the CPU (a check of the script; slow at the sizes above).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import sys
import time

import numpy as np

import emulinalg
from emulinalg.examples import molecules, scf, scf_demo

DEFAULT_CASES = ("water/cc-pvtz", "benzene/cc-pvtz", "anthracene/cc-pvtz")
MAX_CYCLE = 30  # as the demo: the float64 rows converge in 11-15 Fock builds


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def mirror_parity(mol):
    """``(axis, odd AOs)`` of a planar molecule: the Cartesian axis every atom has coordinate 0
    on, and how many AOs change sign under the mirror through that plane; None when no axis
    is shared."""
    coords = mol.atom_coords()
    axis = next((a for a in range(3) if np.all(np.abs(coords[:, a]) < 1e-8)), None)
    if axis is None:
        return None
    rng = np.random.default_rng(0)
    pts = coords[rng.integers(0, len(coords), 64)] + rng.normal(scale=0.7, size=(64, 3))
    flip = np.ones(3)
    flip[axis] = -1
    ao, ao_m = mol.eval_gto("GTOval", pts), mol.eval_gto("GTOval", pts * flip)
    odd = int(np.sum(np.einsum("pi,pi->i", ao, ao_m) < 0))
    return "xyz"[axis], odd


class Device:
    """Moving arrays there, waiting for its work, naming it, its memory in use."""

    def __init__(self, kind):
        self.kind = kind
        if kind == "cupy":
            import cupy

            from emulinalg.harness.devices import DEVICES

            self.cp = cupy
            self.asarray = cupy.asarray
            self.description = DEVICES["cupy"](None).description
            self.versions = {"cupy": cupy.__version__}
        else:
            self.cp = None
            self.asarray = np.asarray
            self.description = scf_demo.device_description(np.ones(1))
            self.versions = {}

    def sync(self):
        if self.cp is not None:
            self.cp.cuda.Device().synchronize()

    def free(self):
        gc.collect()
        if self.cp is not None:
            self.cp.get_default_memory_pool().free_all_blocks()

    def pool_gib(self):
        if self.cp is None:
            return None
        return self.cp.get_default_memory_pool().total_bytes() / 2**30

    def fused(self):
        if self.cp is None:
            return None
        from emulinalg.backends.cuda import fused

        why = fused.why_unavailable()
        return "on" if not why else f"off: {why}"


def run_row(dev, args, ints, precision, strategy, max_cycle, label):
    """One SCF on the device arrays ``args``; returns (SCFResult, seconds, fallback counts)."""
    before = emulinalg.fallback_counts()
    t0 = [None]

    def progress(it, energy, err):
        log(
            f"    {label}: build {it}: E = {energy:.10f} Eh, commutator {err:.1e}, "
            f"{time.perf_counter() - t0[0]:.1f} s"
        )

    settings = {"strategy": strategy} if strategy else {}
    with emulinalg.config(**settings):
        dev.sync()
        t0[0] = time.perf_counter()
        res = scf.rhf(
            *args[:3],
            ints.nocc,
            ints.e_nuc,
            dm0=args[3],
            precision=precision,
            max_cycle=max_cycle,
            callback=progress,
        )
        dev.sync()
        seconds = time.perf_counter() - t0[0]
    after = emulinalg.fallback_counts()
    counts = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return res, seconds, {k: v for k, v in counts.items() if v}


def run_case(dev, spec, strategies, max_cycle, with_pyscf, emit, common):
    name, _, basis = spec.partition("/")
    basis = basis or "cc-pvtz"
    log(f"{name}/{basis}: integrals (PySCF) ...")
    t = time.perf_counter()
    ints = molecules.integrals(name, basis)
    t_int = time.perf_counter() - t
    df_gib = ints.naux * ints.nao**2 * 8 / 2**30
    log(
        f"{name}/{basis}: nao={ints.nao} naux={ints.naux} nocc={ints.nocc} "
        f"({ints.auxbasis}), DF tensor {df_gib:.2f} GiB, {t_int:.1f} s"
    )
    e_pyscf, t_pyscf = None, None
    if with_pyscf:
        t = time.perf_counter()
        e_pyscf = molecules.pyscf_energy(ints)
        t_pyscf = time.perf_counter() - t
        log(f"{name}/{basis}: PySCF DF-RHF {e_pyscf:.10f} Eh, {t_pyscf:.1f} s")
    mirror = mirror_parity(ints.mol)
    dev.free()
    t = time.perf_counter()
    args = [dev.asarray(x) for x in (ints.hcore, ints.overlap, ints.cderi, ints.dm0)]
    dev.sync()
    t_dev = time.perf_counter() - t
    case = {
        "molecule": ints.molecule,
        "basis": basis,
        "auxbasis": str(ints.auxbasis),
        "nao": ints.nao,
        "naux": ints.naux,
        "nocc": ints.nocc,
        "natm": ints.mol.natm,
        "df_tensor_gib": df_gib,
        "mirror_plane": mirror[0] if mirror else None,
        "mirror_odd_aos": mirror[1] if mirror else None,
        "mirror_zero_pairs": 2 * mirror[1] * (ints.nao - mirror[1]) if mirror else None,
        "pyscf_energy_hartree": e_pyscf,
        "seconds_integrals": t_int,
        "seconds_pyscf": t_pyscf,
        "seconds_to_device": t_dev,
    }
    rows = [("native", "native", None)] + [("float64", None, s) for s in strategies]
    # one untimed native Fock build: the library's handles and workspaces for these shapes
    scf.rhf(*args[:3], ints.nocc, ints.e_nuc, dm0=args[3], precision="native", max_cycle=1)
    native = None
    for label, precision, strategy in rows:
        tag = label + (f" ({strategy})" if strategy else "")
        log(f"{name}/{basis}: {tag} ...")
        dev.free()
        res, seconds, counts = run_row(
            dev, args, ints, precision, strategy, max_cycle, f"{name} {tag}"
        )
        if native is None:
            native = (res.energy, seconds)
        plans = list(res.plans.values())
        rec = {
            **case,
            "precision": label,
            "strategy": strategy,
            "backend": plans[-1].backend if plans else "?",
            "schemes": scf_demo.summarize_schemes(plans),
            "energy_hartree": res.energy,
            "native_energy_hartree": native[0],
            "abs_diff_hartree": abs(res.energy - native[0]),
            "abs_diff_pyscf_hartree": None if e_pyscf is None else abs(res.energy - e_pyscf),
            "converged": res.converged,
            "iterations": res.iterations,
            "commutator": res.error,
            "seconds": seconds,
            "seconds_per_build": seconds / max(1, res.iterations),
            "native_seconds": native[1],
            "x_native": seconds / native[1] if native[1] > 0 else None,
            "entries": res.entries,
            "native_entries": res.native_entries,
            "native_entry_fraction": res.native_entries / max(1, res.entries),
            "native_entries_last_build": {
                k: list(v) for k, v in scf_demo._native_by_product(res.plans).items()
            },
            "fallbacks_last_build": scf_demo._fallbacks(res.plans),
            "fallback_counts": counts,
            "plans_last_build": (
                {k: str(p) for k, p in res.plans.items()} if precision != "native" else {}
            ),
            "device_pool_gib": dev.pool_gib(),
            **common,
        }
        emit(rec)
        ok = "" if res.converged else " (not converged)"
        log(
            f"  {tag}: E = {res.energy:.10f} Eh{ok}, |E - E_native| = "
            f"{rec['abs_diff_hartree']:.1e} Eh, {res.iterations} builds, {seconds:.2f} s "
            f"({seconds / max(native[1], 1e-9):.1f}x native), native entries "
            f"{100 * rec['native_entry_fraction']:.1f}%, reasons {counts}"
        )
        del res, plans
    del args
    dev.free()


def warm_up(dev, strategies):
    """Untimed rows on water/STO-3G (native and the level, two Fock builds each), so that no
    case's times include the one-time work of the process: the kernels' compilation (NVRTC,
    the first use on a fresh machine), the libraries' handles, the cost model. Returns
    seconds."""
    t = time.perf_counter()
    ints = molecules.integrals("water", "sto-3g")
    args = [dev.asarray(x) for x in (ints.hcore, ints.overlap, ints.cderi, ints.dm0)]
    for precision, strategy in [("native", None)] + [(None, s) for s in strategies]:
        with emulinalg.config(**({"strategy": strategy} if strategy else {})):
            scf.rhf(*args[:3], ints.nocc, ints.e_nuc, dm0=args[3], precision=precision,
                    max_cycle=2)  # fmt: skip
    dev.sync()
    del args
    dev.free()
    return time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON lines are appended here")
    ap.add_argument("--case", action="append", help="NAME[/BASIS] (default: %(default)s)")
    ap.add_argument("--strategies", default="eager,performant")
    ap.add_argument("--budget", type=float, default=math.inf, help="seconds; see the docstring")
    ap.add_argument("--array", choices=("cupy", "numpy"), default="cupy")
    ap.add_argument("--max-cycle", type=int, default=MAX_CYCLE)
    ap.add_argument("--no-pyscf", action="store_true", help="skip PySCF's own DF-RHF energy")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up rows")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    dev = Device(args.array)
    import pyscf

    common = {
        "device": dev.description,
        "fused": dev.fused(),
        "host": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "versions": {
            "emulinalg": emulinalg.__version__,
            "numpy": np.__version__,
            "pyscf": pyscf.__version__,
            "python": platform.python_version(),
            **dev.versions,
        },
        "commit": os.environ.get("EMULINALG_COMMIT"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python3", *sys.argv]),
    }
    log(f"device: {common['device']}, fused kernels: {common['fused']}, {common['host']}")
    strategies = [s for s in args.strategies.split(",") if s]
    if not args.no_warmup:
        common["warmup_seconds"] = warm_up(dev, strategies)
        log(f"warm-up (water/sto-3g, untimed rows): {common['warmup_seconds']:.1f} s")

    def emit(rec):
        line = json.dumps(rec, allow_nan=False)
        with open(args.out, "a") as fh:
            fh.write(line + "\n")

    failed = False
    for spec in args.case or DEFAULT_CASES:
        elapsed = time.perf_counter() - t_start
        if elapsed > args.budget:
            log(f"{spec}: skipped ({elapsed:.0f} s > --budget {args.budget:.0f} s)")
            continue
        try:
            run_case(dev, spec, strategies, args.max_cycle, not args.no_pyscf, emit, common)
        except Exception as exc:  # one case's failure (e.g. memory) leaves the others' records
            import traceback

            traceback.print_exc()
            log(f"{spec}: failed: {type(exc).__name__}: {exc}")
            failed = True
            with contextlib.suppress(Exception):
                dev.free()
    log(f"total {time.perf_counter() - t_start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
