"""The first emulated products of a process on a GPU (issue #24, "first use"): what a user pays
before the kernels are compiled, and what a second process or several threads pay.

Three kinds of process, each a fresh interpreter (``--child``), with cupy's kernel cache in a
directory of this run (``CUPY_CACHE_DIR``):

- ``cold``: an empty cache, as on a freshly installed machine: per step (dtype, N, repeat) the
  seconds of the product, and the seconds and count of the modules compiled or loaded from
  the disk cache inside it (``modules``) and of the NVRTC compiles among them (``nvrtc``);
- ``disk``: a second process on the cache the cold one filled (modules loaded from disk);
- ``threads``: an empty cache, ``--threads`` threads each making the same first product at once
  (dask's worker threads on a fresh machine): the wall time until all are done.

Every product is the default level under ``strategy="eager"`` on random operands (phi = 1),
synchronized; the native product of the same step is timed beside it. One JSON line per
step.

    python3 docs/benchmarks/tools/first_call.py --out OUT.jsonl [--threads 8]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

STEPS = (("float64", 2048), ("float64", 2048), ("float64", 4096), ("float32", 2048),
         ("float32", 2048), ("complex128", 2048), ("complex128", 2048))  # fmt: skip


def _operands(cp, dtype, n, seed):
    rng = cp.random.default_rng(seed)

    def one():
        x = rng.standard_normal((n, n))
        if dtype.startswith("complex"):
            x = x + 1j * rng.standard_normal((n, n))
        return x.astype(dtype)

    return one(), one()


class _Compiles:
    """Seconds and count of cupy's module compiles or disk loads (``modules``:
    ``compiler._compile_module_with_cache``) and of its NVRTC compiles (``nvrtc``:
    ``compiler.compile_using_nvrtc``, cache misses only), patched into its compiler."""

    NAMES = (("modules", "_compile_module_with_cache"), ("nvrtc", "compile_using_nvrtc"))

    def __init__(self):
        from cupy.cuda import compiler

        self._lock = threading.Lock()
        self.totals = {key: [0.0, 0] for key, _ in self.NAMES}
        for key, name in self.NAMES:
            inner = getattr(compiler, name, None)
            if inner is not None:
                setattr(compiler, name, self._timed(key, inner))

    def _timed(self, key, inner):
        def timed(*args, **kw):
            t = time.perf_counter()
            try:
                return inner(*args, **kw)
            finally:
                with self._lock:
                    self.totals[key][0] += time.perf_counter() - t
                    self.totals[key][1] += 1

        return timed

    def snapshot(self):
        with self._lock:
            return {key: tuple(v) for key, v in self.totals.items()}

    @staticmethod
    def since(before, after):
        out = {}
        for key in after:
            out[f"{key}_seconds"] = after[key][0] - before[key][0]
            out[key] = after[key][1] - before[key][1]
        return out


def _child(kind, threads):
    import cupy as cp

    import emulinalg

    compiles = _Compiles()
    sync = cp.cuda.Device().synchronize

    def product(a, b):
        with emulinalg.config(strategy="eager"):
            c = emulinalg.matmul(a, b)
        return c, emulinalg.last_plan()

    # cupy's own first use (handles, allocator) before anything is timed
    x = cp.ones((64, 64))
    (x @ x).sum().get()
    if kind == "threads":
        a, b = _operands(cp, "float64", 2048, 0)
        sync()
        before = compiles.snapshot()
        t0 = time.perf_counter()
        errors = []

        def work():
            try:
                product(a, b)
                sync()
            except Exception as exc:  # reported in the record
                errors.append(repr(exc))

        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        seconds = time.perf_counter() - t0
        print(json.dumps({
            "process": kind, "threads": threads, "dtype": "float64", "n": 2048,
            "seconds": seconds, **compiles.since(before, compiles.snapshot()), "errors": errors,
        }), flush=True)  # fmt: skip
        return
    for step, (dtype, n) in enumerate(STEPS):
        a, b = _operands(cp, dtype, n, step)
        sync()
        t = time.perf_counter()
        a @ b
        sync()
        native = time.perf_counter() - t
        before = compiles.snapshot()
        t = time.perf_counter()
        _, plan = product(a, b)
        sync()
        seconds = time.perf_counter() - t
        print(json.dumps({
            "process": kind, "step": step, "dtype": dtype, "n": n, "seconds": seconds,
            **compiles.since(before, compiles.snapshot()), "native_seconds": native,
            "scheme": plan.scheme, "fallback": plan.fallback,
        }), flush=True)  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--child", choices=("cold", "disk", "threads"))
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.threads)
        return
    common = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
    with tempfile.TemporaryDirectory() as filled, tempfile.TemporaryDirectory() as empty, open(
        args.out, "a"
    ) as out:  # fmt: skip
        for kind, cache in (("cold", filled), ("disk", filled), ("threads", empty)):
            env = dict(os.environ, CUPY_CACHE_DIR=cache)
            cmd = [sys.executable, __file__, "--out", args.out, "--child", kind,
                   "--threads", str(args.threads)]  # fmt: skip
            t = time.perf_counter()
            run = subprocess.run(cmd, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t
            for line in run.stdout.splitlines():
                rec = {**json.loads(line), "process_seconds": wall, **common}
                out.write(json.dumps(rec) + "\n")
                print(json.dumps(rec))
            if run.returncode:
                print(f"{kind}: rc {run.returncode}\n{run.stderr[-3000:]}", file=sys.stderr)


if __name__ == "__main__":
    main()
