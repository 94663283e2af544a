"""Device time per CUDA kernel of one emulated product (GPU diagnostics, issue #24).

CUPTI (through ``torch.profiler``, a measuring tool of the GPU machine, not a dependency of the
project) records every kernel the process launches, cupy's included: per kernel name the total
device time and the number of launches, for one product at the default level and one at a
fixed scheme on the same inputs, after a warm-up call of each (``--schemes``: ``level`` under
``strategy="eager"``, ``default`` under the default strategy, ``native``, ``OzakiII(N)``).
One JSON line per product.
A run ``g8:N`` profiles GEMMul8's accurate mode with N moduli on the same inputs (the measuring
stick of issue #24, loaded from ``--g8`` only when asked; ``.device/peers`` on sys.path).

    python3 docs/benchmarks/tools/kernel_profile.py -N 16384 --dtype float64 --phi 1 --out X.jsonl
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time

import cupy as cp
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

import emulinalg
from emulinalg.inputs import phi_matrix

_CALL = "emulinalg-call"


def _kernels(fn):
    """``(wall_ms, {kernel: [device_ms, launches]}, idle)`` of one call of ``fn`` (warmed up);
    ``idle``: the device's idle time inside the call (see ``_idle``)."""
    fn()
    cp.cuda.Device().synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        with record_function(_CALL):
            fn()
            cp.cuda.Device().synchronize()
        wall = 1e3 * (time.perf_counter() - t0)
    out = {}
    for ev in prof.key_averages():
        dev = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if dev > 0 and ev.device_type == DeviceType.CUDA and ev.key != _CALL:
            # names cut to 120 characters: CUTLASS instances alike that far (the bound GEMM's
            # and the fused product's) share a key, their times added
            was = out.get(ev.key[:120], [0.0, 0])
            out[ev.key[:120]] = [round(was[0] + dev / 1e3, 3), was[1] + ev.count]
    return wall, dict(sorted(out.items(), key=lambda kv: -kv[1][0])), _idle(prof)


def _idle(prof, top=12):
    """Where the device waits for the host within the call: the call's span, the busy time (the
    union of the kernels' intervals), and the largest gaps (ms) with the kernels on either side
    (a gap before the first kernel is the host's work ahead of it)."""
    evs = prof.events()
    call = next(e for e in evs if e.name == _CALL and e.device_type == DeviceType.CPU)
    c0, c1 = call.time_range.start, call.time_range.end
    # the call's own range has a device-side twin (kineto's annotation): not a kernel
    ker = sorted((e for e in evs if e.device_type == DeviceType.CUDA and e.name != _CALL
                  and e.time_range.start >= c0), key=lambda e: e.time_range.start)  # fmt: skip
    gaps, busy, end, prev = [], 0.0, c0, "(call start)"
    for e in ker:
        s, t = e.time_range.start, e.time_range.end
        if s > end:
            gaps.append((s - end, prev, e.name))
        busy += max(0.0, t - max(s, end))
        if t > end:
            end, prev = t, e.name
    gaps.append((max(0.0, c1 - end), prev, "(call end)"))
    gaps.sort(key=lambda g: -g[0])
    return {"span_ms": round((c1 - c0) / 1e3, 3), "busy_ms": round(busy / 1e3, 3),
            "gaps": [[round(g / 1e3, 3), a[:60], b[:60]] for g, a, b in gaps[:top]],
            "events": [[round((e.time_range.start - c0) / 1e3, 4),
                        round((e.time_range.end - c0) / 1e3, 4), e.name[:60]]
                       for e in ker]}  # fmt: skip


def _host_profile(fn, top):
    """cProfile of one call of ``fn`` (synchronised at the end): the host functions by their own
    time and by cumulative time (where the host waits for the device, the wait is the caller's)."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    cp.cuda.Device().synchronize()
    prof.disable()
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
        print("\n".join(buf.getvalue().splitlines()[6:]), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--schemes", default="level,OzakiII(15)")
    p.add_argument("--out")
    p.add_argument("--host", type=int, default=0, help="also print the top N host functions")
    p.add_argument("--g8", default="/tmp/g8/libg8drv.so", help="GEMMul8's driver (runs g8:N)")
    args = p.parse_args()
    torch.cuda.init()
    for dt in args.dtype.split(","):
        a = cp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=1))
        b = cp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=2))
        for name in args.schemes.split(","):
            if name.startswith("g8:"):
                import gemmul8  # the measuring stick, never a dependency

                g8, mod, plans = gemmul8.load(args.g8), int(name[3:]), []

                def call(g8=g8, mod=mod, a=a, b=b, plans=plans):
                    plans.append(f"GEMMul8 accurate {mod} moduli, phases {g8.matmul(a, b, mod)[1]}")

                _report(name, call, plans, dt, args)
                continue
            # default: the level under the default strategy; every other run eager
            strategy = emulinalg.get_config().strategy if name == "default" else "eager"
            if name in ("level", "default"):
                prec = None
            elif name == "native":
                prec = "native"
            else:
                prec = emulinalg.OzakiII(moduli=int(name[name.index("(") + 1 : -1]))
            xp = emulinalg.namespace(a)
            plans = []

            def call(prec=prec, xp=xp, a=a, b=b, plans=plans, strategy=strategy):
                with emulinalg.config(strategy=strategy):
                    plans.append(xp.matmul(a, b, precision=prec, explain=True)[1])

            _report(name, call, plans, dt, args)


def _report(name, call, plans, dt, args):
    """Profile ``call`` (one product), print its kernels and append its record."""
    wall, ker, idle = _kernels(call)
    if args.host:
        _host_profile(call, args.host)
    plan = str(plans[-1])
    rec = {"dtype": dt, "N": args.N, "phi": args.phi, "run": name,
           "wall_ms": round(wall, 2),
           "device_ms": round(sum(v[0] for v in ker.values()), 2), "kernels": ker,
           "idle": {k: v for k, v in idle.items() if k != "events"},
           "plan": plan[:300]}  # fmt: skip
    print(json.dumps({k: v for k, v in rec.items() if k != "kernels"}), flush=True)
    print(f"  span {idle['span_ms']} ms, device busy {idle['busy_ms']} ms; largest idle gaps:")
    for g in idle["gaps"]:
        print(f"    {g[0]:8.3f} ms  after {g[1]}  before {g[2]}", flush=True)
    for k, v in list(ker.items())[:18]:
        print(f"  {v[0]:9.3f} ms {v[1]:5d}x  {k}", flush=True)
    if args.out:
        rec["idle"] = idle  # the device timeline (ms from the call's start) in the record only
        with open(args.out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
