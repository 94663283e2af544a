"""The Scheme II residue kernel, old against new, on the GPU: times and bit-identical planes.

OLD is ``src_cuda/ozaki2_residues.cu`` as of a git revision (``--old-rev``, default the last
main before the tensor-core kernel; its headers from the same revision) or a file (``--old``,
headers from this checkout), compiled by NVRTC and launched as that revision's
``products._residue_planes`` did; NEW is this checkout's kernel through the backend's own
``_residue_planes``. Per case both operands of a square product, as ``ozaki2_product`` makes them
(A's rows, B's columns as B'^T planes), with the shifts of the generic fast-mode prescale:

- float64, N = 16384, 15 moduli
- float32 (values of float32, as float64), N = 16384, 8 moduli
- complex128, N = 8192, 16 moduli (3M: re, im, re + im planes)

Each time is the median of ``--repeat`` CUDA-event-timed calls after two warm-up calls. One JSON
line per case (to ``--out`` and stdout): old and new ms for A, B and both, the bytes moved
(float64 entries read, int8 planes written) and the effective GB/s, and whether every plane is
bit-identical. From the repository root with the project on PYTHONPATH (after
``source tools/device/build_fused.sh``); where the checkout has no .git, export the old kernel
first (``git show REV:src_cuda/ozaki2_residues.cu > FILE``) and pass ``--old FILE``.

    python3 tools/device/residues_bench.py --out X.jsonl [--old FILE | --old-rev REV]
        [--repeat 10] [--cases float64,float32,complex128]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_records

import array_api_compat.cupy as cxp
import cupy as cp
import numpy as np
from gpu_records import median_ms

from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, rounds_to_nearest
from emulinalg.backends.cuda import source_dir
from emulinalg.backends.cupy import products
from emulinalg.backends.cupy.kernels import _Operands

OLD_REV = "4b80541"  # main before the tensor-core residue kernel
KERNEL = "src_cuda/ozaki2_residues.cu"
CASES = {  # name: (dtype, N, moduli)
    "float64": ("float64", 16384, 15),
    "float32": ("float32", 16384, 8),
    "complex128": ("complex128", 8192, 16),
}
_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.MULTILINE)


def _git_show(rev, path):
    return subprocess.run(
        ["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
    ).stdout


def old_source(old, rev):
    """The old kernel's text with its local includes inlined (each once), as
    ``emulinalg.backends.cuda.source`` does."""
    if old:
        text, header = Path(old).read_text(), lambda n: (source_dir() / n).read_text()
    else:
        text, header = _git_show(rev, KERNEL), lambda n: _git_show(rev, f"src_cuda/{n}")
    seen = set()

    def inline(m):
        if m.group(1) in seen:
            return ""
        seen.add(m.group(1))
        return _INCLUDE.sub(inline, header(m.group(1)))

    return _INCLUDE.sub(inline, text)


def old_kernel(src, n, cplx, near):
    expr = f"ozaki2_residues<{n}, {'true' if cplx else 'false'}, {'true' if near else 'false'}>"
    mod = cp.RawModule(code=src, options=("--std=c++17",), name_expressions=(expr,))
    return mod.get_function(expr)


def old_planes(fn, re_, im, strides, rows, rows_pad, k, kp, shift, shift_sb, n):
    """The old revision's ``products._residue_planes`` launch (32 x 32 tiles, one per block)."""
    B = re_.shape[0]
    planes = cp.empty((1 if im is None else 3, n, B, rows_pad, kp), dtype=cp.int8)
    sb, sr, sc = strides
    grid = (-(-kp // 32), min(-(-rows_pad // 32), 65535), min(B, 65535))
    args = (
        re_, re_ if im is None else im, np.int64(sb), np.int64(sr), np.int64(sc),
        np.int32(B), np.int32(rows), np.int32(k), np.int32(rows_pad), np.int32(kp),
        np.int32(sr == 1 and sc != 1), shift, np.int64(shift_sb), planes,
    )  # fmt: skip
    fn(grid, (256,), args)
    return planes


def phi_matrix_gpu(n, phi, seed):
    """(U(0,1) - 0.5) exp(phi N(0,1)), generated on the device."""
    rng = cp.random.default_rng(seed)
    return (rng.random((n, n)) - 0.5) * cp.exp(phi * rng.standard_normal((n, n)))


def operands(dtype, n):
    parts = []
    for seed in (1, 2):
        re_ = phi_matrix_gpu(n, 1.0, seed)
        im = phi_matrix_gpu(n, 1.0, seed + 10) if dtype == "complex128" else None
        if dtype == "float32":
            re_ = re_.astype(cp.float32).astype(cp.float64)
        parts.append((re_, im))
    return parts[0][0], parts[0][1], parts[1][0], parts[1][1]


def run_case(name, src, repeat):
    dtype, n, nmod = CASES[name]
    ar, ai, br, bi = operands(dtype, n)
    cplx = ai is not None
    c = crt_constants(nmod)
    mu, nu = products._shifts(ozaki2_prescale(cxp, None, ar, ai, br, bi, "fast"), c)
    ops = _Operands(ar, ai, br, bi, mu, nu)
    near = rounds_to_nearest(nmod, n, "accurate")
    sides = {
        "A": (ops.a, ops.a_strides, ops.m, ops.m, ops.mu, ops.m),
        "B": (ops.b, ops.b_strides, ops.n, ops.n_p, ops.nu, ops.n),
    }
    fn_old = old_kernel(src, nmod, cplx, near)
    rec = {"case": name, "dtype": dtype, "N": n, "moduli": nmod, "nearest": near}
    old_ms, new_ms, identical, moved = {}, {}, True, 0
    for side, (x, strides, rows, rows_pad, shift, shift_sb) in sides.items():
        args = (x[0], x[1], strides, rows, rows_pad, ops.k, ops.kp, shift, shift_sb, nmod)

        def new(args=args):
            return products._residue_planes(*args, near)

        def old(args=args):
            return old_planes(fn_old, *args)

        new_ms[side] = median_ms(new, repeat)
        old_ms[side] = median_ms(old, repeat)
        pn, po = new(), old()
        identical = identical and pn.shape == po.shape and bool(cp.array_equal(pn, po))
        moved += 8 * x[0].size * (2 if cplx else 1) + pn.size
        del pn, po
        cp.get_default_memory_pool().free_all_blocks()
    old_ms["total"], new_ms["total"] = old_ms["A"] + old_ms["B"], new_ms["A"] + new_ms["B"]
    rec.update(
        old_ms=old_ms, new_ms=new_ms, bytes=moved, identical=identical,
        old_GBps=moved / old_ms["total"] / 1e6, new_GBps=moved / new_ms["total"] / 1e6,
        speedup=old_ms["total"] / new_ms["total"],
    )  # fmt: skip
    return rec


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON lines output path")
    p.add_argument("--old", help="the old kernel's file (headers from this checkout)")
    p.add_argument("--old-rev", default=OLD_REV, help="git revision of the old kernel")
    p.add_argument("--repeat", type=int, default=10, help="timed calls per measurement")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ",".join(CASES))
    args = p.parse_args(argv)
    src = old_source(args.old, args.old_rev)
    common = {
        "old": args.old or args.old_rev,
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "date": datetime.date.today().isoformat(),
        "command": "python3 tools/device/residues_bench.py " + " ".join(argv or sys.argv[1:]),
    }
    with open(args.out, "w") as f:
        for name in args.cases.split(","):
            t0 = time.time()
            rec = run_case(name, src, args.repeat)
            rec.update(common, wall_s=round(time.time() - t0, 1))
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(json.dumps(rec), flush=True)
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
