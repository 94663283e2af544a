"""What the refit of the most cancelled entries costs a level product, unprofiled (GPU
diagnostics, issue #24): the eager level timed with the refit (``_planner.refits``) on and off,
and with its pick read back before the recomputation is queued (``refit_pick(...,
defer=False)``, the form before the deferred pick), interleaved (the order rotated each round),
on the same operands; back to back, or with a pause before each call (``--pause``: the GPU
idle, as before a single product).

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
from emulinalg.backends.cupy import refit as cupy_refit
from emulinalg.inputs import phi_matrix

# the variants: (refit on, its pick deferred)
VARIANTS = {"deferred": (True, True), "read_back": (True, False), "off": (False, True)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("--rows", default="float64:1,float32:0.5")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--pause", type=float, default=0.0, help="seconds idle before each call")
    p.add_argument("--out")
    args = p.parse_args()
    refits = _planner.refits
    pick_defaults = cupy_refit.refit_pick.__defaults__  # (exclude, everything, defer)
    for row in args.rows.split(","):
        dt, phi = row.split(":")
        a = cp.asarray(phi_matrix((args.N, args.N), float(phi), dt, seed=1))
        b = cp.asarray(phi_matrix((args.N, args.N), float(phi), dt, seed=2))

        def run(variant, a=a, b=b):
            refit, defer = VARIANTS[variant]
            _planner.refits = refits if refit else (lambda *_: False)
            cupy_refit.refit_pick.__defaults__ = pick_defaults[:2] + (defer,)
            cp.cuda.Device().synchronize()
            if args.pause:
                time.sleep(args.pause)
            t = time.perf_counter()
            with emulinalg.config(strategy="eager"):
                emulinalg.matmul(a, b)
            cp.cuda.Device().synchronize()
            return 1e3 * (time.perf_counter() - t)

        for v in VARIANTS:
            run(v)
        ts = {v: [] for v in VARIANTS}
        names = list(VARIANTS)
        for r in range(args.rounds):
            for v in names[r % len(names) :] + names[: r % len(names)]:
                ts[v].append(round(run(v), 2))
        _planner.refits = refits
        cupy_refit.refit_pick.__defaults__ = pick_defaults
        rec = {"dtype": dt, "N": args.N, "phi": float(phi), "rounds": args.rounds,
               "pause_s": args.pause}  # fmt: skip
        for v in VARIANTS:
            rec[f"{v}_ms"] = sorted(ts[v])
            rec[f"{v}_median_ms"] = round(statistics.median(ts[v]), 2)
        print(json.dumps(rec), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
        del a, b
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
