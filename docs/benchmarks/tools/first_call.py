"""The first emulated products of a process on a GPU (issue #24, "first use"): what a user pays
before the kernels are compiled, and what a second process or several threads pay.

Four kinds of process, each a fresh interpreter (``--child``), with cupy's kernel cache in a
directory of this run (``CUPY_CACHE_DIR``):

- ``cold``: an empty cache, as on a freshly installed machine: per step (dtype, N, repeat) the
  seconds of the product, and the seconds and count of the modules compiled or loaded from
  the disk cache inside it (``modules``) and of the NVRTC compiles among them (``nvrtc``);
- ``disk``: a second process on the cache the cold one filled (modules loaded from disk);
- ``threads``: an empty cache, ``--threads`` threads each making the same first product at once
  (dask's worker threads on a fresh machine): the wall time until all are done;
- ``dask``: an empty cache, the float64 product of ``test_cupy_chunks_stay_on_the_gpu`` (384 x
  1024 by 1024 x 320 in cupy chunks of 128 x 256 and 256 x 160, the shared graph, dask's threads
  scheduler with ``--threads`` workers): its wall time, and the ten slowest compiles by kernel
  and thread (``slowest``); every thread's stack goes to stderr each ``--stacks`` seconds while
  it runs (where a first use hangs).

``--no-gate`` runs the threads and dask processes without the backend's first-use gate
(``emulinalg.backends.cuda.first_use``), for an A/B; ``--kinds`` picks the processes.

Every product is the default level under ``strategy="eager"`` on random operands (phi = 1),
synchronized; the native product of the same step is timed beside it. One JSON line per
step.

    python3 docs/benchmarks/tools/first_call.py --out OUT.jsonl [--threads 8]
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import json
import os
import re
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
    # cupy 14 compiles through this one (compile_using_nvrtc wraps it: patched alone there)
    NVRTC_INNER = "_compile_using_nvrtc_no_warning"

    def __init__(self):
        from cupy.cuda import compiler

        self._lock = threading.Lock()
        self.totals = {key: [0.0, 0] for key, _ in self.NAMES}
        self.log = []  # (seconds, what, thread) of each NVRTC compile
        for key, name in self.NAMES:
            if key == "nvrtc" and hasattr(compiler, self.NVRTC_INNER):
                name = self.NVRTC_INNER
            inner = getattr(compiler, name, None)
            if inner is not None:
                setattr(compiler, name, self._timed(key, inner))

    def _timed(self, key, inner):
        def timed(*args, **kw):
            t = time.perf_counter()
            try:
                return inner(*args, **kw)
            finally:
                dt = time.perf_counter() - t
                with self._lock:
                    self.totals[key][0] += dt
                    self.totals[key][1] += 1
                    if key == "nvrtc":
                        self.log.append((dt, _what(args, kw), threading.current_thread().name))

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


def _what(args, kw):
    """A compile's kernel: its name expressions, else the first kernel named in the source."""
    names = kw.get("name_expressions") or (args[4] if len(args) > 4 else None)
    if names:
        return ", ".join(names)[:120]
    src = args[0] if args else kw.get("source", "")
    hit = re.search(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)", src)
    return hit.group(1) if hit else src[:60]


def _dask_child(threads, stacks, compiles, gate):
    import cupy as cp
    import dask
    import dask.array as da

    import emulinalg
    from emulinalg.inputs import phi_matrix

    os.environ["EMULINALG_DASK_MODE"] = "shared"
    A = cp.asarray(phi_matrix((384, 1024), 1.0, "float64", seed=21))
    B = cp.asarray(phi_matrix((1024, 320), 1.0, "float64", seed=22))
    a = da.from_array(A, chunks=(128, 256), asarray=False)
    b = da.from_array(B, chunks=(256, 160), asarray=False)
    faulthandler.dump_traceback_later(stacks, repeat=True)
    before = compiles.snapshot()
    t0 = time.perf_counter()
    with emulinalg.config(strategy="eager"):
        c = emulinalg.matmul(a, b)
    with dask.config.set(scheduler="threads", num_workers=threads, split_every=2):
        c.compute()
    cp.cuda.Device().synchronize()
    seconds = time.perf_counter() - t0
    faulthandler.cancel_dump_traceback_later()
    slowest = sorted(compiles.log, reverse=True)[:10]
    print(json.dumps({
        "process": "dask", "gate": gate, "threads": threads, "dtype": "float64",
        "seconds": seconds,
        **compiles.since(before, compiles.snapshot()),
        "distinct_nvrtc": len({w for _, w, _ in compiles.log}),
        "slowest": [[round(s, 2), w, t] for s, w, t in slowest],
    }), flush=True)  # fmt: skip


def _child(kind, threads, stacks=60, gate=True):
    import cupy as cp

    import emulinalg
    import emulinalg.backends.cupy

    if not gate:  # the backend without its first-use gate (A/B): every thread compiles
        emulinalg.backends.cupy.first_use = None

    compiles = _Compiles()
    sync = cp.cuda.Device().synchronize

    def product(a, b):
        with emulinalg.config(strategy="eager"):
            c = emulinalg.matmul(a, b)
        return c, emulinalg.last_plan()

    # cupy's own first use (handles, allocator) before anything is timed
    x = cp.ones((64, 64))
    (x @ x).sum().get()
    if kind == "dask":
        _dask_child(threads, stacks, compiles, gate)
        return
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
            "process": kind, "gate": gate, "threads": threads, "dtype": "float64", "n": 2048,
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
    ap.add_argument("--child", choices=("cold", "disk", "threads", "dask"))
    ap.add_argument("--kinds", default="cold,disk,threads", help="which processes, in order")
    ap.add_argument("--stacks", type=float, default=60.0, help="dask: seconds between stacks")
    ap.add_argument("--timeout", type=float, default=None, help="seconds a process may take")
    ap.add_argument("--no-gate", action="store_true",
                    help="threads/dask: without the backend's first-use gate (A/B)")
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.threads, args.stacks, not args.no_gate)
        return
    common = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
    with tempfile.TemporaryDirectory() as filled, tempfile.TemporaryDirectory() as empty, open(
        args.out, "a"
    ) as out:  # fmt: skip
        for kind in args.kinds.split(","):
            cache = filled if kind in ("cold", "disk") else tempfile.mkdtemp(dir=empty)
            env = dict(os.environ, CUPY_CACHE_DIR=cache)
            cmd = [sys.executable, __file__, "--out", args.out, "--child", kind,
                   "--threads", str(args.threads), "--stacks", str(args.stacks)]  # fmt: skip
            cmd += ["--no-gate"] if args.no_gate else []
            t = time.perf_counter()
            try:
                run = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                     timeout=args.timeout)  # fmt: skip
            except subprocess.TimeoutExpired as exc:  # its stacks show where it waited
                err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
                print(f"{kind}: over {args.timeout} s\n{err[-20000:]}", file=sys.stderr)
                out.write(json.dumps({"process": kind, "timeout": args.timeout, **common}) + "\n")
                continue
            wall = time.perf_counter() - t
            if kind == "dask":
                print(run.stderr[-20000:], file=sys.stderr)
            for line in run.stdout.splitlines():
                rec = {**json.loads(line), "process_seconds": wall, **common}
                out.write(json.dumps(rec) + "\n")
                print(json.dumps(rec))
            if run.returncode:
                print(f"{kind}: rc {run.returncode}\n{run.stderr[-3000:]}", file=sys.stderr)


if __name__ == "__main__":
    main()
