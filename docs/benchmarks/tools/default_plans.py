"""The default plans (precision=None, strategy="performant") on cupy arrays at the issue's sizes,
timed beside cuBLAS (native before and after, medians): does the default take the emulation
where it is faster? One JSON line per row.

    python3 default_plans.py --out default_plans.jsonl
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools" / "device"))  # gpu_records

import cupy as cp
from gpu_records import timed  # tools/device: one CUDA-event timer

import emulinalg
from emulinalg.inputs import phi_matrix

ROWS = [
    ("float64", 16384, 0.5), ("float64", 16384, 1.0), ("float64", 16384, 2.0),
    ("float32", 16384, 0.5), ("float32", 16384, 1.0), ("complex128", 8192, 1.0),
]  # fmt: skip


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    for dt, n, phi in ROWS:
        rec = _row(dt, n, phi, args.repeat)
        print(json.dumps(rec), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
        cp.get_default_memory_pool().free_all_blocks()


def _row(dt, n, phi, repeat):
    a = cp.asarray(phi_matrix((n, n), phi, dt, seed=1))
    b = cp.asarray(phi_matrix((n, n), phi, dt, seed=2))
    native = functools.partial(cp.matmul, a, b)
    emulated = functools.partial(emulinalg.matmul, a, b)
    native()
    emulated()  # warm-up (kernels, plans)
    before = timed(native, repeat=repeat, warmup=0)
    default = timed(emulated, repeat=repeat, warmup=0)
    plan = emulinalg.last_plan()
    with emulinalg.config(strategy="eager"):
        emulated()
        eager = timed(emulated, repeat=repeat, warmup=0)
        eager_plan = emulinalg.last_plan()
    after = timed(native, repeat=repeat, warmup=0)
    nat = 0.5 * (before + after)
    return {
        "what": "default_plan", "backend": "cupy", "dtype": dt, "n": n, "phi": phi,
        "native_seconds_before": before, "native_seconds_after": after,
        "default_seconds": default, "default_speedup": nat / default,
        "default_plan": str(plan), "default_emulated": plan.emulated,
        "eager_seconds": eager, "eager_speedup": nat / eager, "eager_scheme": eager_plan.scheme,
        "date": time.strftime("%Y-%m-%d"),
    }  # fmt: skip


if __name__ == "__main__":
    main()
