"""Sweep of the AMX tile GEMM's blocking knobs (``emulinalg._amx.set_blocking``) on the AMX host.

For each ``--descent`` setting (threads:N), a greedy coordinate descent over the knobs of
``src_amx/blocking.hpp`` (kc, order, mc, nc, prefetch, sched, partition, pack_a, nest, stream),
starting from the built-in defaults, measures the INT8 GEMM ``gemm_s8s8s32`` (N x N x N,
packing included) for every candidate and keeps the fastest value of each knob in turn.
Then, for every ``--threads`` x ``--sizes`` pair, the defaults and the best setting of each
descent are measured for INT8 and BF16 (``gemm_bf16bf16f32``).

Every measurement is one JSON line (``"bench": "amx_sweep"``): the spec string (the value for
``EMULINALG_AMX_BLOCKING`` / ``set_blocking``), median seconds of the timed runs, Top/s and the
percentage of the register ceiling (back-to-back TDPBSSD / TDPBF16PS on resident tiles, from
``--peak``: a JSON-lines file written by ``docs/benchmarks/tools/amx_peak.cpp``; per-thread value
times threads for thread counts it lacks). ``"same"`` says that the result equals the defaults'
result bit for bit (INT8 is exact under any blocking; BF16 sums each entry's K tiles in the same
order under any blocking, so it must be bit-identical too). The last lines (``"phase": "best"``)
name the fastest spec per (op, threads, N).

Usage (from the repository root, emulinalg installed, on the AMX machine):
    python3 docs/benchmarks/tools/amx_gemm_sweep.py --descent 1:4096,16:8192 --threads 1,16 \\
        --sizes 4096,8192 --peak amx_peak.jsonl --budget 150 --out sweep.jsonl
    # verification only (no descent), e.g. under other OpenMP settings, of a sweep's winners:
    OMP_PROC_BIND=close OMP_PLACES=cores python3 docs/benchmarks/tools/amx_gemm_sweep.py \\
        --descent "" --threads 16 --sizes 8192 --best-from sweep.jsonl --out sweep-bind.jsonl
``--emulate`` runs everything on the scalar tile model (tiny sizes only: a dry run of the tool).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import numpy as np

# Candidate values per knob, in the order the descent visits the knobs. kc=4096 means "whole K"
# for every size swept here (C stays in the tiles, the previous kernel's scheme).
CANDIDATES = {
    "kc": [4, 6, 8, 10, 12, 16, 32, 64, 4096],
    "order": [0, 1],
    "mc": [64, 128, 256, 512, 1024],
    "nc": [128, 256, 512, 1024, 2048],
    "prefetch": [0, 1, 2, 3],
    "sched": [0, 1, 2],
    "partition": [0, 1],
    "pack_a": [1, 0],
    "nest": [0, 1],
    "stream": [0, 1],
}
KEYS = list(CANDIDATES)

# Register ceiling of the 16-core AMX host, 2026-11-30 (docs/benchmarks/xeon-amx-16c/), used
# when no --peak file is given: Top/s (INT8) and TFLOP/s (BF16) per thread count.
DEFAULT_PEAK = {
    1: (2.215, 0.948),
    2: (4.234, 1.859),
    4: (8.591, 3.714),
    8: (15.221, 7.461),
    16: (30.750, 14.922),
}


def load_peak(path):
    """threads -> (int8 Top/s, bf16 TFLOP/s) from amx_peak JSON lines, else DEFAULT_PEAK."""
    peak = {}
    if path:
        try:
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if not line.startswith("{"):
                        continue
                    r = json.loads(line)
                    if r.get("bench") == "amx_peak":
                        peak[int(r["threads"])] = (float(r["int8_tops"]), float(r["bf16_tflops"]))
        except (OSError, ValueError, KeyError) as e:
            print(f"amx_gemm_sweep: ignoring --peak {path}: {e!r}", file=sys.stderr)
    return peak or dict(DEFAULT_PEAK)


def ceiling(peak, threads, op):
    """Register ceiling for `threads` (nearest measured count, scaled per thread)."""
    idx = 0 if op == "s8s8s32" else 1
    if threads in peak:
        return peak[threads][idx]
    near = min(peak, key=lambda t: (abs(t - threads), t))
    return peak[near][idx] / near * threads


def spec_of(cfg):
    return ",".join(f"{k}={cfg[k]}" for k in KEYS)


def bf16_bits(x):
    """float32 -> bf16 bit patterns, rounded to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


class Runner:
    """Operands per (op, N), the defaults' result per (op, N, threads), and the timing."""

    def __init__(self, amx, args, peak, out, common):
        self.amx, self.args, self.peak, self.out, self.common = amx, args, peak, out, common
        self.operands = {}
        self.reference = {}
        self.rng = np.random.default_rng(0)

    def inputs(self, op, n):
        if (op, n) not in self.operands:
            if op == "s8s8s32":
                a = self.rng.integers(-128, 128, size=(n, n), dtype=np.int8)
                b = self.rng.integers(-128, 128, size=(n, n), dtype=np.int8)
            else:
                a = bf16_bits(self.rng.standard_normal((n, n), dtype=np.float32))
                b = bf16_bits(self.rng.standard_normal((n, n), dtype=np.float32))
            self.operands[(op, n)] = (a, b)
        return self.operands[(op, n)]

    def measure(self, op, n, threads, cfg, phase, repeats):
        """Time one configuration; returns the record (also written out)."""
        amx, args = self.amx, self.args
        a, b = self.inputs(op, n)
        fn = amx.gemm_s8s8s32 if op == "s8s8s32" else amx.gemm_bf16bf16f32
        spec = spec_of(cfg)
        amx.set_blocking("default," + spec)
        rec = dict(self.common, phase=phase, op=op, n=n, threads=threads, spec=spec)
        try:
            t0 = time.perf_counter()
            c = fn(a, b, threads=threads, emulate=args.emulate)
            first = time.perf_counter() - t0
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                c = fn(a, b, threads=threads, emulate=args.emulate)
                times.append(time.perf_counter() - t0)
        except Exception as e:  # report and go on with the next configuration
            rec["error"] = repr(e)
            self.write(rec)
            return rec
        finally:
            amx.set_blocking("default")
        sec = statistics.median(times) if times else first
        tops = 2.0 * n**3 / sec / 1e12
        ceil = ceiling(self.peak, threads, op)
        key = (op, n, threads)
        if key not in self.reference:
            self.reference[key] = c  # the first configuration measured: the defaults
        same = bool(np.array_equal(c.view(np.uint32), self.reference[key].view(np.uint32)))
        rec.update(
            seconds=sec,
            first_seconds=first,
            repeats=len(times),
            tops=tops,
            ceiling=ceil,
            pct_ceiling=100.0 * tops / ceil,
            same=same,
        )
        self.write(rec)
        mark = "" if same else "  RESULT DIFFERS FROM THE DEFAULTS'"
        print(
            f"  {op:12s} N={n:5d} t={threads:2d} {tops:7.3f} Top/s {rec['pct_ceiling']:5.1f} %"
            f"  {spec}{mark}",
            flush=True,
        )
        return rec

    def write(self, rec):
        print(json.dumps(rec), file=self.out, flush=True)


def defaults():
    """The built-in defaults as explicit values (the descent's start and the reference)."""
    return {
        "kc": 8,
        "order": 0,
        "mc": 256,
        "nc": 512,
        "prefetch": 1,
        "sched": 0,
        "partition": 0,
        "pack_a": 1,
        "nest": 0,
        "stream": 0,
    }


def descent(runner, threads, n, deadline, passes, repeats):
    """Greedy coordinate descent (INT8); returns (best cfg, best record)."""
    best = defaults()
    best_rec = runner.measure("s8s8s32", n, threads, best, "descent", repeats)
    seen = {spec_of(best): best_rec}
    for _ in range(passes):
        improved = False
        for key in KEYS:
            for val in CANDIDATES[key]:
                if time.monotonic() > deadline:
                    print(f"  descent t={threads} N={n}: time budget reached", flush=True)
                    return best, best_rec
                cfg = dict(best, **{key: val})
                spec = spec_of(cfg)
                if spec in seen:
                    continue
                rec = runner.measure("s8s8s32", n, threads, cfg, "descent", repeats)
                seen[spec] = rec
                if "tops" in rec and rec["same"] and rec["tops"] > best_rec.get("tops", 0.0):
                    best, best_rec, improved = cfg, rec, True
        if not improved:
            break
    return best, best_rec


def parse_pairs(text):
    pairs = []
    for item in text.split(","):
        if item:
            t, n = item.split(":")
            pairs.append((int(t), int(n)))
    return pairs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--descent", default="1:4096,16:8192", help="threads:N pairs to descend on")
    p.add_argument("--threads", default="1,16", help="thread counts of the verification")
    p.add_argument("--sizes", default="4096,8192", help="N of the verification")
    p.add_argument("--peak", default="", help="amx_peak JSON lines (register ceiling)")
    p.add_argument("--budget", type=float, default=150.0, help="seconds for the whole sweep")
    p.add_argument("--passes", type=int, default=2, help="descent passes over the knobs")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per configuration")
    p.add_argument("--ops", default="s8s8s32,bf16bf16f32", help="ops of the verification")
    p.add_argument(
        "--spec",
        action="append",
        default=[],
        help="extra spec to verify (key=value,...; repeatable), e.g. a previous sweep's best",
    )
    p.add_argument(
        "--best-from",
        default="",
        help="JSON lines of a previous sweep: verify its 'best' specs too",
    )
    p.add_argument("--out", default="-", help="JSON lines file (default: stdout)")
    p.add_argument("--emulate", action="store_true", help="scalar tile model (dry run)")
    args = p.parse_args(argv)

    from emulinalg import _amx

    if not (args.emulate or _amx.available()):
        print(f"amx_gemm_sweep: AMX not available: {_amx.reason()}", file=sys.stderr)
        return 2
    out = sys.stdout if args.out == "-" else open(args.out, "a")  # noqa: SIM115
    peak = load_peak(args.peak)
    common = {
        "bench": "amx_sweep",
        "emulate": args.emulate,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    runner = Runner(_amx, args, peak, out, common)
    start = time.monotonic()
    descents = parse_pairs(args.descent)
    # The descent gets what the verification (about 3 configurations x ops x settings) leaves.
    verify_share = 0.35 if args.threads and args.sizes else 0.0
    descent_deadline = start + args.budget * (1.0 - verify_share)
    found = []
    for i, (threads, n) in enumerate(descents):
        print(f"== descent: {threads} thread(s), N = {n}", flush=True)
        share = (descent_deadline - time.monotonic()) / (len(descents) - i)
        cfg, rec = descent(runner, threads, n, time.monotonic() + share, args.passes, args.repeats)
        found.append((threads, n, cfg, rec))
        print(f"   best: {spec_of(cfg)}  {rec.get('tops', float('nan')):.3f} Top/s", flush=True)

    candidates = [defaults()]
    extra = list(args.spec)
    if args.best_from:
        with open(args.best_from) as f:
            for line in f:
                if line.startswith("{"):
                    r = json.loads(line)
                    if r.get("bench") == "amx_sweep" and r.get("phase") == "best":
                        extra.append(r["spec"])
    for spec in extra:
        cfg = defaults()
        for item in spec.split(","):
            if item:
                key, val = item.split("=")
                if key not in cfg:
                    raise SystemExit(f"amx_gemm_sweep: unknown key {key!r} in --spec {spec!r}")
                cfg[key] = int(val)
        found.append((None, None, cfg, {}))
    for _, _, cfg, _ in found:
        if cfg not in candidates:
            candidates.append(cfg)
    ops = [o for o in args.ops.split(",") if o]
    results = {}  # (op, threads, n) -> list of records
    # Most threads first: if the budget runs out, the slow one-thread runs lose their extras.
    for threads in sorted({int(t) for t in args.threads.split(",") if t}, reverse=True):
        for n in [int(s) for s in args.sizes.split(",") if s]:
            print(f"== verify: {threads} thread(s), N = {n}", flush=True)
            for op in ops:
                for cfg in candidates:
                    if time.monotonic() > start + args.budget and cfg is not candidates[0]:
                        continue  # over budget: the defaults only
                    reps = 2 if threads == 1 and n >= 8192 else args.repeats
                    rec = runner.measure(op, n, threads, cfg, "verify", reps)
                    results.setdefault((op, threads, n), []).append(rec)
    # Descent records count too, for their own (op, threads, n).
    for threads, n, _, rec in found:
        if threads is not None:
            results.setdefault(("s8s8s32", threads, n), []).append(rec)

    print("== best per op, threads, N", flush=True)
    for (op, threads, n), recs in sorted(results.items()):
        ok = [r for r in recs if "tops" in r and r["same"]]
        if not ok:
            continue
        best = max(ok, key=lambda r: r["tops"])
        dflt = [r for r in ok if r["spec"] == spec_of(defaults())]
        rec = dict(
            common,
            phase="best",
            op=op,
            n=n,
            threads=threads,
            spec=best["spec"],
            tops=best["tops"],
            pct_ceiling=best["pct_ceiling"],
            default_tops=max((r["tops"] for r in dflt), default=None),
        )
        runner.write(rec)
        print(
            f"  {op:12s} N={n:5d} t={threads:2d} best {best['tops']:7.3f} Top/s "
            f"({best['pct_ceiling']:5.1f} % of the register ceiling)"
            f"  EMULINALG_AMX_BLOCKING={best['spec']}",
            flush=True,
        )
    print(f"amx_gemm_sweep: {time.monotonic() - start:.0f} s", flush=True)
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
