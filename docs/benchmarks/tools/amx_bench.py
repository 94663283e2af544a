"""Microbenchmark of emulinalg._amx's tile GEMMs beside the native CPU products.

Measures, for square N x N x N products, the throughput (2 N^3 operations per second, in
Top/s) of

- ``amx_s8s8s32``: ``emulinalg._amx.gemm_s8s8s32`` (int8 -> int32, packing included);
- ``amx_bf16bf16f32``: ``emulinalg._amx.gemm_bf16bf16f32`` (bf16 -> fp32, packing included);
- ``torch_int8`` (``torch._int_mm``, oneDNN), ``torch_bf16``, ``torch_fp32``, ``torch_fp64``
  (``torch.matmul``, MKL/oneDNN), when torch is installed;
- ``numpy_fp64``: ``numpy.matmul`` (numpy's BLAS; its thread count comes from the environment,
  e.g. ``OPENBLAS_NUM_THREADS``, set by the caller);

and writes one JSON object per line. The AMX int8 result is checked against an exact product
on a block of rows (``"check"``). INT8 and BF16 rows also carry ``pct_ceiling``: the percentage
of the host's register ceiling (``--peak``, JSON lines of ``docs/benchmarks/tools/amx_peak.cpp``; by
default the 2026-11-30 figures of the 16-core host). ``"blocking"`` is the tile GEMM's
blocking spec (``EMULINALG_AMX_BLOCKING``). Each measurement is the median of repeated runs
after one warm-up run, repeated while they fit ``--budget`` seconds; sizes whose predicted
time (from the previous size, times (N/N_prev)^3) exceeds ``--max-run`` seconds are skipped
and reported as such, so the whole run stays within a few minutes even with one thread.

Usage (from the repository root, with emulinalg installed):
    OPENBLAS_NUM_THREADS=16 python3 docs/benchmarks/tools/amx_bench.py --threads 16 \\
        --sizes 1024,2048,4096,8192
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

import numpy as np


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_runs(fn, budget, repeats):
    """Warm-up run, then up to `repeats` timed runs while they fit `budget` seconds."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    spent = 0.0
    while len(times) < repeats and (not times or spent + statistics.median(times) <= budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return first, times


def bf16_bits(x):
    """float32 -> bf16 bit patterns, rounded to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def make_ops(n, threads, rng, emulate=False):
    """(name, callable, check) per benchmarked product for size n."""
    from emulinalg import _amx

    kw = {"threads": threads, "emulate": emulate}

    ops = []
    a8 = rng.integers(-128, 128, size=(n, n), dtype=np.int8)
    b8 = rng.integers(-128, 128, size=(n, n), dtype=np.int8)

    def check_s8():
        rows = min(n, 256)  # float64 BLAS is exact here: |sum| <= n * 2**14 < 2**53
        c = _amx.gemm_s8s8s32(a8[:rows], b8, **kw)
        return bool(np.array_equal(c, a8[:rows].astype(np.float64) @ b8.astype(np.float64)))

    ops.append(("amx_s8s8s32", lambda: _amx.gemm_s8s8s32(a8, b8, **kw), check_s8))
    x = rng.standard_normal((n, n)).astype(np.float32)
    y = rng.standard_normal((n, n)).astype(np.float32)
    xb, yb = bf16_bits(x), bf16_bits(y)
    ops.append(("amx_bf16bf16f32", lambda: _amx.gemm_bf16bf16f32(xb, yb, **kw), None))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(threads)
        ta8, tb8 = torch.from_numpy(a8), torch.from_numpy(b8)
        if hasattr(torch, "_int_mm"):
            ops.append(("torch_int8", lambda: torch._int_mm(ta8, tb8), None))
        for dt in ("bfloat16", "float32", "float64"):
            tx = torch.from_numpy(x).to(getattr(torch, dt))
            ty = torch.from_numpy(y).to(getattr(torch, dt))
            ops.append(
                (
                    f"torch_{dt.replace('bfloat16', 'bf16').replace('float', 'fp')}",
                    lambda tx=tx, ty=ty: torch.matmul(tx, ty),
                    None,
                )
            )
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    ops.append(("numpy_fp64", lambda: np.matmul(x64, y64), None))
    return ops


def pct_ceiling(name, threads, tops, peak):
    """Percent of the register ceiling for INT8 / BF16 ops, else None."""
    from amx_gemm_sweep import ceiling

    if "int8" in name or "s8s8" in name:
        return 100.0 * tops / ceiling(peak, threads, "s8s8s32")
    if "bf16" in name:
        return 100.0 * tops / ceiling(peak, threads, "bf16bf16f32")
    return None


def numpy_threads():
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") == "blas":
                return info.get("num_threads")
    except ImportError:
        pass
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var):
            return int(os.environ[var])
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1024,2048,4096,8192", help="comma-separated N")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--budget", type=float, default=3.0, help="seconds of timed runs per row")
    p.add_argument("--repeats", type=int, default=10, help="at most this many timed runs")
    p.add_argument("--max-run", type=float, default=12.0, help="skip runs predicted longer")
    p.add_argument("--only", default="", help="comma-separated op names (default: all)")
    p.add_argument("--out", default="-", help="JSON lines file (default: stdout)")
    p.add_argument(
        "--emulate", action="store_true", help="scalar tile model instead of AMX (dry runs)"
    )
    p.add_argument("--peak", default="", help="amx_peak JSON lines (register ceiling)")
    args = p.parse_args(argv)

    from emulinalg import _amx

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from amx_gemm_sweep import load_peak

    peak = load_peak(args.peak)

    if not (args.emulate or _amx.available()):
        print(f"amx_bench: AMX not available: {_amx.reason()}", file=sys.stderr)
        return 2
    out = sys.stdout if args.out == "-" else open(args.out, "a")  # noqa: SIM115
    only = {s for s in args.only.split(",") if s}
    common = {
        "bench": "amx_micro",
        "threads": args.threads,
        "emulate": args.emulate,
        "numpy_threads": numpy_threads(),
        "device": cpu_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "blocking": _amx.blocking()["spec"] if hasattr(_amx, "blocking") else None,
    }
    last = {}  # op -> (n, seconds) of the previous size, to predict the next one
    rng = np.random.default_rng(0)
    for n in [int(s) for s in args.sizes.split(",") if s]:
        for name, fn, check in make_ops(n, args.threads, rng, args.emulate):
            if only and name not in only:
                continue
            rec = dict(common, op=name, n=n)
            if name in last:
                n0, t0 = last[name]
                predicted = t0 * (n / n0) ** 3
                if predicted > args.max_run:
                    rec["skipped"] = f"predicted {predicted:.1f} s > --max-run {args.max_run} s"
                    print(json.dumps(rec), file=out, flush=True)
                    continue
            try:
                first, times = time_runs(fn, args.budget, args.repeats)
            except Exception as e:  # e.g. torch._int_mm without CPU support: report, go on
                rec["error"] = repr(e)
                print(json.dumps(rec), file=out, flush=True)
                continue
            sec = statistics.median(times)
            last[name] = (n, sec)
            rec.update(
                seconds=sec,
                first_seconds=first,
                repeats=len(times),
                tops=2.0 * n**3 / sec / 1e12,
            )
            pct = pct_ceiling(name, args.threads, rec["tops"], peak)
            if pct is not None:
                rec["pct_ceiling"] = pct
            if check is not None:
                rec["check"] = check()
            print(json.dumps(rec), file=out, flush=True)
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
