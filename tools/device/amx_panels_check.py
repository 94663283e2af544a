"""The AMX host's Scheme II mod GEMMs on the two residue-panel layouts (issue #25): plain
panels against chunked pairs (pack.hpp's TileSource, the blocking's ``panels`` knob), K in one
chunk against CHUNK_KC tiles per chunk, in alternating rounds on the same residues (the results
are compared bit for bit); then the float64 and float32 levels (eager and default) beside
numpy.matmul on the same inputs, with numpy timed before and after, per layout. One JSON line
per measurement in --out.

    python3 tools/device/amx_panels_check.py --n 8192 --out amx_panels.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time

import numpy as np

import emulinalg
import emulinalg._amx as _amx
from emulinalg.backends import amx
from emulinalg.inputs import phi_matrix


def _best(fn, repeat):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts), float(np.median(ts))


def mod_gemms(n, k, nmod, threads, rounds, emit, half=0):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, k)), rng.standard_normal((k, n))
    mu, nu = np.full(n, 20, np.int32), np.full(n, 20, np.int32)
    re, want = np.empty((n, n), np.int8), None
    for rnd in range(rounds):
        for panels in (0, 1):
            _amx.set_blocking(f"default,panels={panels}")
            packed = _amx.ozaki2_pack(a, b, mu, nu, nmod)
            for kc in (0, amx.CHUNK_KC):
                # one thread per core too, for chunked 8-tile chunks (SMT pairs share L1)
                for team in (threads, half) if half and panels == 1 and kc else (threads,):

                    def run(packed=packed, kc=kc, team=team):
                        for ell in range(nmod):
                            _amx.ozaki2_multiply(packed, ell, re, None, threads=team, kc=kc)

                    best = _best(run, 2)[0]
                    want = re.copy() if want is None else want
                    emit({"bench": "mod_gemms", "round": rnd, "panels": panels, "kc": kc,
                          "n": n, "k": k, "moduli": nmod, "threads": team,
                          "tops_best": round(2 * n * n * k * nmod / best / 1e12, 2),
                          "same_bits": bool(np.array_equal(re, want))})  # fmt: skip
            del packed
            # the statistics' bound GEMM (gemm_s8s8s32, packing included) on the same layout
            a8 = rng.integers(-127, 128, (n, k), dtype=np.int8)
            b8 = rng.integers(-127, 128, (k, n), dtype=np.int8)
            best = _best(lambda a8=a8, b8=b8: _amx.gemm_s8s8s32(a8, b8, threads=threads), 3)[0]
            tops = round(2 * n * n * k / best / 1e12, 2)
            emit({"bench": "bound_gemm", "round": rnd, "panels": panels, "n": n, "k": k,
                  "threads": threads, "tops_best": tops})  # fmt: skip
    _amx.set_blocking("default")


def levels(n, phi, repeat, emit):
    for dt in ("float64", "float32"):
        a, b = phi_matrix((n, n), phi, dt, seed=1), phi_matrix((n, n), phi, dt, seed=2)
        native = lambda a=a, b=b: np.matmul(a, b)  # noqa: E731
        for panels in (1, 0):
            _amx.set_blocking(f"default,panels={panels}")
            amx._chunk_kc = None  # each layout times its own K chunk
            rec = {"bench": "level", "dtype": dt, "n": n, "phi": phi, "panels": panels}
            rec["native_before_s"] = _best(native, 2)[1]
            for name, strategy in (("eager", "eager"), ("default", None)):
                with emulinalg.config(strategy=strategy or emulinalg.get_config().strategy):
                    emulinalg.matmul(a, b)  # warm-up: times the K chunk on the first
                    rec[f"{name}_s"] = _best(lambda a=a, b=b: emulinalg.matmul(a, b), repeat)[1]
                    rec[f"{name}_plan"] = str(emulinalg.last_plan())[:240]
            rec["amx_mod_chunk"] = amx.mod_chunk()
            rec["native_after_s"] = _best(native, 2)[1]
            nat = 0.5 * (rec["native_before_s"] + rec["native_after_s"])
            rec["eager_vs_numpy"] = round(nat / rec["eager_s"], 3)
            rec["default_vs_numpy"] = round(nat / rec["default_s"], 3)
            emit(rec)
    _amx.set_blocking("default")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-levels", action="store_true")
    p.add_argument("--out")
    args = p.parse_args()
    common = {"date": datetime.date.today().isoformat(), "cpus": os.cpu_count()}

    def emit(rec):
        rec.update(common)
        print(json.dumps(rec), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")

    mod_gemms(args.n, args.n, 4, args.threads, args.rounds, emit, args.threads // 2)
    if not args.skip_levels:
        levels(args.n, args.phi, args.repeat, emit)


if __name__ == "__main__":
    main()
