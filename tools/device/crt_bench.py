"""The INT8-residue CRT pass (``src_cuda/ozaki2_crt_s8.cu``): the kernel of a git ref (OLD,
default ``main``) against this checkout's (NEW), on the same random residues.

Cases (square N, int8 residues uniform in each modulus' symmetric range, shifts mu, nu in
[-20, 20]):

- real float64, 15 moduli, N = 16384;
- real float32, 8 moduli, N = 16384;
- complex float64 from 3M's three products, 16 moduli, N = 8192.

OLD is compiled by NVRTC (``cupy.RawModule``) from ``git show REF:src_cuda/...`` (the kernel,
``ozaki2_crt.cu`` and the headers, inlined as ``backends.cuda.source`` does) and launched as
that ref's ``fused.crt_s8`` did (32 x 8 threads, one column each); NEW is
``emulinalg.backends.cuda.fused.crt_s8`` itself (its tables, its grid). Each is timed with CUDA
events, median of --repeat runs after two warm-up runs; GB/s counts the residues read and the
outputs written. The outputs must be bit-identical. One JSON line per case (also written to
--out):

    python3 tools/device/crt_bench.py --out OUT.jsonl [--old-ref main | --old-dir DIR]
        [--repeat 10] [--cases real64,real32,cplx64] [--blocks 32x8,64x4]
        [--variants "EMU_CRT_S8_COLS=8;EMU_CRT_S8_MIN_BLOCKS=3" | --variants ""]

--blocks times NEW again with other thread-block shapes (same kernel, grid sized to cover the
matrix once), and --variants NEW built with other ``-D`` settings of the kernel (real cases
only; default: 8 columns per thread, ``EMU_CRT_S8_COLS=8``, 64-bit loads and 128 registers; and
``EMU_CRT_S8_MIN_BLOCKS=3``, 3 blocks per SM instead of 4, more registers): for choosing them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "device"))  # gpu_records
sys.path.insert(0, str(ROOT))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from gpu_records import median_ms  # noqa: E402

from emulinalg.algorithm.moduli import MODULI  # noqa: E402
from emulinalg.backends import cuda  # noqa: E402
from emulinalg.backends.cuda import fused  # noqa: E402

CASES = {  # name: (parts NP, moduli, N, output dtype)
    "real64": (1, 15, 16384, "float64"),
    "real32": (1, 8, 16384, "float32"),
    "cplx64": (3, 16, 8192, "float64"),
}
SOURCES = ("ozaki2_crt_s8.cu", "ozaki2_crt.cu", "ozaki2_common.cuh", "ozaki2_tables.h")


def ref_source(ref, folder=None):
    """``ozaki2_crt_s8.cu`` of git ``ref`` (or from ``folder``) with its local includes
    inlined (as ``backends.cuda.source``)."""
    files = {}
    for name in SOURCES:
        if folder:
            files[name] = (Path(folder) / name).read_text()
            continue
        run = subprocess.run(["git", "show", f"{ref}:src_cuda/{name}"], cwd=ROOT,
                             capture_output=True, text=True)  # fmt: skip
        if run.returncode != 0:
            sys.exit(f"git show {ref}:src_cuda/{name} failed ({run.stderr.strip()}); "
                     "give the OLD sources with --old-dir")  # fmt: skip
        files[name] = run.stdout
    seen = {"ozaki2_crt_s8.cu"}

    def inline(match):
        if match.group(1) in seen:
            return ""
        seen.add(match.group(1))
        return cuda._INCLUDE.sub(inline, files[match.group(1)])

    return cuda._INCLUDE.sub(inline, files["ozaki2_crt_s8.cu"])


def old_kernel(code, n, parts):
    """The OLD kernel, compiled and its ``__constant__`` tables filled (the ref's loader did
    the same with ``crt_table_arrays``)."""
    expr = f"ozaki2_crt_s8<{n}, {cuda.crt_words(n)}, {parts}>"
    mod = cp.RawModule(code=code, options=("--std=c++17",), name_expressions=(expr,))
    for sym, arr in cuda.crt_table_arrays(n).items():
        cp.ndarray(arr.shape, arr.dtype, memptr=mod.get_global(sym)).set(arr)
    cp.cuda.runtime.deviceSynchronize()
    return mod.get_function(expr)


def new_variant_kernel(n, parts, defines):
    """This checkout's kernel built with extra ``-D`` options, its tables filled as ``fused``
    does."""
    expr = f"ozaki2_crt_s8<{n}, {cuda.crt_words(n)}, {parts}>"
    options = ("--std=c++17", *(f"-D{d}" for d in defines))
    mod = cp.RawModule(code=cuda.source("ozaki2_crt_s8.cu"), options=options,
                       name_expressions=(expr,))  # fmt: skip
    tables = {**cuda.crt_table_arrays(n), **cuda.crt_f64_table_arrays(n)}
    for sym, arr in tables.items():
        cp.ndarray(arr.shape, arr.dtype, memptr=mod.get_global(sym)).set(arr)
    cp.cuda.runtime.deviceSynchronize()
    return mod.get_function(expr)


def launch(fn, res, n, mu, nu, outs, out_dtype, cols, block):
    """``fused.crt_s8``'s launch with ``cols`` columns per thread and thread block ``block``."""
    NP, _, B, mc, ldr = res.shape
    m_full, ncols = outs[0].shape[-2:]
    o = cuda.out_pointers(outs, out_dtype, NP > 1)
    bx, by = block
    grid = (-(-ncols // (bx * cols)), min(-(-(B * mc) // by), 65535))
    args = (
        res, np.int64(B * mc * ldr), np.int32(B), np.int32(mc), np.int32(ncols), np.int32(ldr),
        np.int32(m_full), np.int32(0), mu, nu, np.int32(cuda.OUT_KIND[out_dtype]), *o,
    )  # fmt: skip
    fn(grid, block, args)


def residue_planes(NP, n, N, seed):
    """(NP, n, 1, N, N) int8, plane (p, l) uniform in [-(m_l // 2), (m_l - 1) // 2]."""
    rng = cp.random.default_rng(seed)
    out = cp.empty((NP, n, 1, N, N), dtype=cp.int8)
    for p in range(NP):
        for ell, m in enumerate(MODULI[:n]):
            out[p, ell, 0] = rng.integers(-(m // 2), (m - 1) // 2 + 1, (N, N), dtype=cp.int32)
    return out


def run_case(name, old_code, repeat, blocks, defines, emit):
    NP, n, N, out_dtype = CASES[name]
    cplx = NP > 1
    t0 = time.time()
    res = residue_planes(NP, n, N, seed=7)
    rng = cp.random.default_rng(8)
    mu = rng.integers(-20, 21, (1, N), dtype=cp.int32)
    nu = rng.integers(-20, 21, (1, N), dtype=cp.int32)
    dt = cp.float32 if out_dtype == "float32" else cp.float64
    nout = 2 if cplx else 1
    old_out = [cp.empty((1, N, N), dtype=dt) for _ in range(nout)]
    new_out = [cp.empty((1, N, N), dtype=dt) for _ in range(nout)]
    fn_old = old_kernel(old_code, n, NP)
    fused._crt_kernel(cp, n, NP)  # compile (and fill the tables) before timing
    gbytes = (res.size + nout * N * N * np.dtype(dt).itemsize) / 1e9

    def old():
        launch(fn_old, res, n, mu, nu, old_out, out_dtype, 1, (32, 8))

    def new():
        fused.crt_s8(res, n, cplx, mu, nu, 0, new_out, out_dtype)

    ms_old = median_ms(old, repeat)
    ms_new = median_ms(new, repeat)
    old()
    new()
    cp.cuda.Device().synchronize()
    equal = all(
        bool(cp.array_equal(a.view(cp.uint8), b.view(cp.uint8))) for a, b in zip(old_out, new_out)
    )
    rec = {"case": name, "parts": NP, "moduli": n, "N": N, "out": out_dtype,
           "old_ms": ms_old, "new_ms": ms_new, "speedup": ms_old / ms_new,
           "old_GBps": gbytes / (ms_old * 1e-3), "new_GBps": gbytes / (ms_new * 1e-3),
           "bytes_GB": gbytes, "bit_identical": equal,
           "new_block": [32, 8], "new_columns_per_thread": fused.CRT_COLUMNS}  # fmt: skip
    emit(rec)
    variants = [(fused._crt_kernel(cp, n, NP), fused.CRT_COLUMNS, b, f"block {b[0]}x{b[1]}")
                for b in blocks if b != (32, 8)]  # fmt: skip
    for ds in defines if not cplx else []:
        cols = next((int(d.split("=")[1]) for d in ds if d.startswith("EMU_CRT_S8_COLS=")), 4)
        variants.append((new_variant_kernel(n, NP, ds), cols, (32, 8), " ".join(ds)))
    for fn, cols, block, what in variants:
        for o in new_out:
            o.fill(0)

        def run(fn=fn, cols=cols, block=block):
            launch(fn, res, n, mu, nu, new_out, out_dtype, cols, block)

        ms = median_ms(run, repeat)
        same = all(
            bool(cp.array_equal(a.view(cp.uint8), b.view(cp.uint8)))
            for a, b in zip(old_out, new_out)
        )
        emit({"case": name, "variant": what, "new_block": list(block),
              "new_columns_per_thread": cols, "new_ms": ms, "speedup": ms_old / ms,
              "new_GBps": gbytes / (ms * 1e-3), "bit_identical": same})  # fmt: skip
    res = old_out = new_out = None  # free before the next case
    cp.get_default_memory_pool().free_all_blocks()
    print(f"# {name}: {time.time() - t0:.1f} s", file=sys.stderr, flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON lines output path")
    p.add_argument("--old-ref", default="main", help="git ref of the OLD kernel")
    p.add_argument(
        "--old-dir",
        default=None,
        help="folder with the OLD " + ", ".join(SOURCES) + " (instead of git)",
    )
    p.add_argument("--repeat", type=int, default=10, help="timed runs per measurement")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ",".join(CASES))
    p.add_argument("--blocks", default="32x8", help="NEW's thread-block shapes to time, BXxBY")
    p.add_argument(
        "--variants",
        default="EMU_CRT_S8_COLS=8;EMU_CRT_S8_MIN_BLOCKS=3",
        help="NEW builds to time besides (real cases): ';' between builds, ',' between -D's",
    )
    args = p.parse_args(argv)
    blocks = [tuple(int(v) for v in b.split("x")) for b in args.blocks.split(",")]
    defines = [v.split(",") for v in args.variants.split(";") if v]
    old_code = ref_source(args.old_ref, args.old_dir)
    new_code = cuda.source("ozaki2_crt_s8.cu")
    if old_code == new_code:
        print(f"# note: {args.old_ref} has this checkout's kernel (OLD == NEW)", file=sys.stderr)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    common = {
        "device": device,
        "old_ref": args.old_dir or args.old_ref,
        "command": "python3 tools/device/crt_bench.py " + " ".join(argv or sys.argv[1:]),
    }
    with open(args.out, "w") as f:

        def emit(rec):
            line = json.dumps({**rec, **common})
            f.write(line + "\n")
            f.flush()
            print(line, flush=True)

        for name in args.cases.split(","):
            run_case(name, old_code, args.repeat, blocks, defines, emit)


if __name__ == "__main__":
    main()
