"""The host time a product call adds to the library's own matmul: ``emulinalg.matmul`` under the
default strategy against ``numpy.matmul`` (and ``cupy.matmul`` with ``--cupy``) on 64 x 64
float64 operands, whose product costs a few microseconds, so what is left is the call's own
Python (validation, the plan, the cost model's verdict). Best of 7 rounds of 2,000 calls each;
one JSON line per library (the difference is ``overhead_us``). Issue #24 allows a default
product at N = 4096 (2.4 ms of DGEMM on the H200) 3 % over native.

    python docs/benchmarks/tools/call_overhead.py [--cupy] [--out X.jsonl] [--tree LABEL] \
        [--profile 20]

``--profile N``: also the N host functions of most own time over 3,000 calls (cProfile).
"""

from __future__ import annotations

import argparse
import json
import time

import emulinalg
from emulinalg.inputs import phi_matrix


def _best_us(fn, sync, calls=2000, rounds=7):
    for _ in range(200):
        fn()
    sync()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t) / calls)
    return 1e6 * best


def _profile(fn, sync, top, calls=3000):
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    sync()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    print("\n".join(buf.getvalue().splitlines()[4:]), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cupy", action="store_true")
    p.add_argument("--out")
    p.add_argument("--tree", default="")
    p.add_argument("--profile", type=int, default=0)
    args = p.parse_args()
    import numpy as np

    libs = [("numpy", np, lambda: None)]
    if args.cupy:
        import cupy as cp

        libs.append(("cupy", cp, cp.cuda.Device().synchronize))
    for name, lib, sync in libs:
        a = lib.asarray(phi_matrix((64, 64), 1.0, "float64", seed=1))
        b = lib.asarray(phi_matrix((64, 64), 1.0, "float64", seed=2))
        native = _best_us(lambda lib=lib, a=a, b=b: lib.matmul(a, b), sync)
        ours = _best_us(lambda a=a, b=b: emulinalg.matmul(a, b), sync)
        rec = {"library": name, "n": 64, "dtype": "float64", "native_us": round(native, 1),
               "emulinalg_us": round(ours, 1), "overhead_us": round(ours - native, 1),
               "plan": str(emulinalg.last_plan())[:100], "tree": args.tree}  # fmt: skip
        print(json.dumps(rec), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
        if args.profile:
            _profile(lambda a=a, b=b: emulinalg.matmul(a, b), sync, args.profile)


if __name__ == "__main__":
    main()
