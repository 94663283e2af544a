"""What numpy users get by default on this CPU: ``emulinalg.matmul(a, b)`` with no precision
and the default ``strategy="performant"``, per size and dtype, its plan (backend, scheme, the
cost model's verdict) and its time beside ``numpy.matmul`` on the same inputs.

On an AMX CPU numpy arrays take the amx backend; the float64/float32 levels run there only
where the backend's cost model predicts them faster than native, otherwise the plan says
native and why (issue #9's "Done when").

    python docs/benchmarks/tools/amx_default_plans.py --sizes 2048,4096,8192 --out plans.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys

import numpy as np

import emulinalg
from emulinalg.harness.demo import _timed
from emulinalg.harness.machine import cpu_description
from emulinalg.inputs import phi_matrix


def timed(fn, repeat):
    """Median wall seconds of ``repeat`` calls after one warm-up call."""
    fn()
    return _timed(fn, repeat)[1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="2048,4096,8192")
    p.add_argument("--dtype", default="float64,float32")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args(argv)
    command = "python docs/benchmarks/tools/amx_default_plans.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    for n in (int(s) for s in args.sizes.split(",")):
        for dt in args.dtype.split(","):
            a = phi_matrix((n, n), args.phi, dt, seed=1)
            b = phi_matrix((n, n), args.phi, dt, seed=2)
            t_default = timed(lambda a=a, b=b: emulinalg.matmul(a, b), repeat=args.repeat)
            plan = emulinalg.last_plan()
            t_numpy = timed(lambda a=a, b=b: np.matmul(a, b), repeat=args.repeat)
            rec = {
                "N": n, "dtype": dt, "phi": args.phi, "backend": plan.backend,
                "precision": plan.precision, "scheme": plan.scheme, "fallback": plan.fallback,
                "notes": list(plan.notes), "plan": str(plan), "seconds": t_default,
                "numpy_seconds": t_numpy, "device": cpu_description(),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": command,
            }  # fmt: skip
            print(f"N={n} {dt}: {t_default:.3f} s (numpy.matmul {t_numpy:.3f} s) {plan}",
                  flush=True)  # fmt: skip
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
