"""The native GEMM's rounding-error model on this machine's cupy (cuBLAS) or numpy (BLAS).

For the certificate's native form (emulinalg/algorithm/certificate.py ``native_error``): per entry
the error of the native product relative to u sqrt(k) ||a_i o b_j||_2, as its root mean square over
the graded entries, for k from 256 up, on square-ish products large enough that cuBLAS runs its
usual kernels (no split-K): (N x k) @ (k x N), rows x cols graded against the exact product.
A backend's ``native_error_rms`` is the rms at small k and ``native_chain_k`` the k beyond
which it falls like sqrt(chain / k) (None: it does not fall).

    python3 native_error.py --backend cupy --out native_error.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from emulinalg.inputs import phi_matrix
from emulinalg.reference import exact_matmul

U = {"float64": 2.0**-53, "float32": 2.0**-24, "complex128": 2.0**-53, "complex64": 2.0**-24}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cupy", choices=["cupy", "numpy"])
    p.add_argument("--dtypes", default="float64,float32,complex128")
    p.add_argument("--ks", default="256,1024,4096,16384")
    p.add_argument("--n", type=int, default=2048, help="rows of A and columns of B")
    p.add_argument("--graded", type=int, default=48, help="rows and columns graded")
    p.add_argument("--phi", type=float, default=0.5)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.backend == "cupy":
        import cupy as xp

        def to_host(x):
            return xp.asnumpy(x)
    else:
        xp = np

        def to_host(x):
            return x

    recs = []
    for dt in args.dtypes.split(","):
        for k in (int(v) for v in args.ks.split(",")):
            t0 = time.time()
            a = phi_matrix((args.n, k), args.phi, dt, seed=1)
            b = phi_matrix((k, args.n), args.phi, dt, seed=2)
            c = to_host(xp.matmul(xp.asarray(a), xp.asarray(b)))
            pick = np.linspace(0, args.n - 1, args.graded).astype(int)
            sa, sb = a[pick], b[:, pick]
            hi, lo = exact_matmul(sa, sb)
            got = c[np.ix_(pick, pick)].astype(hi.dtype)
            err = np.abs((got - hi) - lo)
            mag_a, mag_b = np.abs(sa.astype(np.complex128)), np.abs(sb.astype(np.complex128))
            x2 = np.sqrt(mag_a**2 @ mag_b**2)
            r = (err / (U[dt] * math.sqrt(k) * x2.real)).ravel()
            rec = {
                "what": "native_error", "backend": args.backend, "dtype": dt, "k": k,
                "n": args.n, "graded": args.graded, "phi": args.phi,
                "rms": float(np.sqrt(np.mean(r**2))), "median": float(np.median(r)),
                "max": float(r.max()), "seconds": round(time.time() - t0, 2),
            }  # fmt: skip
            recs.append(rec)
            print(json.dumps(rec), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            for rec in recs:
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
