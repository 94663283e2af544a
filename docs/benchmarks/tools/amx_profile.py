"""Where an emulated product's time goes on the AMX host (issue #25 diagnostics).

For each size and dtype: numpy.matmul (and torch.matmul when importable) on the same phi inputs,
then the dtype's level (strategy="eager") timed end to end (median of --repeat after a warm-up),
its stages (``emulinalg._timing``) and one more call under cProfile: the functions with the most
own time, so host code that is not a C++ stage shows by name.

    OMP_NUM_THREADS=16 python3 docs/benchmarks/tools/amx_profile.py --sizes 4096,8192 \
        --dtype float64,float32 --out X.jsonl
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time

import numpy as np

import emulinalg
from emulinalg._timing import recording
from emulinalg.inputs import phi_matrix

LEVEL = {"float64": "float64", "complex128": "float64", "float32": "float32",
         "complex64": "float32"}  # fmt: skip


def _median(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--dtype", default="float64")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    for dt in args.dtype.split(","):
        for n in map(int, args.sizes.split(",")):
            rec = _case(n, dt, args, torch)
            print(json.dumps({k: v for k, v in rec.items() if k != "top_own"}), flush=True)
            for row in rec["top_own"][:15]:
                print("   ", row, flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")


def _case(n, dt, args, torch):
    """One size and dtype's record."""
    a = phi_matrix((n, n), args.phi, dt, seed=1)
    b = phi_matrix((n, n), args.phi, dt, seed=2)
    xp = emulinalg.namespace(a)
    rec = {"N": n, "dtype": dt, "phi": args.phi}
    t_np0 = _median(lambda: np.matmul(a, b), args.repeat)
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        rec["torch_s"] = _median(lambda: torch.matmul(ta, tb), args.repeat)
    with emulinalg.config(strategy="eager"):

        def run():
            return xp.matmul(a, b, precision=LEVEL[dt])

        _, plan = xp.matmul(a, b, precision=LEVEL[dt], explain=True)
        rec["plan"] = str(plan)
        rec["level_s"] = _median(run, args.repeat)
        with recording() as r:
            run()
        rec["stages"] = dict(r.seconds)
        pr = cProfile.Profile()
        pr.enable()
        t = time.perf_counter()
        run()
        rec["profiled_s"] = time.perf_counter() - t
        pr.disable()
    t_np1 = _median(lambda: np.matmul(a, b), args.repeat)
    rec["numpy_s"] = (t_np0 + t_np1) / 2
    rec["numpy_before_after"] = [t_np0, t_np1]
    rows = sorted(pstats.Stats(pr).stats.items(), key=lambda kv: -kv[1][2])[: args.top]
    rec["top_own"] = [
        [f"{fn[0].split('emulinalg/')[-1]}:{fn[1]}:{fn[2]}", round(v[2], 4), round(v[3], 4), v[1]]
        for fn, v in rows
    ]
    return rec


if __name__ == "__main__":
    main()
