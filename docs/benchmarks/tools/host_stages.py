"""The amx backend's C++ stages outside the tile GEMMs, timed alone (issue #25).

Scheme II's residues written into the tile panels (``_amx.ozaki2_pack``) and its CRT
(``_amx.ozaki2_crt``) for N x N operands of phi = 1 (real, or complex with 3M sets), on the
explicit AVX-512 loops and on the portable ones (``_amx.host_avx512``; a build without the
switch is timed as built). Median of ``--repeat`` calls after one untimed call, whose buffers
the pool then serves (the level's steady state); threads from OMP_NUM_THREADS. The CRT reads
random valid residues: its time does not depend on their values while every result is a normal
number.

    OMP_NUM_THREADS=16 python3 docs/benchmarks/tools/host_stages.py --sizes 4096,8192 \
        --cases float64:16,float32:8,complex128:16 --out X.jsonl \
        --build "$(git rev-parse --short HEAD)"
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import time

import numpy as np

from emulinalg.algorithm.moduli import MODULI, crt_constants
from emulinalg.backends import amx as backend
from emulinalg.inputs import phi_matrix


def _median(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _case(amx, n, dtype, moduli, repeat):
    cplx = dtype.startswith("complex")
    real = {"complex128": "float64", "complex64": "float32"}.get(dtype, dtype)
    a = phi_matrix((n, n), 1.0, real, seed=1)
    b = phi_matrix((n, n), 1.0, real, seed=2)
    ai = phi_matrix((n, n), 1.0, real, seed=3) if cplx else None
    bi = phi_matrix((n, n), 1.0, real, seed=4) if cplx else None
    c = crt_constants(moduli)
    # shifts putting each line's largest |X| near 2**(L/2 - log2(n)/2), as the scaling does
    shift_a = (int(c.L / 2 - np.log2(n) / 2) - np.frexp(np.abs(a).max(1))[1]).astype(np.int32)
    shift_b = (int(c.L / 2 - np.log2(n) / 2) - np.frexp(np.abs(b).max(0))[1]).astype(np.int32)

    def pack():
        amx.ozaki2_pack(a, b, shift_a, shift_b, moduli, ai, bi, nearest=True)

    rng = np.random.default_rng(0)
    parts = 2 if cplx else 1
    res = np.empty((parts, moduli, n, n), np.int8)
    for ell, m in enumerate(MODULI[:moduli]):
        res[:, ell] = rng.integers(-(m // 2), (m - 1) // 2 + 1, size=(parts, n, n), dtype=np.int8)
    out_dt = "float32" if real == "float32" else "float64"
    outs = [amx.empty((n, n), out_dt) for _ in range(parts)]
    mu = np.full(n, int(c.L) // 2, np.int32)  # results near 1: every one a normal number

    def crt():
        amx.ozaki2_crt(res if cplx else res[0], mu, mu, backend.OUT_KIND[out_dt],
                       *backend._crt_arrays(moduli), outs[0], None,
                       outs[-1] if cplx else None, None)  # fmt: skip

    return _median(pack, repeat), _median(crt, repeat)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4096")
    p.add_argument("--cases", default="float64:16,float32:8", help="dtype:moduli,...")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--build", default="", help="a label for the build measured (e.g. a commit)")
    p.add_argument("--note", default="")
    p.add_argument("--out")
    args = p.parse_args(argv)
    amx = backend._module()
    switch = getattr(amx, "host_avx512", None)
    loops = ["as built"] if switch is None else ["avx512", "portable"]
    if switch is not None:
        try:
            was = switch(True)
        except ValueError:  # the CPU lacks AVX-512: only the portable loops run
            loops, was = ["portable"], switch()
    try:
        for n in map(int, args.sizes.split(",")):
            for case in args.cases.split(","):
                dtype, moduli = case.split(":")
                for which in loops:
                    if switch is not None:
                        switch(which == "avx512")
                    t_pack, t_crt = _case(amx, n, dtype, int(moduli), args.repeat)
                    entries = n * n
                    rec = {
                        "bench": "host_stages", "date": datetime.date.today().isoformat(),
                        "build": args.build, "loops": which, "N": n, "dtype": dtype,
                        "moduli": int(moduli), "threads": os.environ.get("OMP_NUM_THREADS"),
                        "pack_s": round(t_pack, 5), "crt_s": round(t_crt, 5),
                        # per operand entry (both operands) and per output entry, times threads
                        "pack_ns_entry_thread": None, "crt_ns_entry_thread": None,
                        "note": args.note,
                    }  # fmt: skip
                    threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count())
                    rec["pack_ns_entry_thread"] = round(t_pack / (2 * entries) * 1e9 * threads, 2)
                    rec["crt_ns_entry_thread"] = round(t_crt / entries * 1e9 * threads, 2)
                    print(json.dumps(rec), flush=True)
                    if args.out:
                        with open(args.out, "a") as f:
                            f.write(json.dumps(rec) + "\n")
    finally:
        if switch is not None:
            switch(was)


if __name__ == "__main__":
    main()
