"""How accurate a line patch's native products are beside the native product itself.

The line patch (``refinement.line_patch``, ``_engine._native_lines``) takes a few rows of the
output from native float64 GEMMs of those rows: over all of k in one call, or summed over
pieces of K (``line_pieces``). For phi-matrices with one raised entry (its row is the patch's),
this prints the bits (max-rel / componentwise, against the exact product) of that row from the
whole native product, from one GEMM of the row, from one GEMM of 16 rows holding it, and from
pieces of K of about sqrt(k), per seed and k, on numpy (OpenBLAS) or cupy (cuBLAS).

    python docs/benchmarks/tools/line_native_bits.py --backend cupy --ks 256,2048 --seeds 8 \
        --out X.jsonl
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from emulinalg._engine import line_step
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="numpy", choices=("numpy", "cupy"))
    p.add_argument("--ks", default="256,2048")
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--out")
    args = p.parse_args(argv)
    if args.backend == "cupy":
        import cupy as xp

        def host(x):
            return x.get()
    else:
        xp = np

        def host(x):
            return x

    records = []
    for k in (int(x) for x in args.ks.split(",")):
        for seed in range(args.seeds):
            n = args.n
            a = phi_matrix((n, k), 0.5, seed=3 + 10 * seed)
            b = phi_matrix((k, n), 0.5, seed=4 + 10 * seed)
            a[5, 7] *= 100.0
            b[11, 9] *= 100.0
            ga, gb = xp.asarray(a), xp.asarray(b)
            step = line_step(k)  # the numpy backend's pieces
            pieces = sum(ga[5:6, k0 : k0 + step] @ gb[k0 : k0 + step] for k0 in range(0, k, step))
            rows = {
                "whole product": host(ga @ gb)[5:6],
                "one row": host(ga[5:6] @ gb),
                "16 rows": host(ga[0:16] @ gb)[5:6],
                "pieces": host(pieces),
            }
            rec = {"backend": args.backend, "k": k, "n": n, "seed": seed}
            for name, c in rows.items():
                acc = accuracy(c, a[5:6], b)
                rec[name] = [round(acc["bits_maxrel"], 2), round(acc["bits_cw"], 2)]
            print(json.dumps(rec))
            records.append(rec)
    if args.out:
        with open(args.out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)


if __name__ == "__main__":
    main()
