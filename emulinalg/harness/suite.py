"""The graded accuracy suite (issue #6): every case, every backend, against the exact product.

For each case of :mod:`.catalogue` (a pair of operands drawn from a fixed seed) the runner
computes

- the emulated product at the default precision (the level of the inputs' dtype; the case's
  ``precision`` where it asks a level above it) with ``strategy="eager"`` (always emulated),
  and with the default strategy (which may choose native where that is faster);
- the native product of the same array library (``xp.matmul``);
- the exact product (:func:`emulinalg.reference.exact_matmul`), on the host;

and records for the emulated and native results the effective bits of
:func:`emulinalg.reference.accuracy` (``bits_maxrel = -log2 max |Ĉ-C|/|C|``,
``bits_cw = -log2 max |Ĉ-C|/(|A||B|)``; for complex results also per part, ``bits_maxrel_re``
... ``bits_cw_im``, each part against its own sums) and the grade ratio

    g = max_ij |Ĉ - C|_ij / (k u (|A||B|)_ij)

(Demmel et al.'s grading of the BLAS with f(k) = k; u = 2**-53 for float64/complex128 and
2**-24 for float32/complex64): a result passes the grade when g <= 1. The *verdict* of a case
is the measured contract of docs/precision.md: emulated bits >= native bits on both measures (and
on both per part for complex results), and the same pattern of non-finite outputs as the
native product (positions for complex results, whose NaN-vs-inf components depend on the BLAS
kernel; NaN/+inf/-inf for real ones).

Where results lie in the subnormal range no result can meet ``k u |A||B|`` (the rounding of the
result alone may exceed it), so each record also carries ``grade_un``, the same ratio with the
underflow allowance ``k u λ`` (λ the smallest normal number) that the XBLAS test ratio includes.

References
----------
X. S. Li, J. W. Demmel, D. H. Bailey, G. Henry, Y. Hida, J. Iskandar, W. Kahan, S. Y. Kang,
A. Kapur, M. C. Martin, B. J. Thompson, T. Tung, D. J. Yoo, "Design, implementation and testing
of extended and mixed precision BLAS", ACM TOMS 28(2), 2002 (the test ratio: computed error over
the error bound, with an underflow term); BLAS Technical Forum, "Basic Linear Algebra Subprograms
Technical (BLAST) Forum Standard", 2001, chapter 4 (error bounds of the extended and mixed
precision BLAS); docs/precision.md of this project (the contract the verdict checks).
"""

from __future__ import annotations

import datetime
import math
import time

import numpy as np

from emulinalg import _extras
from emulinalg._precision import REAL_DTYPE

from .catalogue import Case, cases, ldexp
from .machine import backend_env, blas, cpu_description

__all__ = ["markdown_table", "run_case", "run_suite", "summary", "text_table"]

UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24}
BACKENDS = ("numpy", "cupy", "amx")


# --------------------------------------------------------------------------------------------
# running one case
# --------------------------------------------------------------------------------------------


def _to_host(xp, x):
    get = getattr(xp, "asnumpy", None)  # cupy
    return get(x) if get is not None else np.asarray(x)


def backend_missing(backend: str) -> str | None:
    """Why ``backend`` cannot run here (None when it can)."""
    if backend not in BACKENDS:
        return f"unknown backend {backend!r}; expected one of {BACKENDS}"
    if backend == "cupy":
        hint = _extras.missing("cupy", needed_by="--backend cupy")
        if hint:
            return hint
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "cupy found no CUDA device"
        except Exception as exc:  # cupy without a driver
            return f"cupy is not usable here ({type(exc).__name__}: {exc})"
    if backend == "amx":
        from emulinalg.backends import amx

        if not amx.usable():
            return f"AMX is not usable here: {amx.reason()}"
    return None


def nonfinite_codes(x):
    """Per entry: 0 finite, 1 NaN, 2 +inf, 3 -inf (real), or the pair for complex (re + 4 im)."""
    x = np.asarray(x)
    parts = [x.real, x.imag] if x.dtype.kind == "c" else [x]
    code = np.zeros(x.shape, dtype=np.int64)
    for i, p in enumerate(parts):
        c = np.where(np.isnan(p), 1, np.where(p == np.inf, 2, np.where(p == -np.inf, 3, 0)))
        code = code + c * 4**i
    return code


def same_nonfinite_pattern(got, want) -> bool:
    """Non-finite outputs where native has them: NaN/+inf/-inf for real results, positions for
    complex ones (which component becomes NaN rather than inf depends on the BLAS kernel)."""
    g, w = nonfinite_codes(got), nonfinite_codes(want)
    if want.dtype.kind == "c":
        g, w = g != 0, w != 0
    return bool(np.array_equal(g, w))


def _uses_scaled_reference(hi) -> bool:
    """Results whose remainder ``lo`` would underflow (subnormal range) are graded with
    :func:`accuracy`'s own per-entry scaled reference, which keeps their bits."""
    mags = (
        np.abs(np.concatenate([hi.real.ravel(), hi.imag.ravel()]))
        if hi.dtype.kind == "c"
        else np.abs(hi.ravel())
    )
    mags = mags[np.isfinite(mags) & (mags != 0)]
    return bool(mags.size) and float(mags.min()) < 2.0**-960


def _grade_underflow(c, a, b, ref, k, real, scaled):
    """The grade with the underflow allowance of the standard model with gradual underflow:
    ``max_ij |Ĉ - C|_ij / (k u (|A||B|)_ij + k u λ)``, λ the smallest normal number (the XBLAS
    test ratio carries the same kind of term), over entries where Ĉ and C are finite. It equals
    the plain grade wherever ``(|A||B|)_ij >> λ``; in the subnormal range no result, not even
    the correctly rounded one, can meet ``k u |A||B|`` alone.

    With ``scaled`` the exact product is evaluated per entry times ``2**-(s_i + t_j)`` (row and
    column maximum exponents, as :func:`emulinalg.reference.accuracy` does without ``ref``), so
    the rounding errors of results in the subnormal range are not lost to ``lo``'s underflow.
    """
    u = UNIT_ROUNDOFF[real]
    lam = float(np.finfo(real).tiny)
    cplx = np.iscomplexobj(c) or np.iscomplexobj(ref[0])
    with np.errstate(all="ignore"):
        c = np.asarray(c).astype(np.complex128 if cplx else np.float64)
        ok = np.isfinite(c) & np.isfinite(ref[0])
        if not ok.any():
            return 0.0
        if scaled:
            hi, lo, sigma = scaled
            c = ldexp(np.where(ok, c, 0), -sigma)
        else:
            (hi, lo), sigma = ref, np.zeros(c.shape, dtype=np.int64)
        den = _abs_product(a, b, sigma)
        err = np.abs(np.where(ok, (c - hi) - lo, 0))
        ratio = err / (k * u * den + k * u * np.ldexp(lam, -sigma))
        return float(np.where(np.isnan(ratio), 0.0, ratio)[ok].max())


def _scaled_exact(a, b):
    """``(hi, lo, sigma)``: the exact product times ``2**-sigma``, sigma_ij = s_i + t_j from the
    row maxima of |A| and column maxima of |B| (the reference's own per-entry scaling)."""
    from emulinalg.reference import _exact_components

    sigma = _line_exponents(a, 1)[:, None] + _line_exponents(b, 0)[None, :]
    his, los = _exact_components(a, b, extra_exp=-sigma)
    if len(his) == 2:
        return his[0] + 1j * his[1], los[0] + 1j * los[1], sigma
    return his[0], los[0], sigma


def _line_exponents(x, axis):
    parts = [x.real, x.imag] if np.iscomplexobj(x) else [x]
    big = np.zeros(x.shape[1 - axis])
    for p in parts:
        p = np.where(np.isfinite(p), np.abs(p), 0).astype(np.float64)
        big = np.maximum(big, p.max(axis=axis, initial=0.0))
    return np.frexp(big)[1].astype(np.int64)


def _subnormal_range(a, b, real) -> bool:
    """Whether some nonzero ``(|A||B|)_ij`` lies below the smallest normal number λ of the
    result's precision: there the rounding error of the result alone, up to half the smallest
    subnormal, can exceed ``k u |A||B|``, and only the grade with the underflow allowance
    (``grade_un``) is attainable."""
    with np.errstate(all="ignore"):
        den = _abs_product(a, b, 0)
    lam = float(np.finfo(real).tiny)
    return bool(((den > 0) & (den < lam)).any())


def _abs_product(a, b, sigma):
    """``(|A||B|) * 2**-sigma`` (moduli of the entries; non-finite entries count as 0), in
    float64 on operands scaled by powers of two per row / column, so it neither overflows nor
    loses the subnormal range."""

    def mod(x):
        return np.abs(np.where(np.isfinite(x), x, 0)).astype(np.float64)

    ma, mb = mod(a), mod(b)
    ea = _line_exponents(a, 1)
    eb = _line_exponents(b, 0)
    p = np.ldexp(ma, -ea[:, None]) @ np.ldexp(mb, -eb[None, :])
    return np.ldexp(p, ea[:, None] + eb[None, :] - sigma)


def _plan_fields(plan, prefix="", full=True):
    """The plan's choices as record fields (``full=False``: scheme, native entries, fallback)."""
    if plan is None:
        return {f"{prefix}scheme": "?", f"{prefix}plan": None}
    out = {
        f"{prefix}scheme": plan.scheme,
        f"{prefix}native_entries": plan.native_entries,
        f"{prefix}fallback": plan.fallback,
    }
    if full:
        out.update(
            {
                f"{prefix}gemms": plan.gemms,
                f"{prefix}k_block": plan.k_block,
                f"{prefix}plan_backend": plan.backend,
                f"{prefix}plan": str(plan),
            }
        )
    return out


# Per part of a complex result (``reference.accuracy``): a native GEMM computes each part to
# the accuracy of its own sums, and the verdict asks as much of each part.
PART_KEYS = (("bits_maxrel_re", "maxrel re"), ("bits_cw_re", "cw re"),
             ("bits_maxrel_im", "maxrel im"), ("bits_cw_im", "cw im"))  # fmt: skip


def _verdict(emu, nat, same_pattern):
    reasons = []
    if not same_pattern:
        reasons.append("non-finite pattern differs from native")
    keys = (("bits_maxrel", "maxrel"), ("bits_cw", "cw"))
    if "bits_cw_re" in emu and "bits_cw_re" in nat:
        keys += PART_KEYS
    for key, label in keys:
        e, n = emu[key], nat[key]
        if not (e >= n):  # NaN counts as a failure
            reasons.append(f"{label} bits {e:.2f} < native {n:.2f}")
    return reasons


def _part_fields(emu, nat, dfl):
    """The per-part bits of a complex result, emulated, native and default strategy."""
    pairs = (("", emu), ("native_", nat), ("default_", dfl))
    return {f"{p}{key}": x[key] for key, _ in PART_KEYS if key in emu for p, x in pairs}


def _case_fields(case, backend):
    """The fields naming a case in its record (a crashed case's record has these too)."""
    return {
        "suite": "graded", "backend": backend, "case": case.name, "family": case.family,
        "dtype": case.dtype, "m": case.m, "n": case.n, "k": case.k,
    }  # fmt: skip


def run_case(case: Case, xp=np, backend: str = "numpy") -> dict:
    """Grade one case on one backend; returns its record (see :func:`run_suite`)."""
    import emulinalg
    from emulinalg.reference import accuracy, exact_matmul

    a_h, b_h = case.operands()
    real = REAL_DTYPE[case.dtype]
    u = UNIT_ROUNDOFF[real]
    rec = {
        **_case_fields(case, backend),
        "op": "matmul",
        "phi": case.phi,
        "params": {k: v for k, v in case.params},
        "seed": case.seed,
        "precision": real if case.precision is None else case.precision,
        "nonfinite_inputs": not (np.isfinite(a_h).all() and np.isfinite(b_h).all()),
        "reference": "exact",
    }
    t0 = time.perf_counter()
    with backend_env(backend):
        a, b = xp.asarray(a_h), xp.asarray(b_h)
        with np.errstate(all="ignore"):
            with emulinalg.config(strategy="eager"):
                c_emu = emulinalg.matmul(a, b, precision=case.precision)
                plan = emulinalg.last_plan()
            c_def = emulinalg.matmul(a, b, precision=case.precision)
            plan_def = emulinalg.last_plan()
            c_nat = xp.matmul(a, b)
    c_emu, c_def, c_nat = (_to_host(xp, c) for c in (c_emu, c_def, c_nat))
    ref = exact_matmul(a_h, b_h)
    scaled = _uses_scaled_reference(ref[0])
    rec["reference"] = "exact (per-entry scaled)" if scaled else "exact"

    def grade(c):
        return accuracy(c, a_h, b_h) if scaled else accuracy(c, a_h, b_h, ref=ref)

    emu, dfl, nat = grade(c_emu), grade(c_def), grade(c_nat)
    same = same_nonfinite_pattern(c_emu, c_nat)
    same_def = same_nonfinite_pattern(c_def, c_nat)
    g_emu, g_nat, g_def = (x["maxcw"] / (case.k * u) for x in (emu, nat, dfl))
    sc = _scaled_exact(a_h, b_h) if scaled else None
    gu_emu, gu_nat = (_grade_underflow(c, a_h, b_h, ref, case.k, real, sc) for c in (c_emu, c_nat))
    reasons = _verdict(emu, nat, same)
    reasons += [f"default strategy: {r}" for r in _verdict(dfl, nat, same_def)]
    if c_emu.dtype != c_nat.dtype:
        reasons.append(f"dtype {c_emu.dtype} != native {c_nat.dtype}")
    rec.update(
        {
            "bits_maxrel": emu["bits_maxrel"],
            "bits_cw": emu["bits_cw"],
            "native_bits_maxrel": nat["bits_maxrel"],
            "native_bits_cw": nat["bits_cw"],
            **_part_fields(emu, nat, dfl),
            "grade": g_emu,
            "native_grade": g_nat,
            "grade_pass": bool(g_emu <= 1.0),
            "native_grade_pass": bool(g_nat <= 1.0),
            "grade_un": gu_emu,
            "native_grade_un": gu_nat,
            "grade_un_pass": bool(gu_emu <= 1.0),
            "subnormal_range": _subnormal_range(a_h, b_h, real),
            "nonfinite_equal": same,
            "nonfinite_mismatch_exact": emu["nonfinite_mismatch"],
            "native_nonfinite_mismatch_exact": nat["nonfinite_mismatch"],
            "compared": emu["compared"],
            "normwise": emu["normwise"],
            "native_normwise": nat["normwise"],
            **_plan_fields(plan),
            "default_bits_maxrel": dfl["bits_maxrel"],
            "default_bits_cw": dfl["bits_cw"],
            "default_grade": g_def,
            "default_nonfinite_equal": same_def,
            **_plan_fields(plan_def, "default_", full=False),
            "verdict": "pass" if not reasons else "FAIL",
            "verdict_reasons": reasons,
            "seconds": time.perf_counter() - t0,
        }
    )
    return rec


def _device(xp, backend):
    if backend == "cupy":
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return (
            name.decode() if isinstance(name, bytes) else str(name)
        ), f"cupy.matmul (cupy {cupy.__version__}, cuBLAS)"
    return cpu_description(), f"numpy.matmul (numpy {np.__version__}, BLAS: {blas()})"


def run_suite(
    xp=np, backend: str = "numpy", quick: bool = False, *, only=None, progress=None
) -> list[dict]:
    """Run the graded suite on one backend.

    Parameters
    ----------
    xp : module
        The array library: ``numpy`` (backends "numpy" and "amx") or ``cupy``.
    backend : {"numpy", "cupy", "amx"}
        Label of the emulation backend; "amx" selects the AMX backend for numpy arrays, "numpy"
        keeps them on the numpy backend (``EMULINALG_AMX=0`` while the cases run).
    quick : bool
        The CI subset of the cases.
    only : callable, optional
        Filter ``Case -> bool``.
    progress : callable, optional
        Called with each record as it is produced.

    Returns
    -------
    list of dict
        One record per case: the case (name, family, dtype, m, k, n, params, seed), effective
        bits of the emulated product (``bits_maxrel``, ``bits_cw``) and of the native one
        (``native_bits_*``), grades ``grade``/``native_grade`` (g <= 1 passes), the plan
        (``scheme``, ``native_entries``, ``fallback``, ``plan``), the default strategy's figures
        and plan (``default_*``), ``nonfinite_equal`` and the ``verdict`` ("pass"/"FAIL") with
        its ``verdict_reasons``.

    Raises
    ------
    ModuleNotFoundError
        ``backend="cupy"`` without cupy (the message names the extra to install).
    RuntimeError
        If the backend cannot run here otherwise.
    """
    if backend == "cupy":
        _extras.require("cupy", needed_by="emulinalg.harness.suite.run_suite(backend='cupy')")
    why = backend_missing(backend)
    if why:
        raise RuntimeError(why)
    from emulinalg import __version__

    device, native = _device(xp, backend)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    records = []
    for case in cases(quick=quick):
        if only is not None and not only(case):
            continue
        try:
            rec = run_case(case, xp, backend)
        except Exception as exc:  # a crash is a finding: record it, keep going
            rec = {
                **_case_fields(case, backend),
                "verdict": "FAIL",
                "verdict_reasons": [f"crash: {type(exc).__name__}: {exc}"],
                "error": f"{type(exc).__name__}: {exc}",
            }
        rec.update({"device": device, "native": native, "emulinalg": __version__, "date": date})
        records.append(rec)
        if progress is not None:
            progress(rec)
    return records


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------

COLUMNS = (
    "case",
    "dtype",
    "k",
    "bits mr/cw",
    "native mr/cw",
    "g / native g",
    "scheme",
    "native entries",
    "default",
    "verdict",
)


def _b(x):
    if x is None:
        return "?"
    if math.isinf(x):
        return "exact" if x > 0 else "-inf"
    return f"{x:.1f}"


def _g(x):
    if x is None:
        return "?"
    if x == 0:
        return "0"
    return f"{x:.2g}"


def _short_scheme(s):
    return (
        (s or "?")
        .replace("OzakiII(moduli=", "II(")
        .replace(", mode=accurate)", ")")
        .replace("OzakiI(slices=", "I(")
    )


def row(rec) -> list[str]:
    """The table cells of one record (see ``COLUMNS``)."""
    if "error" in rec:
        return [rec["case"], rec["dtype"], str(rec["k"]), "-", "-", "-", "-", "-", "-", "CRASH"]
    if (rec.get("default_fallback") or "").startswith("performant"):
        default = "native"
    else:
        default = f"{_short_scheme(rec.get('default_scheme'))} "
        default += f"{_b(rec['default_bits_maxrel'])}/{_b(rec['default_bits_cw'])}"
    verdict = rec["verdict"]
    if not rec.get("grade_pass", True):
        verdict += ", g>1"
    return [
        rec["case"],
        rec["dtype"],
        str(rec["k"]),
        f"{_b(rec['bits_maxrel'])}/{_b(rec['bits_cw'])}",
        f"{_b(rec['native_bits_maxrel'])}/{_b(rec['native_bits_cw'])}",
        f"{_g(rec['grade'])} / {_g(rec['native_grade'])}",
        _short_scheme(rec.get("scheme")),
        str(rec.get("native_entries", 0)),
        default,
        verdict,
    ]


def summary(records) -> str:
    """One line: cases, verdict counts, grade passes (emulated and native)."""
    n = len(records)
    fails = [r for r in records if r["verdict"] != "pass"]
    g_fail = [r for r in records if not r.get("grade_pass", False)]
    ng_fail = [r for r in records if not r.get("native_grade_pass", False)]
    fb = sum(1 for r in records if r.get("native_entries"))
    return (
        f"{n} cases: {n - len(fails)} pass, {len(fails)} FAIL; emulated grade g <= 1 in "
        f"{n - len(g_fail)} (native: {n - len(ng_fail)}); {fb} with entries taken from native"
    )


def text_table(records) -> str:
    rows = [list(COLUMNS)] + [row(r) for r in records]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(summary(records))
    for r in records:
        if r["verdict"] != "pass":
            lines.append(
                f"FAIL {r['case']}: {'; '.join(r['verdict_reasons'])}; plan: {r.get('plan')}"
            )
    return "\n".join(lines)


def markdown_table(records) -> str:
    def esc(s):
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in records:
        cells = row(r)
        cells[0] = f"`{cells[0]}`"
        lines.append("| " + " | ".join(esc(c) for c in cells) + " |")
    lines += ["", summary(records)]
    fails = [r for r in records if r["verdict"] != "pass"]
    if fails:
        lines += ["", "Failing cases:", ""]
        lines += [
            f"- `{r['case']}`: {'; '.join(r['verdict_reasons'])}; plan: `{r.get('plan')}`"
            for r in fails
        ]
    return "\n".join(lines) + "\n"


def json_safe(rec) -> dict:
    """The record with non-finite floats replaced (JSON has none): +inf bits -> null (exact)."""

    def fix(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None if v > 0 else ("-inf" if v < 0 else "nan")
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    return {k: fix(v) for k, v in rec.items()}


# --------------------------------------------------------------------------------------------
# command line: python -m emulinalg grade
# --------------------------------------------------------------------------------------------


def add_parser(sub):
    """The ``grade`` subcommand of ``python -m emulinalg``."""
    p = sub.add_parser(
        "grade",
        help="the graded accuracy suite: emulated vs native against the exact product",
        description="Run the graded accuracy suite (issue #6) on one backend: for every case, "
        "effective bits (max relative and componentwise) of the emulated product at the default "
        "precision and of the native product against the exact one, the grade "
        "g = max |C^-C| / (k u |A||B|), the plan, and the verdict (emulated bits >= native bits "
        "on both measures, same non-finite pattern as native).",
    )
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="numpy",
        help="numpy (default; CPU reference), cupy (GPU) or amx (numpy arrays on the Intel "
        "AMX backend)",
    )
    p.add_argument("--quick", action="store_true", help="the CI subset (seconds, not minutes)")
    p.add_argument(
        "--case",
        action="append",
        metavar="TEXT",
        help="only cases whose name contains TEXT (repeatable)",
    )
    p.add_argument("--out", metavar="FILE.jsonl", help="write one JSON record per case")
    p.add_argument("--table", metavar="FILE.md", help="write the table as markdown")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=main)
    return p


def command_line(args) -> str:
    parts = ["python", "-m", "emulinalg", "grade", "--backend", args.backend]
    if args.quick:
        parts.append("--quick")
    for c in args.case or []:
        parts += ["--case", c]
    return " ".join(parts)


def main(args) -> int:
    """Entry point of ``python -m emulinalg grade``; exit status 1 when a case fails."""
    import json
    import sys

    why = backend_missing(args.backend)
    if why:
        print(f"grade: {why}", file=sys.stderr)
        return 2
    xp = np
    if args.backend == "cupy":
        import cupy as xp
    command = command_line(args)
    pick = None
    if args.case:
        pick = lambda c: any(t in c.name for t in args.case)  # noqa: E731

    out = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115

    def progress(rec):  # records are written as they come: a crash keeps the ones before it
        rec["command"] = command
        if out:
            out.write(json.dumps(json_safe(rec), allow_nan=False) + "\n")
            out.flush()
        if not args.quiet:
            print(f"grade: {rec['case']}: {rec['verdict']}", file=sys.stderr, flush=True)

    try:
        records = run_suite(xp, args.backend, quick=args.quick, only=pick, progress=progress)
    finally:
        if out:
            out.close()
    print(text_table(records))
    if args.table:
        with open(args.table, "w", encoding="utf-8") as fh:
            fh.write(markdown_table(records))
    return 0 if all(r["verdict"] == "pass" for r in records) else 1
