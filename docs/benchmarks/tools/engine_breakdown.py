"""Where the emulated product's time goes outside its named stages (GPU diagnostics).

Wraps engine helpers in extra stages (``_timing.staged``) and times one product per dtype at the
default level (strategy="eager") with device synchronisation at every stage boundary; prints
the exclusive seconds per stage and the untimed rest.

    python docs/benchmarks/tools/engine_breakdown.py -N 8192 --dtype float64,float32
"""

from __future__ import annotations

import argparse
import json

import emulinalg
from emulinalg import _planner
from emulinalg._timing import staged
from emulinalg.algorithm import operands, scaling
from emulinalg.harness.bench import best_of
from emulinalg.inputs import phi_matrix

WRAP = {
    (operands, "parts"): "x:parts",
    (operands, "finite_lines"): "x:finite_lines",
    (_planner, "faster"): "x:cost_model",
    (_planner, "gemm_count"): "x:plan",
    (scaling, "ozaki2_shifts"): "x:shifts",
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-N", type=int, default=8192)
    p.add_argument("--dtype", default="float64,float32")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args(argv)
    import cupy as cp

    for (mod, name), label in WRAP.items():
        setattr(mod, name, staged(label)(getattr(mod, name)))
    import emulinalg.backends.cupy as cb  # its product hook imported ozaki2_shifts by name

    cb.products.ozaki2_shifts = scaling.ozaki2_shifts
    sync = cp.cuda.get_current_stream().synchronize
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    for dt in args.dtype.split(","):
        a = cp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=1))
        b = cp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=2))
        with emulinalg.config(strategy="eager"):
            t, st = best_of(lambda a=a, b=b: emulinalg.matmul(a, b), args.repeat, sync)
        rec = {"dtype": dt, "N": args.N, "phi": args.phi, "seconds": t,
               "stages_ms": {k: round(v * 1e3, 3) for k, v in sorted(st.items())},
               "untimed_ms": round((t - sum(st.values())) * 1e3, 3),
               "scheme": emulinalg.last_plan().scheme}  # fmt: skip
        print(json.dumps(rec), flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
