"""Where the GPU waits during one emulated product (GPU diagnostics, issue #24).

One product (after a warm-up call) under ``torch.profiler`` with its Python tracer (a measuring
tool of the GPU machine, not a dependency of the project): the trace holds every kernel, copy and
memset on the device and every Python call on the host, on one clock. The device's busy
intervals are merged; each idle gap inside the product is charged, in 10 us samples, to the
innermost emulinalg function running on the host at that moment (and, separately, to the
innermost function of any library), so the table says which host code the device waited for.
The CUDA API calls that block the host (synchronisations, copies that are not asynchronous) are
counted with their callers.

    python3 docs/benchmarks/tools/level_timeline.py -N 16384 --dtype float64 --out X.jsonl \
        --trace X.json.gz
"""

from __future__ import annotations

import argparse
import bisect
import collections
import gzip
import json
import os
import tempfile
import time

import cupy as cp
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import emulinalg
from emulinalg.inputs import phi_matrix

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
STEP_US = 10.0
BLOCKING = ("Synchronize", "cudaMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cudaFree", "cuMemFree")


def _trace(fn, stack=True):
    """The chrome trace (dict) and wall ms of one call of ``fn`` (warmed up). ``stack``: with
    the Python tracer (which slows the host; without it the idle time is the unperturbed one)."""
    fn()
    cp.cuda.Device().synchronize()
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts, with_stack=stack, with_modules=False) as prof:
        t0 = time.perf_counter()
        with record_function("emulinalg-product"):
            fn()
            cp.cuda.Device().synchronize()
        wall = 1e3 * (time.perf_counter() - t0)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(path)
    with open(path) as fh:
        trace = json.load(fh)
    os.unlink(path)
    return trace, wall


def _short(name):
    """``emulinalg/algorithm/refit.py(40): pick`` -> ``algorithm/refit.py:pick``."""
    if "): " in name and "(" in name:
        path, func = name.split("): ", 1)
        path = path.rsplit("(", 1)[0]
        for root in ("emulinalg/", "site-packages/"):
            if root in path:
                path = path.split(root, 1)[1]
        return f"{path}:{func}"
    return name


def _kernel_name(name):
    """A kernel's name without its argument list and template noise, short enough to read."""
    name = name.split("(")[0]
    if name.startswith("void "):
        name = name[5:]
    return "fused GEMM (CUTLASS)" if "cutlass" in name else name[:60]


def analyse(trace, top=30):
    ev = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    window = [e for e in ev if e.get("name") == "emulinalg-product"]
    if not window:
        return {"error": "no emulinalg-product annotation in the trace"}
    w0 = float(window[0]["ts"])
    w1 = w0 + float(window[0]["dur"])
    main_tid = window[0].get("tid")
    gpu = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ev
                 if e.get("cat") in GPU_CATS and w0 <= float(e["ts"]) <= w1)  # fmt: skip
    busy = []
    for s, t in gpu:
        if busy and s <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], t)
        else:
            busy.append([s, t])
    busy_us = sum(t - s for s, t in busy)
    gaps, last = [], w0
    for s, t in busy:
        if s > last:
            gaps.append((last, s))
        last = max(last, t)
    if w1 > last:
        gaps.append((last, w1))
    # each gap by the device work on either side of it ("start"/"end": the product's edges)
    named = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), _kernel_name(e["name"]))
                   for e in ev
                   if e.get("cat") in GPU_CATS and w0 <= float(e["ts"]) <= w1)  # fmt: skip
    ends = sorted((t, n) for _, t, n in named)
    end_ts, start_ts = [t for t, _ in ends], [s0 for s0, _, _ in named]
    around = collections.Counter()
    for g0, g1 in gaps:
        i = bisect.bisect_right(end_ts, g0 + 1e-3) - 1
        before = ends[i][1] if i >= 0 else "start"
        j = bisect.bisect_left(start_ts, g1 - 1e-3)
        after = named[j][2] if j < len(named) else "end"
        around[f"{before} -> {after}"] += (g1 - g0) / 1e3
    py = sorted(
        ((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]) for e in ev
         if e.get("cat") == "python_function" and e.get("tid") == main_tid
         and float(e["ts"]) < w1 and float(e["ts"]) + float(e["dur"]) > w0),
        key=lambda x: (x[0], -x[1]),
    )  # fmt: skip
    starts = [p[0] for p in py]
    own, leaf, chains = collections.Counter(), collections.Counter(), collections.Counter()
    gap_hist = collections.Counter()

    parent, stack = [], []  # the frames nest: each one's enclosing frame
    for s0, _s1, _ in py:
        while stack and py[stack[-1]][1] <= s0:
            stack.pop()
        parent.append(stack[-1] if stack else -1)
        stack.append(len(parent) - 1)

    def covering(t):  # the python frames running at host time t, outermost first
        i = bisect.bisect_right(starts, t) - 1
        while i >= 0 and py[i][1] <= t:
            i = parent[i]
        frames = []
        while i >= 0:
            frames.append(py[i])
            i = parent[i]
        return frames[::-1]

    for g0, g1 in gaps:
        width = g1 - g0
        gap_hist["<20us" if width < 20 else "<100us" if width < 100 else "<1ms" if width < 1e3
                 else ">=1ms"] += width / 1e3  # fmt: skip
        t = g0 + STEP_US / 2
        while t < g1:
            step = min(STEP_US, g1 - t + STEP_US / 2) / 1e3
            frames = covering(t)
            ours = [_short(f[2]) for f in frames if "emulinalg/" in f[2]]
            own[ours[-1] if ours else "(no emulinalg frame)"] += step
            leaf[_short(frames[-1][2]) if frames else "(no python frame)"] += step
            chains[" > ".join(ours[-3:]) if ours else "(none)"] += step
            t += STEP_US
    blocking = collections.Counter()
    blocking_ms = collections.Counter()
    host_api = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and w0 <= float(e["ts"]) <= w1]  # fmt: skip
    for e in host_api:
        if any(b in e["name"] for b in BLOCKING) and "Async" not in e["name"]:
            frames = covering(float(e["ts"]))
            ours = [_short(f[2]) for f in frames if "emulinalg/" in f[2]]
            key = f"{e['name']} <- {ours[-1] if ours else '?'}"
            blocking[key] += 1
            blocking_ms[key] += float(e["dur"]) / 1e3
    launches = sum(1 for e in host_api if "Launch" in e["name"])

    def table(counter):
        return [[k, round(v, 3)] for k, v in counter.most_common(top)]

    return {
        "window_ms": round((w1 - w0) / 1e3, 3),
        "device_busy_ms": round(busy_us / 1e3, 3),
        "idle_ms": round((w1 - w0 - busy_us) / 1e3, 3),
        "gaps": len(gaps),
        "idle_by_gap_width_ms": {k: round(v, 3) for k, v in gap_hist.items()},
        "idle_by_neighbours_ms": table(around),
        "launches": launches,
        "python_events": len(py),
        "idle_by_emulinalg_function_ms": table(own),
        "idle_by_innermost_function_ms": table(leaf),
        "idle_by_emulinalg_chain_ms": table(chains),
        "blocking_calls": [[k, n, round(blocking_ms[k], 3)] for k, n in blocking.most_common(top)],
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--precision", default=None, help="default: the dtype's level")
    p.add_argument("--out")
    p.add_argument("--trace", help="also write the chrome trace (gzip) here")
    p.add_argument("--analyse", help="analyse a saved trace (.json.gz) instead of running")
    args = p.parse_args()
    if args.analyse:
        with gzip.open(args.analyse, "rt") as fh:
            print(json.dumps(analyse(json.load(fh)), indent=1))
        return
    torch.cuda.init()
    for dt in args.dtype.split(","):
        a = cp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=1))
        b = cp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=2))
        xp = emulinalg.namespace(a)
        plans = []

        def call(xp=xp, a=a, b=b, plans=plans):
            with emulinalg.config(strategy="eager"):
                plans.append(xp.matmul(a, b, precision=args.precision, explain=True)[1])

        call()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        call()
        cp.cuda.Device().synchronize()
        plain = 1e3 * (time.perf_counter() - t0)
        bare, bare_wall = _trace(call, stack=False)
        cuda_only = analyse(bare)
        trace, wall = _trace(call)
        rec = {"dtype": dt, "N": args.N, "phi": args.phi, "precision": args.precision,
               "wall_ms_unprofiled": round(plain, 2), "wall_ms_profiled": round(wall, 2),
               "without_python_tracer": {
                   "wall_ms": round(bare_wall, 2),
                   **{k: cuda_only.get(k) for k in ("window_ms", "device_busy_ms", "idle_ms",
                                                     "gaps", "idle_by_gap_width_ms",
                                                     "idle_by_neighbours_ms")},
               },
               **analyse(trace), "plan": str(plans[-1])[:400]}  # fmt: skip
        print(json.dumps(rec, indent=1), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
        if args.trace:
            path = args.trace.replace(".json.gz", f"_{dt}.json.gz")
            with gzip.open(path, "wt") as fh:
                json.dump(trace, fh)
        del a, b
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
