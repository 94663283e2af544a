"""Blocking sweep of the BF16 schedules end to end on the amx backend, beside torch.

For square N x N x N φ-matrices (φ = 1): torch.matmul float64 and float32 (MKL/oneDNN, same
threads), then, for each blocking spec (``emulinalg._amx.set_blocking``), the median seconds of
``emulinalg.matmul`` with BF16xN(6, 6) on float64 inputs and BF16x3 on float32 inputs (one
untimed run first). One JSON object per line on stdout and in --out. The blocking never
changes a result (tests/algorithm/test_bf16.py); this only measures speed.

Usage (AMX host, emulinalg installed, EMULINALG_AMX=1 set by the script):
    OMP_NUM_THREADS=16 python3 docs/benchmarks/tools/amx_bf16_sweep.py --n 8192 \\
        --specs default,kc=32,nest=0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np


def median_seconds(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--specs", default="default")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--methods", default="BF16xN(6,6),BF16x3()")
    p.add_argument("--out")
    args = p.parse_args(argv)
    os.environ["EMULINALG_AMX"] = "1"
    import emulinalg
    from emulinalg import _amx
    from emulinalg.harness.bench import parse_method
    from emulinalg.inputs import phi_matrix

    n = args.n
    a64, b64 = phi_matrix((n, n), 1.0, seed=0), phi_matrix((n, n), 1.0, seed=1)
    a32, b32 = a64.astype(np.float32), b64.astype(np.float32)
    with open(args.out or os.devnull, "a") as out:
        _sweep(args, n, a64, b64, a32, b32, out, emulinalg, _amx, parse_method)


def _sweep(args, n, a64, b64, a32, b32, out, emulinalg, _amx, parse_method):
    def emit(rec):
        rec.update(n=n, threads=os.environ.get("OMP_NUM_THREADS"),
                   cache_mb=os.environ.get("EMULINALG_AMX_CACHE_MB", "default"))  # fmt: skip
        line = json.dumps(rec)
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    try:
        import torch

        for name, (x, y) in (("torch_fp64", (a64, b64)), ("torch_fp32", (a32, b32))):
            tx, ty = torch.from_numpy(x), torch.from_numpy(y)
            t = median_seconds(lambda tx=tx, ty=ty: torch.matmul(tx, ty), 3)
            emit({"method": name, "seconds": t})
    except ImportError:
        emit({"method": "torch", "error": "not installed"})
    methods = [parse_method(t) for t in args.methods.split(";")] if ";" in args.methods else [
        parse_method(t) for t in _split(args.methods)
    ]
    for spec in args.specs.split(";"):
        before = _amx.set_blocking("default" if spec == "default" else spec)
        try:
            for m in methods:
                x, y = (a32, b32) if "BF16x3" in m.label else (a64, b64)
                t = median_seconds(
                    lambda x=x, y=y, m=m: emulinalg.matmul(x, y, precision=m.precision),
                    args.repeat,
                )
                plan = emulinalg.last_plan()
                emit({"method": m.label, "blocking": _amx.blocking()["spec"], "seconds": t,
                      "backend": plan.backend, "tflops": 2 * n**3 / t / 1e12})  # fmt: skip
        finally:
            _amx.set_blocking(before["spec"])


def _split(text):
    """Comma-separated methods, commas inside parentheses kept."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    return [*parts, cur] if cur else parts


if __name__ == "__main__":
    main()
