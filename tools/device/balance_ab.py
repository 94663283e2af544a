"""A/B on the device: the complex part check's stage-0 kernels (``src_cuda/balance.cu``:
``balance_sides`` per operand, ``balance_out``) of this tree against an older source of the same
file (``--old``, e.g. ``git show REF:src_cuda/balance.cu > old.cu``), launched as each tree's
backend launches them (this tree: ``backends.cupy.balance``' grid; the old one: a block per 256
entries of a row), on the operands the engine hands them (a complex array's parts, views at
stride 2) and the stage's own bf16 GEMM sums; outputs compared bit for bit; medians in ms of
``gpu_records.median_ms`` (CUDA events after two warm-up calls), alternating rounds; one JSON
line.

    python3 tools/device/balance_ab.py --old old.cu [-N 8192] [--out X.jsonl]
"""

from __future__ import annotations

import argparse

import array_api_compat.cupy as cxp
import cupy as cp
import numpy as np
from gpu_records import emit, median_ms  # same folder: the CUDA-event timer

from emulinalg.algorithm import certificate, parts
from emulinalg.backends.cupy import balance
from emulinalg.backends.cupy.gemm import _bf16_gemm
from emulinalg.backends.cupy.kernels import _BF16_ALIGN, _MAX_GRID_YZ, _THREADS, _ceil
from emulinalg.inputs import phi_matrix


def _old_kernels(path):
    with open(path) as fh:
        code = fh.read()
    mod = cp.RawModule(code=code, options=("--std=c++17",),
                       name_expressions=("balance_sides<double>",))  # fmt: skip
    return mod.get_function("balance_sides<double>"), mod.get_function("balance_out")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True)
    p.add_argument("-N", type=int, default=8192)
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out")
    args = p.parse_args()
    n = args.N
    A = cp.asarray(phi_matrix((n, n), args.phi, "complex128", seed=1))
    B = cp.asarray(phi_matrix((n, n), args.phi, "complex128", seed=2))
    ar, ai, br, bi = A.real, A.imag, B.real, B.imag
    ea, eb = parts._line_exponents(cxp, ar, ai, br, bi)  # (n, 1), (1, n)
    kp, n_p = _ceil(n, _BF16_ALIGN), _ceil(n, _BF16_ALIGN)
    old_sides, old_out = _old_kernels(args.old)

    def sides_new(re, im, e, R, C, Rp, Cp, rows):
        return balance._sides(re, im, e, 1, R, C, Rp, Cp, rows)

    def sides_old(re, im, e, R, C, Rp, Cp, rows):
        t16 = cp.empty((1, Rp, Cp), dtype=cp.uint16)
        d16 = cp.empty_like(t16)
        nz = cp.zeros((R if rows else C,), dtype=cp.int32)
        sr, sc = (s // 8 for s in re.strides)
        grid = (-(-Cp // _THREADS), min(Rp, _MAX_GRID_YZ))
        a = (re, im, np.int64(R * sr), np.int64(sr), np.int64(sc), np.int32(1), np.int32(R),
             np.int32(C), np.int32(Rp), np.int32(Cp), np.int32(rows),
             cp.ascontiguousarray(e, dtype=cp.int64).reshape(-1), t16, d16, nz)  # fmt: skip
        old_sides(grid, (_THREADS,), a)
        return t16, d16, nz

    cases = {"A": (ar, ai, ea, n, n, n, kp, 1), "B": (br, bi, eb, n, n, kp, n_p, 0)}
    same = True
    outs = {}
    for name, c in cases.items():
        got = [sides_new(*c), sides_old(*c)]
        same &= all(bool(cp.array_equal(x, y)) for x, y in zip(*got))
        outs[name] = got[0]
    c_t, c_d = _bf16_gemm(outs["A"][0], outs["B"][0]), _bf16_gemm(outs["A"][1], outs["B"][1])
    cc = certificate.cert_constants(n)
    terms = cp.asarray(np.asarray(parts.balance_terms(n, 4.0), dtype=np.float64))

    def out_args(pl, bad):
        return (c_t, c_d, np.int64(n_p), np.int32(1), np.int32(n), np.int32(n),
                outs["A"][2], outs["B"][2], terms, np.float64(cc.factor),
                np.float64(cc.abs_term), pl, bad)  # fmt: skip

    def out_new():
        pl, bad = cp.empty((1, n, n_p), cp.float32), cp.zeros((1,), cp.uint32)
        balance._kernel("balance.cu", "balance_out")(balance._grid(n_p, n), (_THREADS,),
                                                      out_args(pl, bad))  # fmt: skip
        return pl, bad

    def out_old():
        pl, bad = cp.empty((1, n, n_p), cp.float32), cp.zeros((1,), cp.uint32)
        old_out((-(-n_p // _THREADS), min(n, _MAX_GRID_YZ)), (_THREADS,), out_args(pl, bad))
        return pl, bad

    same &= all(bool(cp.array_equal(x, y)) for x, y in zip(out_new(), out_old()))
    rounds = []
    for _ in range(args.rounds):
        r = {}
        for tag, sides, out in (("new", sides_new, out_new), ("old", sides_old, out_old)):
            r[f"sides_A_{tag}"] = median_ms(lambda s=sides: s(*cases["A"]), args.repeat)
            r[f"sides_B_{tag}"] = median_ms(lambda s=sides: s(*cases["B"]), args.repeat)
            r[f"out_{tag}"] = median_ms(out, args.repeat)
        rounds.append({k: round(v, 4) for k, v in r.items()})
    emit({"tool": "balance_ab", "N": n, "phi": args.phi, "dtype": "complex128",
          "identical": same, "rounds": rounds}, args.out)  # fmt: skip


if __name__ == "__main__":
    main()
