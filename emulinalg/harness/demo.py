"""``python -m emulinalg demo``: emulated against native products on built-in inputs.

For each input dtype and each φ it builds square φ-matrices (``emulinalg.inputs.phi_matrix``),
computes the exact product once (``emulinalg.reference``), and then times and grades the native
product (numpy ``@``) and the emulated products side by side: the precision level of the dtype
with the automatic scheme family (Ozaki Scheme II) and with ``config(scheme="ozaki1")``, plus a
few explicit schemes. Bits are ``-log2`` of the maximum elementwise relative error
(``bits_maxrel``) and of the maximum componentwise error ``|Ĉ-C| / (|A||B|)`` (``bits_cw``),
against the exact product of the same inputs (docs/precision.md).
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

# The precision level of each input dtype, and the explicit schemes shown beside it (moduli,
# slices), chosen near that level: about 53 bits for float64 (14-16 moduli, 7-8 slices), about
# 24 for float32 (8 moduli, 4 slices).
_LEVEL = {
    "float64": "float64",
    "float32": "float32",
    "complex128": "float64",
    "complex64": "float32",
}
_EXPLICIT = {"float64": ((14, 16), (7, 8)), "float32": ((8,), (4,))}

DEFAULT_DTYPES = ("float64", "float32")


@dataclass
class Case:
    """One emulated product to run: what the user asks for, and how it is labelled."""

    label: str  # the precision column
    precision: Any  # passed to emulinalg.matmul
    family: str | None  # config(scheme=...) or None for the default ("auto")


def cases_for(dtype: str) -> list[Case]:
    """The emulated rows shown for inputs of ``dtype``."""
    import emulinalg

    level = _LEVEL[dtype]
    rows = [Case(level, level, None), Case(level, level, "ozaki1")]
    moduli, slices = _EXPLICIT[level]
    for n in moduli:
        spec = emulinalg.OzakiII(moduli=n)
        rows.append(Case(str(spec), spec, None))
    for p in slices:
        spec = emulinalg.OzakiI(slices=p)
        rows.append(Case(str(spec), spec, None))
    return rows


def _keep(label: str, filters: list[str] | None) -> bool:
    """Whether a row passes ``--precision``: the full label, the scheme name before ``(``, or a
    prefix of the parameters (``OzakiII(moduli=14)``), ignoring case and spaces."""
    if not filters:
        return True

    def norm(s: str) -> str:
        return s.replace(" ", "").lower()

    full = norm(label)
    name = full.split("(")[0]
    for f in map(norm, filters):
        if f in (full, name) or ("(" in f and full.startswith(f.rstrip(")"))):
            return True
    return False


def _has_flint() -> bool:
    try:
        import flint  # noqa: F401
    except ImportError:
        return False
    return True


# Without --repeat, a row's timed runs stop once they have taken this many seconds together
# (after at least one): the default demo stays under a minute on 2 busy cores.
ROW_SECONDS = 2.0
DEFAULT_REPEAT = 3


def _timed(fn, repeat: int, budget: float = math.inf) -> tuple[Any, float]:
    """Run ``fn`` ``repeat`` times, or fewer (at least once) once the runs have taken ``budget``
    seconds; return the last result and the median time in seconds."""
    times = []
    out = None
    while len(times) < max(1, repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        if sum(times) >= budget:
            break
    return out, statistics.median(times)


def _bits(x: float) -> float | None:
    # JSON has no inf: null means the error was exactly zero.
    return None if x is None or not math.isfinite(x) else float(x)


def run(
    *,
    size: int = 512,
    phis: list[float] | None = None,
    dtypes: list[str] | None = None,
    precisions: list[str] | None = None,
    repeat: int = DEFAULT_REPEAT,
    seed: int = 0,
    strategy: str = "eager",
    progress=None,
    budget: float = math.inf,
) -> list[dict]:
    """Run the demo and return one record per (dtype, φ, row), native rows included.

    Each row is timed ``repeat`` times (the median), or fewer, at least once, where the runs
    take ``budget`` seconds together.

    The records use the benchmark keys of docs/performance.md (``backend``, ``op``, ``dtype``,
    ``precision``, ``scheme``, ``m``/``n``/``k``, ``phi``, ``seconds``, ``native_seconds``,
    ``bits_maxrel``, ``native_bits_maxrel``, ``bits_cw``, ``native_bits_cw``, ``reference``, ...).
    A row whose product raised gets an ``error`` key instead of figures.
    """
    import emulinalg
    from emulinalg import inputs, reference

    phis = phis or [1.0]
    dtypes = dtypes or list(DEFAULT_DTYPES)
    m = n = k = int(size)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    device = f"{platform.machine()} CPU ({platform.processor() or platform.system()})"
    command = " ".join(["python -m emulinalg", *sys.argv[1:]]) if sys.argv else ""
    records: list[dict] = []

    for dtype in dtypes:
        for phi in phis:
            a = inputs.phi_matrix((m, k), phi, dtype=dtype, seed=seed)
            b = inputs.phi_matrix((k, n), phi, dtype=dtype, seed=seed + 1)
            if progress:
                slow = "" if _has_flint() else " (without python-flint this takes a while)"
                progress(f"{dtype} phi={phi:g} N={size}: exact reference{slow} ...")
            ref = reference.exact_matmul(a, b)

            c_nat, t_nat = _timed(lambda a=a, b=b: a @ b, repeat, budget)
            acc_nat = reference.accuracy(c_nat, a, b, ref=ref)
            base = {
                "op": "matmul",
                "dtype": dtype,
                "m": m,
                "n": n,
                "k": k,
                "batch": 1,
                "phi": float(phi),
                "native_seconds": t_nat,
                "native_bits_maxrel": _bits(acc_nat["bits_maxrel"]),
                "native_bits_cw": _bits(acc_nat["bits_cw"]),
                "reference": "exact",
                "device": device,
                "date": date,
                "command": command,
            }
            records.append(
                {
                    **base,
                    "backend": "numpy",
                    "precision": "native",
                    "scheme": "native (numpy @)",
                    "seconds": t_nat,
                    "bits_maxrel": base["native_bits_maxrel"],
                    "bits_cw": base["native_bits_cw"],
                    "speedup": 1.0,
                }
            )

            for case in cases_for(dtype):
                label = case.label + (f" [{case.family}]" if case.family else "")
                if not _keep(case.label, precisions):
                    continue
                if progress:
                    progress(f"{dtype} phi={phi:g} N={size}: {label} ...")
                rec = {**base, "precision": case.label, "scheme_family": case.family or "auto"}
                try:
                    settings: dict[str, Any] = {"strategy": strategy}
                    if case.family:
                        settings["scheme"] = case.family
                    with emulinalg.config(**settings):
                        c, t = _timed(
                            lambda a=a, b=b, p=case.precision: emulinalg.matmul(a, b, precision=p),
                            repeat,
                            budget,
                        )
                        plan = emulinalg.last_plan()
                    acc = reference.accuracy(np.asarray(c), a, b, ref=ref)
                except Exception as exc:  # a row that fails is shown, not hidden
                    rec.update(
                        {"backend": "?", "scheme": "?", "error": f"{type(exc).__name__}: {exc}"}
                    )
                    records.append(rec)
                    continue
                rec.update(
                    {
                        "backend": getattr(plan, "backend", "?"),
                        "scheme": getattr(plan, "scheme", "?"),
                        "gemms": getattr(plan, "gemms", None),
                        "fallback": getattr(plan, "fallback", None),
                        "seconds": t,
                        "bits_maxrel": _bits(acc["bits_maxrel"]),
                        "bits_cw": _bits(acc["bits_cw"]),
                        "speedup": t_nat / t if t > 0 else None,
                    }
                )
                records.append(rec)

    for rec in records:
        flops = 2.0 * m * n * k * (4 if rec["dtype"].startswith("complex") else 1)
        if "seconds" in rec:
            rec["tflops"] = flops / rec["seconds"] / 1e12 if rec["seconds"] > 0 else None
        rec["native_tflops"] = flops / rec["native_seconds"] / 1e12
    return records


def _fmt_bits(x: float | None) -> str:
    return "exact" if x is None else f"{x:.1f}"


def format_table(records: list[dict]) -> str:
    """The records as a fixed-width text table."""
    head = (
        "backend",
        "dtype",
        "phi",
        "precision",
        "scheme",
        "bits_maxrel",
        "bits_cw",
        "native maxrel/cw",
        "time [s]",
        "time / native",
    )
    rows = []
    for r in records:
        native = f"{_fmt_bits(r['native_bits_maxrel'])}/{_fmt_bits(r['native_bits_cw'])}"
        precision = r["precision"]
        if r.get("scheme_family") not in (None, "auto"):
            precision += f" [{r['scheme_family']}]"
        if "error" in r:
            cells = (r["backend"], r["dtype"], f"{r['phi']:g}", precision)
            rows.append((*cells, "ERROR: " + r["error"][:60], "", "", native, "", ""))
            continue
        scheme = str(r["scheme"])
        if r.get("fallback"):
            scheme += f" (fallback: {r['fallback']})"
        ratio = r["seconds"] / r["native_seconds"] if r["native_seconds"] > 0 else float("nan")
        rows.append(
            (
                r["backend"],
                r["dtype"],
                f"{r['phi']:g}",
                precision,
                scheme,
                _fmt_bits(r["bits_maxrel"]),
                _fmt_bits(r["bits_cw"]),
                native,
                f"{r['seconds']:.4g}",
                f"{ratio:.1f}",
            )
        )
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head)]
    right = {5, 6, 7, 8, 9}

    def line(cells):
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    return "\n".join(out)


def main(args) -> int:
    """Entry point of the ``demo`` subcommand (``args`` from :mod:`.cli`)."""
    import emulinalg

    def progress(msg: str) -> None:
        if not args.json and not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    if args.precision:  # a filter that matches no row would silently show native rows only
        labels = [c.label for dt in (args.dtype or DEFAULT_DTYPES) for c in cases_for(dt)]
        unknown = [f for f in args.precision if not any(_keep(lab, [f]) for lab in labels)]
        if unknown:
            print(
                f"demo: --precision {', '.join(unknown)} matches no row; the rows are: "
                + ", ".join(dict.fromkeys(labels)),
                file=sys.stderr,
            )
            return 2

    records = run(
        size=args.size,
        phis=args.phi,
        dtypes=args.dtype,
        precisions=args.precision,
        repeat=args.repeat or DEFAULT_REPEAT,
        seed=args.seed,
        strategy=args.strategy,
        progress=progress,
        budget=math.inf if args.repeat else ROW_SECONDS,
    )
    failed = [r for r in records if "error" in r]
    if args.json:
        print(json.dumps(records, allow_nan=False))
    else:
        version = getattr(emulinalg, "__version__", "?")
        print(
            f"emulinalg {version} demo: C = A @ B, A and B {args.size}x{args.size} phi-matrices "
            f"(a_ij = (U(0,1)-0.5)*exp(phi*N(0,1))), strategy={args.strategy}, "
            + (
                f"median of {args.repeat} runs"
                if args.repeat
                else f"median of up to {DEFAULT_REPEAT} runs (fewer once a row's take "
                f"{ROW_SECONDS:g} s)"
            )
        )
        print("bits = -log2(max error) against the exact product; higher is better")
        print(
            "rows: 'native' is the library's own product; 'float64' / 'float32' is the precision"
            " level\n(emulinalg picks scheme and count; it promises bits >= native on both"
            " measures); OzakiII(moduli=n)\nand OzakiI(slices=p) are fixed counts with no such"
            " promise, shown to see what fewer moduli or\nslices cost. At phi >= 1 the products"
            " cancel: native loses max-rel bits too (componentwise is\nthe error relative to"
            " |A||B|)."
        )
        print()
        print(format_table(records))
        if failed:
            print(f"\n{len(failed)} row(s) failed; see the ERROR rows (--json shows the messages)")
    return 1 if failed else 0
