"""``python -m emulinalg bench``: its options, the :class:`.bench.Settings` they give (and the
command line that reproduces them), and the command's body: measure or read records, print a
table, draw plots (:mod:`.plots`)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from emulinalg import _extras

from .bench import DTYPES, SHAPES, Progress, Settings, parse_method, run
from .devices import FAMILIES
from .records import bits_table, load_records, table


def _split_top(text: str) -> list[str]:
    """Split at commas outside parentheses/brackets: 'float64,OzakiII(14, fast)' -> 2 items."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x.strip() for x in out if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in _split_top(text)]


def _floats(text: str) -> list[float]:
    return [float(x) for x in _split_top(text)]


def _flat(values) -> list | None:
    """Append-actions give lists of lists (or, after :func:`.cli.main`, flat lists)."""
    if not values:
        return None
    out = []
    for v in values:
        out.extend(v if isinstance(v, list) else [v])
    return out


# --quick: square at both sizes, the other shapes at the larger; the stage-recording run is the
# warm-up; repeats stop after a second of timed runs.
QUICK = {
    "sizes": [128, 256],
    "shapes": ["square", "tall-skinny", "batched"],
    "dtypes": ["float64", "float32"],
    "phis": [1.0],
    "repeat": 5,
    "warmup": 0,
    "case_seconds": 1.0,
}


def add_parser(sub) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to ``python -m emulinalg``'s subparsers."""
    p = sub.add_parser(
        "bench",
        help="benchmark emulated against native products: throughput, bits, plots",
        description="Time emulated and native products side by side on phi-matrices, grade "
        "both against the exact product, write JSON-lines records (format: docs/performance.md) "
        "and draw plots. Lists are comma-separated or repeated options.",
    )
    many = {"action": "append"}
    p.add_argument(
        "--backend",
        type=_split_top,
        metavar="B[,B...]",
        help="numpy (default: numpy arrays on the numpy backend), cupy, dask, amx (numpy "
        "arrays on the Intel AMX backend), or all (every one installed)",
        **many,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small sweep, about a minute on 2 CPU cores: square N=128,256, tall-skinny and "
        "batched N=256, float64 and float32, phi=1, the levels and a few explicit schemes, "
        "5 repeats (options given explicitly override these)",
    )
    p.add_argument(
        "--sizes",
        "-N",
        type=_ints,
        metavar="N[,N...]",
        help="sizes N (default per "
        "backend: numpy 256,512,1024; cupy 4096,8192,16384; dask 512,1024)",
        **many,
    )
    p.add_argument(
        "--shape",
        type=_split_top,
        metavar="S[,S...]",
        help="square, tall-skinny "
        "(16N x N/4 x N/4), inner (N/4 x N/4, k=16N), batched (8 x N/2); "
        "default square,tall-skinny,batched",
        **many,
    )
    p.add_argument(
        "--dtype",
        type=_split_top,
        metavar="D[,D...]",
        help="float64, float32, complex128, complex64 (default float64,float32)",
        **many,
    )
    p.add_argument(
        "--precision",
        type=_split_top,
        metavar="P[,P...]",
        help="methods: float64, "
        "float32, bit counts, LEVEL[ozaki1|ozaki2], OzakiII(moduli=n, mode=fast|"
        "accurate), OzakiI(slices=p), BF16x3(), BF16xN(slices=s, products=p) (default: the "
        "dtype's level with both families "
        "and explicit schemes near it)",
        **many,
    )
    p.add_argument(
        "--phi",
        type=_floats,
        metavar="X[,X...]",
        help="exponent spread phi of the inputs (default 0.5,1,2)",
        **many,
    )
    p.add_argument("--repeat", type=int, help="timed runs per measurement, median (default 10)")
    p.add_argument("--warmup", type=int, help="untimed runs before them (default 1)")
    p.add_argument(
        "--case-seconds",
        type=float,
        metavar="S",
        help="stop repeating once the timed runs of one measurement took S seconds (default 30)",
    )
    p.add_argument(
        "--ref-rows",
        type=int,
        default=32,
        metavar="R",
        help="rows of A graded against the exact product (default 32; 0 = all)",
    )
    p.add_argument(
        "--ref-cols",
        type=int,
        default=0,
        metavar="C",
        help="columns of B graded (evenly spaced; default 0 = all): large N needs both",
    )
    p.add_argument(
        "--strategy",
        choices=("eager", "performant"),
        default="eager",
        help="eager (default) always emulates; performant lets emulinalg run native "
        "where that is faster",
    )
    p.add_argument(
        "--no-stages",
        action="store_true",
        help="skip the extra run per method that records where the time goes",
    )
    p.add_argument(
        "--ref-workers",
        type=int,
        default=0,
        metavar="W",
        help="compute the exact references in W processes while the device measures (for "
        "GPU sweeps: the host is idle meanwhile; default 0: inline)",
    )
    p.add_argument("--chunks", type=int, help="dask: block size (default half of each axis)")
    p.add_argument(
        "--torch",
        action="store_true",
        help="numpy/amx: also time torch.matmul (MKL/oneDNN) on the same inputs; records get "
        "torch_seconds, torch_bits_* and speedup_best_native (against the faster native)",
    )
    p.add_argument(
        "--gemmul8",
        metavar="LIB",
        help="cupy: GEMMul8 (accurate mode) beside each level's row, from the library LIB built "
        "by ../shared/peers/build.sh through its ctypes wrapper module gemmul8 (on PYTHONPATH): "
        "the level's count and the fewest count matching the native bits, a record each "
        "(backend gemmul8), summarized in the level's record (gemmul8_best_*, "
        "gemmul8_same_count_*); a measuring stick, not a dependency",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs (default 0)")
    p.add_argument(
        "--out",
        "-o",
        metavar="FILE.jsonl",
        help="write the records, one JSON object per line, as they are measured",
    )
    p.add_argument("--append", action="store_true", help="append to --out instead of replacing")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="draw the plots into FILE (png, svg, pdf); a "
        "FILE containing {panel} gets one file per panel (plane, speedup, stages); needs "
        'matplotlib: pip install ".[bench]"',
    )
    p.add_argument(
        "--records",
        nargs="+",
        metavar="FILE.jsonl",
        help="measure nothing: read these records (for --plot and the table)",
    )
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument(
        "--by-phi",
        action="store_true",
        help="print effective bits per method (rows) and phi (columns) instead",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=main)
    return p


def settings_from_args(args) -> Settings:
    """The :class:`Settings` of parsed ``bench`` arguments (``--quick`` fills what is unset)."""
    quick = bool(args.quick)
    q = QUICK if quick else {}
    backends = _flat(args.backend) or ["numpy"]
    if "all" in backends:
        backends = list(FAMILIES)
    bad = set(backends) - set(FAMILIES)
    if bad:
        raise ValueError(f"unknown backend(s) {sorted(bad)}; expected {FAMILIES} or all")
    shapes = _flat(args.shape) or q.get("shapes") or ["square", "tall-skinny", "batched"]
    bad = set(shapes) - set(SHAPES)
    if bad:
        raise ValueError(f"unknown shape(s) {sorted(bad)}; expected {tuple(SHAPES)}")
    dtypes = _flat(args.dtype) or q.get("dtypes") or ["float64", "float32"]
    bad = set(dtypes) - set(DTYPES)
    if bad:
        raise ValueError(f"unknown dtype(s) {sorted(bad)}; expected {DTYPES}")
    methods = _flat(args.precision)
    s = Settings(
        backends=backends,
        sizes=_flat(args.sizes) or q.get("sizes"),
        shapes=shapes,
        dtypes=dtypes,
        phis=_flat(args.phi) or q.get("phis") or [0.5, 1.0, 2.0],
        methods=[parse_method(t) for t in methods] if methods else None,
        repeat=args.repeat if args.repeat is not None else q.get("repeat", 10),
        warmup=args.warmup if args.warmup is not None else q.get("warmup", 1),
        case_seconds=args.case_seconds or q.get("case_seconds", 30.0),
        ref_rows=args.ref_rows,
        ref_cols=args.ref_cols,
        strategy=args.strategy,
        stages=not args.no_stages,
        seed=args.seed,
        chunks=args.chunks,
        ref_workers=args.ref_workers,
        torch=bool(args.torch),
        gemmul8=args.gemmul8,
        quick=quick,
    )
    if any(n < 1 for n in s.sizes or []) or s.repeat < 1 or s.warmup < 0:
        raise ValueError("sizes and --repeat must be positive, --warmup non-negative")
    s.command = command_line(s)
    return s


def command_line(s: Settings) -> str:
    """The full command that reproduces ``s`` (every setting spelled out)."""
    parts = ["python", "-m", "emulinalg", "bench", "--backend", ",".join(s.backends)]
    if s.quick:
        parts.append("--quick")
    if s.sizes:
        parts += ["--sizes", ",".join(map(str, s.sizes))]
    parts += ["--shape", ",".join(s.shapes), "--dtype", ",".join(s.dtypes)]
    if s.methods is not None:
        parts += ["--precision", ",".join(m.label.replace(" [", "[") for m in s.methods)]
    parts += ["--phi", ",".join(f"{p:g}" for p in s.phis), "--repeat", str(s.repeat)]
    parts += ["--warmup", str(s.warmup), "--case-seconds", f"{s.case_seconds:g}"]
    parts += ["--ref-rows", str(s.ref_rows)]
    if s.ref_cols:
        parts += ["--ref-cols", str(s.ref_cols)]
    parts += ["--strategy", s.strategy, "--seed", str(s.seed)]
    if not s.stages:
        parts.append("--no-stages")
    if s.chunks:
        parts += ["--chunks", str(s.chunks)]
    if s.ref_workers:
        parts += ["--ref-workers", str(s.ref_workers)]
    if s.torch:
        parts.append("--torch")
    if s.gemmul8:
        parts += ["--gemmul8", s.gemmul8]
    return " ".join(shlex.quote(p) for p in parts)


def main(args) -> int:
    """Entry point of the ``bench`` subcommand (``args`` from :mod:`.cli`)."""
    if args.plot:  # now, not after minutes of measuring
        hint = _extras.missing("matplotlib", needed_by="bench --plot")
        if hint:
            print(hint, file=sys.stderr)
            return _extras.MISSING_EXTRA
    if args.records:
        try:
            records = load_records(args.records)
        except (OSError, ValueError) as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
    else:
        try:
            settings = settings_from_args(args)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        out = open(args.out, "a" if args.append else "w", encoding="utf-8") if args.out else None  # noqa: SIM115
        try:

            def sink(rec):
                if out:
                    out.write(json.dumps(rec, allow_nan=False) + "\n")
                    out.flush()

            progress = Progress(0, enabled=not args.quiet)
            records = run(settings, sink=sink, progress=progress)
        finally:
            if out:
                out.close()
        if not records:
            print("bench: nothing measured (no requested backend is available)", file=sys.stderr)
            return 1
    if args.by_phi:
        print(bits_table(records, markdown=args.markdown))
    else:
        print(table(records, markdown=args.markdown))
    if args.plot:
        from . import plots

        paths = plots.plot(records, args.plot)
        print("bench: plots written to " + ", ".join(paths), file=sys.stderr)
    failed = [r for r in records if "error" in r]
    if failed:
        print(f"bench: {len(failed)} measurement(s) failed (see ERROR rows)", file=sys.stderr)
    return 1 if failed else 0
