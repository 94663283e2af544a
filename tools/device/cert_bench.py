"""The certificate's kernels (``src_cuda/ozaki2_stats.cu``) timed on the device, old against new.

One default-level product's certificate (``ozaki2_certificate`` after the backend's
``ozaki2_prescale``) at float64 and float32, N x N x N, phi = 1 (``phi_matrix`` seeds 11, 12; the
float32 inputs are the float64 ones rounded, as phi_matrix makes them): OLD is the git ref's
``ozaki2_stats.cu`` driven by that ref's ``emulinalg/backends/cupy/certificate.py``, NEW the
working tree's. Every launch is timed by CUDA events around it; the kernels' buffers (the counts,
the exact tests' failures, the control words less the patch's region, the sample's sums, the
suspect ranks) and the result (count, beyond, patch) must be the same bit for bit: the buffers
come from ``cupy.empty`` filled with one byte pattern, so that what a kernel leaves unwritten
compares too. Prints JSON lines: one per dtype and kernel (ms summed over its launches, the
median of the repeats) and one per dtype with the check.

    python3 tools/device/cert_bench.py [--old REF | --old-dir DIR] [--n N]
                                       [--dtypes float64,float32]
                                       [--repeat R]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this tree's emulinalg, wherever the script is run from

import emulinalg.backends.cupy as be  # noqa: E402
from emulinalg import _planner  # noqa: E402
from emulinalg._precision import level_for_dtype  # noqa: E402
from emulinalg.algorithm import certificate_plan  # noqa: E402
from emulinalg.backends import cuda as cuda_src  # noqa: E402
from emulinalg.backends.cupy import kernels  # noqa: E402
from emulinalg.inputs import phi_matrix  # noqa: E402

# the certificate's templated kernels (either F type, either operand type)
CERT_KERNELS = tuple(
    f"{k}<{T}, {g}>"
    for k in ("cert_entries", "refine_test")
    for T in ("int", "long long")
    for g in ("false", "true")
) + tuple(f"refine_suspects<{c}, {t}>" for c in ("false", "true") for t in ("double", "float"))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


OLD_DIR = None  # --old-dir: the old files exported there (the device copy has no .git)


def git_show(ref, path):
    if OLD_DIR is not None:
        return (Path(OLD_DIR) / path).read_text()
    out = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], check=True,
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout


def old_source(ref):
    """The ref's ozaki2_stats.cu with its local includes inlined, as ``cuda.source`` does."""
    seen = {"ozaki2_stats.cu"}

    def inline(match):
        name = match.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return cuda_src._INCLUDE.sub(inline, git_show(ref, f"src_cuda/{name}"))

    return cuda_src._INCLUDE.sub(inline, git_show(ref, "src_cuda/ozaki2_stats.cu"))


def old_certificate(ref, kernel):
    """The ref's certificate.py as a module of the cupy backend, its kernels from ``kernel``."""
    name = "emulinalg.backends.cupy._bench_old_certificate"
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    mod.__package__ = "emulinalg.backends.cupy"
    sys.modules[name] = mod
    exec(compile(git_show(ref, "emulinalg/backends/cupy/certificate.py"), f"{ref}:certificate.py",
                 "exec"), mod.__dict__)  # fmt: skip
    mod._stats_kernel = kernel
    return mod


def module_kernels(code):
    """``_stats_kernel`` for ``code`` (one NVRTC module: the certificate's kernels)."""
    mod = cp.RawModule(code=code, options=("--std=c++17",), name_expressions=CERT_KERNELS)
    fns = {}

    def get(expr):
        if expr not in fns:
            fns[expr] = mod.get_function(expr)
        return fns[expr]

    return get


class Recorder:
    """Wraps a ``_stats_kernel``: each launch between two CUDA events, its arrays kept."""

    def __init__(self, get):
        self.get, self.launches = get, []

    def __call__(self, expr):
        fn = self.get(expr)

        def launch(grid, block, args):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            fn(grid, block, args)
            e.record()
            self.launches.append((expr, s, e, [a for a in args if isinstance(a, cp.ndarray)]))

        return launch

    def times(self):
        """ms per kernel, summed over its launches, and the launches' count."""
        self.launches[-1][2].synchronize()
        out = {}
        for expr, s, e, _ in self.launches:
            ms, k = out.get(expr, (0.0, 0))
            out[expr] = (ms + cp.cuda.get_elapsed_time(s, e), k + 1)
        return out


@contextlib.contextmanager
def patterned_empty():
    """``cupy.empty`` filled with 0x5A bytes: buffers a kernel leaves unwritten compare too."""
    real = cp.empty

    def empty(*a, **kw):
        x = real(*a, **kw)
        if x.nbytes:
            cp.cuda.runtime.memset(x.data.ptr, 0x5A, x.nbytes)
        return x

    cp.empty = empty
    try:
        yield
    finally:
        cp.empty = real


def run(cert, rec, ops, pre, target):
    rec.launches = []
    with patterned_empty():
        res = cert.ozaki2_certificate(*ops, pre, target)
    cp.cuda.Device().synchronize()
    return res


def buffers(rec):
    """The distinct arrays of the launches, in order of first use."""
    seen, out = set(), []
    for _, _, _, arrays in rec.launches:
        for a in arrays:
            key = (a.data.ptr, a.shape, a.dtype.str)
            if key not in seen:
                seen.add(key)
                out.append(a)
    return out


def same_results(r0, r1, b0, b1, patch_cap):
    """(same, what differs)."""
    why = []
    if r0[0] != r1[0]:
        why.append(f"count {r0[0]} != {r1[0]}")
    for name, x, y in (("beyond", r0[1], r1[1]), ("patch", r0[2], r1[2])):
        if (x is None) != (y is None) or (x is not None and not bool(cp.array_equal(x, y))):
            why.append(name)
    if len(b0) != len(b1):
        why.append(f"buffers {len(b0)} != {len(b1)}")
    for i, (x, y) in enumerate(zip(b0, b1)):
        if x.shape != y.shape or x.dtype != y.dtype:
            why.append(f"buffer {i}: {x.shape} {x.dtype} != {y.shape} {y.dtype}")
            continue
        if x.dtype == cp.uint64 and x.ndim == 1 and x.size >= patch_cap:
            # the words (or a view w[h:] of them): not the patch's region (the result's patch)
            x, y = x[: x.size - patch_cap], y[: y.size - patch_cap]
        xb, yb = x.view(cp.uint8).ravel(), y.view(cp.uint8).ravel()
        if not bool(cp.array_equal(xb, yb)):
            why.append(f"buffer {i} {x.shape} {x.dtype}: {int((xb != yb).sum())} bytes differ")
    return not why, why


def inputs(n):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda s: phi_matrix((n, n), 1, "float64", seed=s), (11, 12))
    return a, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default="main", help="git ref of the old kernels (default main)")
    ap.add_argument(
        "--old-dir",
        help="a directory holding the old src_cuda/ and "
        "emulinalg/backends/cupy/certificate.py (instead of --old's git show)",
    )
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    global OLD_DIR
    OLD_DIR = args.old_dir
    t0 = time.time()
    old_code, new_code = old_source(args.old), cuda_src.source("ozaki2_stats.cu")
    if old_code == new_code:
        log(f"note: {args.old}'s ozaki2_stats.cu is the working tree's")
    log("inputs")
    a64, b64 = inputs(args.n)
    log("compiling (NVRTC; cupy caches the binaries)")
    old_rec = Recorder(module_kernels(old_code))
    new_rec = Recorder(kernels._stats_kernel)
    old_cert = old_certificate(args.old, old_rec)
    be.certificate._stats_kernel = new_rec
    ok_all = True
    for dt in args.dtypes.split(","):
        a = cp.asarray(a64.astype(dt))
        b = cp.asarray(b64.astype(dt))
        ops = (a, None, b, None)
        n = args.n
        target = _planner.target_for(level_for_dtype(dt), n, be, n * n)
        pre = be.ozaki2_prescale(*ops, "accurate")
        plan = certificate_plan.plan(n, target, False, n, n, 2)
        runs = {"old": [], "new": []}
        for rep in range(args.repeat + 1):  # the first: compile and warm up
            for which, cert, rec in (("old", old_cert, old_rec), ("new", be.certificate, new_rec)):
                res = run(cert, rec, ops, pre, target)
                if rep:
                    runs[which].append(rec.times())
                if rep == args.repeat:  # the last repeat: keep for the check
                    runs[which + "_res"], runs[which + "_buf"] = res, buffers(rec)
            log(f"{dt} repeat {rep} done")
        same, why = same_results(runs["old_res"], runs["new_res"], runs["old_buf"],
                                 runs["new_buf"], plan.patch_cap)  # fmt: skip
        ok_all &= same
        names = sorted(set().union(*runs["old"], *runs["new"]))
        for name in names:
            o = [r.get(name, (0.0, 0)) for r in runs["old"]]
            w = [r.get(name, (0.0, 0)) for r in runs["new"]]
            rec = {"dtype": dt, "n": n, "kernel": name,
                   "old_ms": round(float(np.median([x[0] for x in o])), 4),
                   "new_ms": round(float(np.median([x[0] for x in w])), 4),
                   "launches": [o[-1][1], w[-1][1]]}  # fmt: skip
            rec["speedup"] = round(rec["old_ms"] / rec["new_ms"], 2) if rec["new_ms"] else None
            print(json.dumps(rec), flush=True)
        tot = (
            [sum(v[0] for v in r.values()) for r in runs["old"]],
            [sum(v[0] for v in r.values()) for r in runs["new"]],
        )
        print(json.dumps({"dtype": dt, "n": n, "kernel": "all", "old_ms": round(float(
            np.median(tot[0])), 4), "new_ms": round(float(np.median(tot[1])), 4), "count":
            runs["new_res"][0], "patch": None if runs["new_res"][2] is None else int(
            runs["new_res"][2].size), "same": same, "differs": why}), flush=True)  # fmt: skip
        del a, b, ops, pre, runs
        cp.get_default_memory_pool().free_all_blocks()
    log(f"done in {time.time() - t0:.0f} s")
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
