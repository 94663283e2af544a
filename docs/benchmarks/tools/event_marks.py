"""Where a level product's device waits for its host, unprofiled (GPU diagnostics, issue #24).

No profiler runs. At every stage boundary of the product (``_timing.stage``'s marks and the
backend's hooks: line scan, prescale, part check, certificate, product, refit pick, refit,
make_complex) a CUDA event is recorded beside the host's clock, without synchronising. Per mark:
``host`` (ms since the call began), ``dev`` (ms of the event since a start event recorded at the
call's beginning) and ``lag = dev - host``: while the host is ahead, lag grows with the device's
queue; where it falls to ~0 the device had run dry and waited for the host. Calls back to back
(the benchmarks' medians) and after a pause (``--pause``). One JSON line per call.

    python3 docs/benchmarks/tools/event_marks.py -N 16384 --dtype float64 --calls 4 --out X.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import cupy as cp

import emulinalg
import emulinalg.backends.cupy as cb
from emulinalg import _engine, _timing
from emulinalg.algorithm import refit
from emulinalg.inputs import phi_matrix

HOOKS = ("line_scan", "ozaki2_prescale", "balance_stage", "ozaki2_certificate", "ozaki2_product",
         "refit_pick")  # fmt: skip


class Marks(_timing.Recorder):
    """A recorder that marks each stage's entry and exit with a CUDA event and the host clock."""

    def __init__(self):
        super().__init__()
        self.marks = []

    def mark(self, label):
        e = cp.cuda.Event()
        e.record()
        self.marks.append((label, time.perf_counter(), e))

    @contextlib.contextmanager
    def stage(self, name):
        self.mark(name + ">")
        try:
            yield
        finally:
            self.mark("<" + name)


def _wrap(mod, name):
    fn = getattr(mod, name)

    def wrapper(*a, **k):
        with _timing.stage(name):
            return fn(*a, **k)

    setattr(mod, name, wrapper)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--out")
    args = p.parse_args()
    for h in HOOKS:
        _wrap(cb, h)
    _wrap(refit, "refit")
    _wrap(_engine, "make_complex")
    for dt in args.dtype.split(","):
        a = cp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=1))
        b = cp.asarray(phi_matrix((args.N, args.N), args.phi, dt, seed=2))
        xp = emulinalg.namespace(a)
        with emulinalg.config(strategy="eager"):
            xp.matmul(a, b)  # warm-up
            cp.cuda.Device().synchronize()
            for i in range(args.calls):
                if args.pause:
                    time.sleep(args.pause)
                rec = Marks()
                start = cp.cuda.Event()
                token = _timing._RECORDER.set(rec)
                t0 = time.perf_counter()
                start.record()
                try:
                    xp.matmul(a, b)
                finally:
                    _timing._RECORDER.reset(token)
                rec.mark("end")
                th = time.perf_counter()
                rec.marks[-1][2].synchronize()
                wall = 1e3 * (time.perf_counter() - t0)
                marks = []
                for label, t, e in rec.marks:
                    host, dev = 1e3 * (t - t0), cp.cuda.get_elapsed_time(start, e)
                    marks.append([label, round(host, 3), round(dev, 3), round(dev - host, 3)])
                out = {"dtype": dt, "N": args.N, "phi": args.phi, "call": i,
                       "pause_s": args.pause, "wall_ms": round(wall, 3),
                       "host_done_ms": round(1e3 * (th - t0), 3),
                       "device_ms": marks[-1][2], "marks": marks}  # fmt: skip
                print(json.dumps({k: v for k, v in out.items() if k != "marks"}), flush=True)
                if args.out:
                    with open(args.out, "a") as fh:
                        fh.write(json.dumps(out) + "\n")
        del a, b
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
