"""How long a level product's device waits for its first kernel, unprofiled (GPU diagnostics,
issue #24).

Profilers delay a kernel's first launch under them (CUPTI): ``level_timeline.py`` charged 3-5 ms
before the first kernel of a float64 product at N = 16384 to ``cp.full`` in the line scan. Here
no profiler runs: a CUDA event recorded before the call and one recorded right after the line
scan's first ``cp.full`` give the device's wait, beside the host's time to that point; rounds
with Python's garbage collector on and off. With ``--trace`` also one CUPTI trace (kernels,
copies and the host's CUDA API calls; no Python tracer) of the same call, gzipped.

    python3 docs/benchmarks/tools/start_gap.py -N 16384 --out X.jsonl [--trace X.json.gz]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import time

import cupy as cp

import emulinalg
from emulinalg.backends.cupy import statistics
from emulinalg.inputs import phi_matrix


class _Marked:
    """``statistics``' cupy module with ``full`` marked: host times around it and an event after."""

    def __init__(self, marks):
        self._marks = marks

    def __getattr__(self, name):
        return getattr(cp, name)

    def full(self, *args, **kwargs):
        t = time.perf_counter()
        out = cp.full(*args, **kwargs)
        ev = cp.cuda.Event()
        ev.record()
        self._marks.append((t, time.perf_counter(), ev))
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    p.add_argument("--trace")
    args = p.parse_args()
    a = cp.asarray(phi_matrix((args.N, args.N), 1.0, args.dtype, seed=1))
    b = cp.asarray(phi_matrix((args.N, args.N), 1.0, args.dtype, seed=2))

    def call():
        with emulinalg.config(strategy="eager"):
            return emulinalg.matmul(a, b)

    marks = []
    statistics.cp = _Marked(marks)
    call()
    cp.cuda.Device().synchronize()
    for gc_off in (False, True) * 2:
        if gc_off:
            gc.disable()
        for _ in range(args.rounds):
            marks.clear()
            cp.cuda.Device().synchronize()
            e0 = cp.cuda.Event()
            e0.record()
            t0 = time.perf_counter()
            c = call()
            cp.cuda.Device().synchronize()
            wall = time.perf_counter() - t0
            del c
            t, t1, ev = marks[0]
            waited = cp.cuda.get_elapsed_time(e0, ev)
            rec = {"dtype": args.dtype, "N": args.N, "gc_off": gc_off,
                   "wall_ms": round(1e3 * wall, 2),
                   "first_full_at_host_ms": round(1e3 * (t - t0), 3),
                   "first_full_host_ms": round(1e3 * (t1 - t), 3),
                   "first_full_event_device_ms": round(waited, 3)}  # fmt: skip
            print(json.dumps(rec), flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")
        gc.enable()
    statistics.cp = cp
    if args.trace:
        import torch
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.init()
        call()
        cp.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            call()
            cp.cuda.Device().synchronize()
        path = args.trace[: -len(".gz")] if args.trace.endswith(".gz") else args.trace + ".json"
        prof.export_chrome_trace(path)
        with open(path) as fh, gzip.open(args.trace, "wt") as out:
            out.write(fh.read())


if __name__ == "__main__":
    main()
