"""Cost of the statistics that choose a precision level's configuration (issue #6: at most
10 % of the emulated GEMM's time at N = 8192 on the GPU, N = 2048 on the CPU).

One emulated product per dtype at the default level (strategy="eager"), stage times recorded
(device-synchronised on cupy); prints and writes JSON lines with the share of the
``statistics`` stage (line exponents and norms, the accurate-mode bound GEMM, the certificate's
lower-bound GEMM and its min-reduction) in the end-to-end time.

    python docs/benchmarks/tools/overhead.py --backend numpy -N 2048 --out overhead.jsonl
    python docs/benchmarks/tools/overhead.py --backend cupy -N 8192 --out overhead.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time

import emulinalg
from emulinalg.harness.bench import best_of
from emulinalg.inputs import phi_matrix


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
    p.add_argument("-N", type=int, default=2048)
    p.add_argument("--dtype", default="float64,float32")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out")
    args = p.parse_args(argv)
    command = "python docs/benchmarks/tools/overhead.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    if args.backend == "cupy":
        import cupy as xp

        sync = xp.cuda.get_current_stream().synchronize
        device = xp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    else:
        import numpy as xp

        def sync():
            return None

        device = "cpu"
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    for dt in args.dtype.split(","):
        a = xp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=1))
        b = xp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=2))
        with emulinalg.config(strategy="eager"):  # after a warm-up call (kernels, plans)
            t, stages = best_of(lambda a=a, b=b: emulinalg.matmul(a, b), args.repeat, sync)
        a @ b  # warm-up: the native figure below is a warm call too
        sync()
        t0 = time.perf_counter()
        a @ b
        sync()
        tn = time.perf_counter() - t0
        rec = {
            "backend": args.backend, "dtype": dt, "N": args.N, "phi": args.phi,
            "scheme": emulinalg.last_plan().scheme, "seconds": t, "native_seconds": tn,
            "stages": stages, "statistics_share": stages.get("statistics", 0.0) / t,
            "device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": command,
        }  # fmt: skip
        print(json.dumps(rec), flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
