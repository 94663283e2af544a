"""What the refit of the most cancelled entries costs a level product, unprofiled (GPU
diagnostics, issue #24): the eager level timed with the refit (``_planner.refits``) on and off,
interleaved, on the same operands. The refit's device work is about 1.2 ms at N = 16384; the rest
of the difference is its tail on the host (the read-back of the choice, then small launches).

    python3 docs/benchmarks/tools/refit_cost.py --out X.jsonl [--rows float64:1,float32:0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import cupy as cp

import emulinalg
from emulinalg import _planner
from emulinalg.inputs import phi_matrix


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("--rows", default="float64:1,float32:0.5")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--out")
    args = p.parse_args()
    refits = _planner.refits
    for row in args.rows.split(","):
        dt, phi = row.split(":")
        a = cp.asarray(phi_matrix((args.N, args.N), float(phi), dt, seed=1))
        b = cp.asarray(phi_matrix((args.N, args.N), float(phi), dt, seed=2))

        def run(refit, a=a, b=b):
            _planner.refits = refits if refit else (lambda *_: False)
            cp.cuda.Device().synchronize()
            t = time.perf_counter()
            with emulinalg.config(strategy="eager"):
                emulinalg.matmul(a, b)
            cp.cuda.Device().synchronize()
            return 1e3 * (time.perf_counter() - t)

        run(True), run(False)
        ts = {True: [], False: []}
        for _ in range(args.rounds):
            for refit in (True, False):
                ts[refit].append(round(run(refit), 2))
        _planner.refits = refits
        rec = {"dtype": dt, "N": args.N, "phi": float(phi),
               "with_refit_ms": sorted(ts[True]), "without_refit_ms": sorted(ts[False]),
               "with_refit_median_ms": round(statistics.median(ts[True]), 2),
               "without_refit_median_ms": round(statistics.median(ts[False]), 2)}  # fmt: skip
        print(json.dumps(rec), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
        del a, b
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
