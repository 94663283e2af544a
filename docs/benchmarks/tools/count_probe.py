"""Why the certificate keeps a count: each step of its refinement (``refinement.step_after``)
of one dtype level's product, with the failing entries of the count below spread over rows and
columns, and what ``refinement.line_patch`` makes of them under the library's budget. The
refinement's report limit is raised (``LINE_SHARE`` / ``--share``) for the probe only, so that
failures beyond the patch's budget are seen too; the count the level takes is then the probe's,
not the library's (printed beside it from a second, unmodified call).

    python docs/benchmarks/tools/count_probe.py --backend cupy -N 16384 --dtype float32 --phi 1

One JSON line per step (``--out`` appends them).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import emulinalg
from emulinalg.algorithm import refinement
from emulinalg.algorithm.xputil import to_host
from emulinalg.inputs import phi_matrix


def _spread(idx, m, n):
    r, c = idx // n, idx % n
    per_row, per_col = np.bincount(r, minlength=m), np.bincount(c, minlength=n)
    out = {}
    for name, per, size in (("rows", per_row, n), ("cols", per_col, m)):
        top = np.sort(per)[::-1]
        out[name] = {
            "with_failures": int(np.count_nonzero(per)),
            "top": [int(x) for x in top[:8]],
            # the fewest lines holding half / 90 % of the failures
            "lines_for_half": int(np.searchsorted(np.cumsum(top), 0.5 * idx.shape[0]) + 1),
            "lines_for_90pct": int(np.searchsorted(np.cumsum(top), 0.9 * idx.shape[0]) + 1),
            "line_entries": size,
        }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="numpy")
    p.add_argument("-N", type=int, default=1024)
    p.add_argument("-K", type=int, default=0, help="contraction size (default N)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--share", type=int, default=2, help="the probe's LINE_SHARE")
    p.add_argument(
        "--chain-all",
        action="store_true",
        help="numpy backend: its native model with all of k in one chain (cuBLAS's "
        "at large outputs), to see the cupy backend's decisions on the CPU",
    )
    p.add_argument("--once", action="store_true", help="only the probe's call (no library plan)")
    p.add_argument(
        "--suspects-max",
        type=int,
        default=0,
        help="the probe's refinement.SUSPECTS_MAX (the cupy kernels take all suspects)",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args()
    n, k = args.N, args.K or args.N
    a = phi_matrix((n, k), args.phi, args.dtype, seed=1)
    b = phi_matrix((k, n), args.phi, args.dtype, seed=2)
    if args.backend == "cupy":
        import cupy as cp

        a, b = cp.asarray(a), cp.asarray(b)
    if args.chain_all:
        from emulinalg.backends import numpy as numpy_backend

        numpy_backend.native_chain_k = None
    level = "float32" if args.dtype in ("float32", "complex64") else "float64"
    with emulinalg.config(strategy="eager"):
        library = None
        if not args.once:
            emulinalg.matmul(a, b, precision=level)
            library = str(emulinalg.last_plan())
        steps, real, share = [], refinement.step_after, refinement.LINE_SHARE

        def spy(count, suspects, failing, failed, m=0, n=0, patching=True, lines=False):
            rec = {"count": count, "suspects": suspects, "failing": failing}
            if failing and failing <= refinement.patch_limit(m, n) + (m * n) // args.share:
                idx = np.unique(to_host(failed()).astype(np.int64))
                rec.update(_spread(idx, m, n))
                refinement.LINE_SHARE = share  # the library's budget for its own decision
                try:
                    lp = refinement.line_patch(idx, m, n)
                finally:
                    refinement.LINE_SHARE = args.share
                rec["line_patch"] = (
                    None
                    if lp is None
                    else {
                        "rows": len(lp.rows),
                        "cols": len(lp.cols),
                        "block": None if lp.block is None else [len(x) for x in lp.block],
                        "entries": len(lp.entries),
                    }
                )
            step = real(count, suspects, failing, failed, m, n, patching, lines)
            rec["after"] = step.count
            steps.append(rec)
            return step

        limit = refinement.SUSPECTS_MAX
        refinement.step_after, refinement.LINE_SHARE = spy, args.share
        refinement.SUSPECTS_MAX = args.suspects_max or limit
        try:
            emulinalg.matmul(a, b, precision=level)
        finally:
            refinement.step_after, refinement.LINE_SHARE = real, share
            refinement.SUSPECTS_MAX = limit
    common = {"backend": args.backend, "N": n, "K": k, "dtype": args.dtype, "phi": args.phi,
              "library_plan": library, "probe_share": args.share,
              "chain_all": args.chain_all}  # fmt: skip
    for rec in steps:
        line = json.dumps({**common, **rec})
        print(line)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
