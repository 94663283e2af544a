"""The Scheme II residue kernels on the GPU, one against the other: times and bit-identical planes.

Both kernels are in the tree (``src_cuda/ozaki2_residues.cu``, the word kernel, and
``src_cuda/ozaki2_residues_mma.cu``, the tensor-core kernel); each runs through the backend's own
``products._residue_planes`` (``kernel=``), which launches it as ``ozaki2_product`` does. Per case
both operands of a square product, as ``ozaki2_product`` makes them (A's rows, B's columns as
B'^T planes), with the shifts of the generic fast-mode prescale; float32/complex64 cases take the
float64 parts of float32 values, as the engine gives them:

- float64, N = 16384, 15 and 8 moduli
- float32, N = 16384, 8 and 12 moduli
- complex128, N = 8192, 16 moduli; complex64, N = 8192, 8 moduli (3M: re, im, re + im planes)

With ``--old-dir DIR`` (an older ``src_cuda/``, e.g. ``git archive REF src_cuda | tar -x -C
DIR``) the pair is that copy's tensor-core kernel against this tree's, both launched by this
tree's ``products._residue_planes`` (so their argument lists must agree).

The two float64/float32 pairs separate the source dtype from the count of moduli (the H200 record
``docs/benchmarks/h200/kernels_residues_branch_res_2026-12-02.jsonl`` measured float64 at 15 and
float32 at 8 only). Each time is the median of ``--repeat`` CUDA-event-timed calls after two
warm-up calls. One JSON line per case (to ``--out`` and stdout): each kernel's ms for A, B and
both, the bytes moved (float64 entries read, int8 planes written) and the effective GB/s, the
speedup of the MMA kernel, whether every plane is bit-identical, and the kernel the backend
runs (``products.RESIDUE_KERNEL``). From the repository root with the project on PYTHONPATH;
a few seconds per case on an H200 once the 12 kernel instances are compiled (NVRTC at first
use, then cupy's disk cache).

    python3 tools/device/residues_bench.py --out X.jsonl [--repeat 10]
        [--cases float64_15,float64_8,float32_8,float32_12,complex128_16,complex64_8] [--n N]
        [--old-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_records

import array_api_compat.cupy as cxp
import cupy as cp
from gpu_records import median_ms, records

from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, rounds_to_nearest
from emulinalg.backends import cuda as _cuda
from emulinalg.backends.cupy import kernels, products
from emulinalg.backends.cupy.kernels import _Operands

CASES = {  # name: (dtype, N, moduli)
    "float64_15": ("float64", 16384, 15),
    "float64_8": ("float64", 16384, 8),
    "float32_8": ("float32", 16384, 8),
    "float32_12": ("float32", 16384, 12),
    "complex128_16": ("complex128", 8192, 16),
    "complex64_8": ("complex64", 8192, 8),
}
OLD, MMA = products.RESIDUE_KERNELS
OLD_MMA = "ozaki2_residues_mma (--old-dir)"
_OLD_MODULES: dict = {}  # the older source's compiled kernels


@contextlib.contextmanager
def older_source(old_dir):
    """``products._residue_planes`` compiling ``old_dir``'s sources: the source folder and the
    compiled-kernel cache swapped (``cuda.source`` caches the text by file name: cleared)."""
    new_dir, new_modules = _cuda.source_dir, kernels._modules
    _cuda.source_dir, kernels._modules = (lambda: Path(old_dir).resolve()), _OLD_MODULES
    _cuda.source.cache_clear()
    try:
        yield
    finally:
        _cuda.source_dir, kernels._modules = new_dir, new_modules
        _cuda.source.cache_clear()


def phi_matrix_gpu(n, phi, seed):
    """(U(0,1) - 0.5) exp(phi N(0,1)), generated on the device."""
    rng = cp.random.default_rng(seed)
    return (rng.random((n, n)) - 0.5) * cp.exp(phi * rng.standard_normal((n, n)))


def operands(dtype, n):
    """(ar, ai, br, bi): float64 parts; float32/complex64 ones hold float32 values."""
    cplx, narrow = dtype.startswith("complex"), dtype in ("float32", "complex64")
    parts = []
    for seed in (1, 2):
        for s in (seed, seed + 10):
            x = phi_matrix_gpu(n, 1.0, s) if s == seed or cplx else None
            parts.append(x.astype(cp.float32).astype(cp.float64) if narrow and x is not None else x)
    return parts


def run_case(name, repeat, n_override=None, old_dir=None):
    dtype, n, nmod = CASES[name]
    n = n_override or n
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
    rec = {"case": name, "dtype": dtype, "N": n, "moduli": nmod, "nearest": near,
           "chosen": products.RESIDUE_KERNEL}  # fmt: skip
    pair = (OLD_MMA if old_dir else OLD, MMA)
    ms = {pair[0]: {}, MMA: {}}
    identical, moved = True, 0
    for side, (x, strides, rows, rows_pad, shift, shift_sb) in sides.items():
        args = (x[0], x[1], strides, rows, rows_pad, ops.k, ops.kp, shift, shift_sb, nmod, near)
        planes = {}
        for kernel in pair:

            def call(kernel=kernel, args=args):
                if kernel == OLD_MMA:
                    with older_source(old_dir):
                        return products._residue_planes(*args, kernel=MMA)
                return products._residue_planes(*args, kernel=kernel)

            ms[kernel][side] = median_ms(call, repeat)
            planes[kernel] = call()
        po, pn = planes[pair[0]], planes[MMA]
        identical = identical and po.shape == pn.shape and bool(cp.array_equal(po, pn))
        moved += 8 * x[0].size * (2 if cplx else 1) + pn.size
        del planes, po, pn
        cp.get_default_memory_pool().free_all_blocks()
    for kernel in pair:
        ms[kernel]["total"] = ms[kernel]["A"] + ms[kernel]["B"]
    rec.update(
        old=pair[0], old_ms=ms[pair[0]], mma_ms=ms[MMA], bytes=moved, identical=identical,
        old_GBps=moved / ms[pair[0]]["total"] / 1e6, mma_GBps=moved / ms[MMA]["total"] / 1e6,
        speedup=ms[pair[0]]["total"] / ms[MMA]["total"],
    )  # fmt: skip
    return rec


def summary(rec):
    return (
        f"{rec['case']:>14} N={rec['N']} {rec['old']} {rec['old_ms']['total']:.2f} ms, {MMA} "
        f"{rec['mma_ms']['total']:.2f} ms ({rec['speedup']:.2f}x), identical "
        f"{rec['identical']}, chosen {rec['chosen']}"
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON lines output path")
    p.add_argument("--repeat", type=int, default=10, help="timed calls per measurement")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ",".join(CASES))
    p.add_argument("--n", type=int, help="another N for every case (a quick check)")
    p.add_argument("--old-dir", help="an older src_cuda/: its tensor-core kernel against this one")
    args = p.parse_args(argv)
    script = "tools/device/residues_bench.py"
    with records(args.out, script, argv, summary, kernels=[OLD, MMA]) as emit:
        for name in args.cases.split(","):
            t0 = time.time()
            rec = run_case(name, args.repeat, args.n, args.old_dir)
            rec["wall_s"] = round(time.time() - t0, 1)
            emit(rec)
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
