"""The dtype levels beside cuBLAS and GEMMul8 in one run (issue #24's rows) on cupy arrays:
per row cuBLAS before, the default level (strategy "eager"; with ``--default`` also the default
strategy, which may take cuBLAS), GEMMul8's accurate mode at the level's count and one below,
cuBLAS after; effective bits of each against the exact product of the first ``--ref-rows`` rows
and ``--ref-cols`` columns (computed on the host before anything is timed); and the row's
zero-overhead bound: the level's INT8 GEMMs (complex: 3 per modulus with 3M, 2 with the Gaussian
moduli, which hold fewer bits per count: GEMMul8 then also two below the count) at the INT8 rate of
one N x N x N GEMM of full-range int8 planes timed in the same row (the fused kernel's INT32
epilogue where it runs). One JSON line per row. GEMMul8 is a measuring stick, loaded from
``--g8`` (``.device/peers/build.sh``); never a dependency of the project.

    PYTHONPATH=.device/peers:$PYTHONPATH python3 gemmul8_levels.py --out levels_g8.jsonl \
        [--rows float64:1,complex128:1:16384] [--default]

A row is ``DTYPE:PHI[:N]`` (N: 16384 for real dtypes, 8192 for complex by default).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import functools
import gc
import re
import sys

import cupy as cp
import gemmul8  # .device/peers (the measuring stick)
from gpu_records import emit, timed  # same folder: one CUDA-event timer

import emulinalg
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul

ROWS = [("float64", 16384, 0.5), ("float64", 16384, 1.0), ("float64", 16384, 2.0),
        ("float32", 16384, 0.5), ("float32", 16384, 1.0), ("complex128", 8192, 1.0)]  # fmt: skip
DEFAULT_N = {"float64": 16384, "float32": 16384, "complex128": 8192, "complex64": 8192}
G8_MAX = {"float64": 20, "float32": 13, "complex128": 20}  # GEMMul8 has no complex64


def _int8_gemm_s(n, repeat):
    """Seconds of one n x n x n INT8 GEMM of full-range planes, as the level's modular GEMMs
    see them (``_int8_products``: the fused kernel's INT32 epilogue, else cuBLAS)."""
    from emulinalg.backends.cupy.gemm import _int8_products

    kp = -(-n // 16) * 16
    rng = cp.random.default_rng(0)
    pa = rng.integers(-128, 128, size=(1, 1, 1, n, kp), dtype=cp.int32).astype(cp.int8)
    pb = rng.integers(-128, 128, size=(1, 1, 1, -(-n // 4) * 4, kp), dtype=cp.int32)
    pb = pb.astype(cp.int8)
    return timed(functools.partial(_int8_products, pa, pb), repeat=repeat)


def _inputs(dt, n, phi):
    return phi_matrix((n, n), phi, dt, seed=1), phi_matrix((n, n), phi, dt, seed=2)


def _reference(dt, n, phi, rows, cols):
    a, b = _inputs(dt, n, phi)
    return exact_matmul(a[:rows], b[:, :cols])


def _bits(c, a, b, ref, rows, cols):
    acc = accuracy(cp.asnumpy(c[:rows, :cols]), a[:rows], b[:, :cols], ref)
    return round(acc["bits_maxrel"], 2), round(acc["bits_cw"], 2)


def _row(g8, dt, n, phi, ref, args):
    ha, hb = _inputs(dt, n, phi)
    a, b = cp.asarray(ha), cp.asarray(hb)
    # short products (a few ms) drift more between calls than the long ones: more repeats
    repeat = args.repeat * (4 if n <= 4096 else 1)
    rec = {"dtype": dt, "n": n, "phi": phi, "repeat": repeat}
    bits = functools.partial(_bits, a=ha, b=hb, ref=ref, rows=args.ref_rows, cols=args.ref_cols)
    native = functools.partial(cp.matmul, a, b)
    rec["native_bits"] = bits(native())
    rec["native_before_s"] = timed(native, repeat=repeat)
    with emulinalg.config(strategy="eager"):
        level = functools.partial(emulinalg.matmul, a, b)
        rec["level_bits"] = bits(level())
        rec["plan"] = str(emulinalg.last_plan())
        rec["level_s"] = timed(level, repeat=repeat)
    if args.default:  # the default strategy: the cost model may take cuBLAS
        default = functools.partial(emulinalg.matmul, a, b)
        rec["default_bits"] = bits(default())
        rec["default_plan"] = str(emulinalg.last_plan())
        rec["default_s"] = timed(default, repeat=repeat)
    found = re.search(r"moduli=(\d+)", rec["plan"])
    count = int(found.group(1)) if found else 0
    gaussian = bool(re.search(r"moduli=\d+, mode=\w+, gaussian", rec["plan"]))
    per = (2 if gaussian else 3) if dt.startswith("complex") else 1
    if count:
        rec["int8_gemm_s"] = _int8_gemm_s(n, args.repeat)
        rec["bound_s"] = count * per * rec["int8_gemm_s"]
    g8_counts = (count, count - 1, count - 2) if gaussian else (count, count - 1)
    # the level's cached workspace back to the device (and whatever a reference cycle still
    # holds): GEMMul8's own (35 GB for complex128 at 16384) does not fit beside it on an 80 GB
    # card; a count that still does not fit is recorded as such
    del level
    if args.default:
        del default
    gc.collect()
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    rec["pool_used_gb"] = round(pool.used_bytes() / 2**30, 2)
    for mod in g8_counts:
        if dt in G8_MAX and 2 <= mod <= G8_MAX[dt]:
            run = functools.partial(g8.matmul, a, b, mod, False)
            try:
                rec[f"g8_{mod}_bits"] = bits(run()[0])
                rec[f"g8_{mod}_s"] = timed(run, repeat=repeat)
            except cp.cuda.memory.OutOfMemoryError as exc:
                rec[f"g8_{mod}_error"] = str(exc)
            g8._work.clear()  # the wrapper's one workspace: not held beside the next count's
    rec["native_after_s"] = timed(native, repeat=repeat)
    nat = 0.5 * (rec["native_before_s"] + rec["native_after_s"])
    rec["level_speedup"] = round(nat / rec["level_s"], 3)
    for key in ("default", "bound"):
        if f"{key}_s" in rec:
            rec[f"{key}_speedup"] = round(nat / rec[f"{key}_s"], 3)
    for mod in g8_counts:
        if f"g8_{mod}_s" in rec:
            rec[f"g8_{mod}_speedup"] = round(nat / rec[f"g8_{mod}_s"], 3)
    rec["date"] = datetime.date.today().isoformat()
    rec["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rec["command"] = "python3 tools/device/gemmul8_levels.py " + " ".join(sys.argv[1:])
    return rec


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--g8", default="/tmp/g8/libg8drv.so")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--ref-rows", type=int, default=16)
    p.add_argument("--ref-cols", type=int, default=256)
    p.add_argument("--workers", type=int, default=6)
    p.add_argument("--rows", default=None, help="DTYPE:PHI[:N],... (default: ROWS)")
    p.add_argument("--default", action="store_true", help="also the default strategy")
    args = p.parse_args()
    rows = ROWS
    if args.rows:
        rows = []
        for spec in args.rows.split(","):
            dt, phi, *size = spec.split(":")
            rows.append((dt, int(size[0]) if size else DEFAULT_N[dt], float(phi)))
    # the host's references start before anything touches the GPU (forked workers) and are all
    # done before the first timing: nothing else runs on the host while the device is timed
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        refs = [pool.submit(_reference, *row, args.ref_rows, args.ref_cols) for row in rows]
        refs = [ref.result() for ref in refs]
    g8 = gemmul8.load(args.g8)
    for row, ref in zip(rows, refs):
        emit(_row(g8, *row, ref, args), args.out)


if __name__ == "__main__":
    main()
