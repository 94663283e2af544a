"""A fixed-seed corpus of products, hashed: the yardstick of a change that must not change any
result (issue #23: the redesign is bit-identical before and after on every backend).

Every product runs with ``strategy="eager"`` on one backend (numpy, amx, cupy; ``--dask`` wraps
the operands in dask arrays of that library's chunks): the dtype levels, bit levels, explicit
Scheme I and II configurations (both modes), BF16 schedules where the backend has them,
real and complex, float32 and float64, 2-D, batched and matrix-vector shapes, k = 1, and
operands with NaN/Inf. One JSON line per product: its name, the plan's scheme, its native
entries and the SHA-256 of the result's bytes; the last line the hash of all of them.

    python tools/corpus_hash.py --backend numpy --out corpus_numpy.jsonl
    python tools/corpus_hash.py --backend numpy --check corpus_numpy.jsonl   # exit 1 on a change
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np

# The checkout this tool lives in, ahead of any installed copy (the compiled kernels still come
# from the installed one: emulinalg's extend_path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = [  # (batch, m, k, n); batch () for 2-D
    ((), 48, 200, 40),
    ((), 33, 1, 17),
    ((), 1, 300, 29),
    ((3,), 20, 130, 24),
    ((), 96, 1100, 64),
]
DTYPES = ["float64", "float32", "complex128", "complex64"]


def _precisions(emulinalg, dtype):
    real64 = dtype in ("float64", "complex128")
    out = [None, 53 if real64 else 24, 40 if real64 else 18]
    out += [
        emulinalg.OzakiII(moduli=n, mode=mode) for n in (8, 15) for mode in ("accurate", "fast")
    ]
    out += [emulinalg.OzakiI(slices=p) for p in (3, 7)]
    if not real64:
        out.append(emulinalg.BF16x3())
    return out


def _operands(shape, dtype, seed, nonfinite):
    from emulinalg.inputs import phi_matrix

    batch, m, k, n = shape
    rng = np.random.default_rng(seed)
    nb = batch[0] if batch else 1
    a = np.stack([phi_matrix((m, k), 1.0, dtype, seed=seed + i) for i in range(nb)])
    b = np.stack([phi_matrix((k, n), 2.0, dtype, seed=seed + 50 + i) for i in range(nb)])
    if not batch:
        a, b = a[0], b[0]
    if nonfinite:
        a[..., rng.integers(m), rng.integers(k)] = np.nan
        b[..., rng.integers(k), rng.integers(n)] = np.inf
    return a, b


def corpus(backend, use_dask):
    """Yields ``(name, result as a numpy array, plan)`` for every product of the corpus."""
    if backend == "numpy":
        os.environ["EMULINALG_AMX"] = "0"
    elif backend == "amx":
        os.environ["EMULINALG_AMX"] = "1"
    import emulinalg

    move = _mover(backend, use_dask)
    for si, shape in enumerate(SHAPES):
        for di, dtype in enumerate(DTYPES):
            for nonfinite in (False, True) if si == 0 else (False,):
                a, b = _operands(shape, dtype, 1000 * si + 10 * di, nonfinite)
                for prec in _precisions(emulinalg, dtype):
                    name = f"{shape}-{dtype}-{prec}" + ("-nonfinite" if nonfinite else "")
                    with emulinalg.config(strategy="eager"):
                        c = emulinalg.matmul(move(a), move(b), precision=prec)
                        c = _host(c)
                        plan = emulinalg.last_plan()
                    yield name, c, plan


def _mover(backend, use_dask):
    def to_lib(x):
        if backend == "cupy":
            import cupy as cp

            return cp.asarray(x)
        return x

    if not use_dask:
        return to_lib

    def to_dask(x):
        import dask.array as da

        chunks = tuple(max(1, s // 2) for s in x.shape)
        return da.from_array(to_lib(x), chunks=chunks, asarray=False)

    return to_dask


def _host(c):
    if hasattr(c, "compute"):
        c = c.compute()
    if hasattr(c, "get"):  # cupy
        c = c.get()
    return np.ascontiguousarray(np.asarray(c))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["numpy", "amx", "cupy"], default="numpy")
    p.add_argument("--dask", action="store_true", help="dask arrays of the backend's chunks")
    p.add_argument("--out", help="write the hashes here (JSON lines)")
    p.add_argument("--check", help="compare with this file; exit 1 where a result differs")
    args = p.parse_args()
    records, total = [], hashlib.sha256()
    for name, c, plan in corpus(args.backend, args.dask):
        h = hashlib.sha256(c.dtype.str.encode() + str(c.shape).encode() + c.tobytes()).hexdigest()
        total.update(h.encode())
        records.append({"product": name, "scheme": plan.scheme, "native_entries":
                        plan.native_entries, "sha256": h})  # fmt: skip
    head = {"backend": args.backend, "dask": args.dask, "products": len(records),
            "sha256": total.hexdigest()}  # fmt: skip
    print(json.dumps(head))
    if args.out:
        with open(args.out, "w") as fh:
            for r in records + [head]:
                fh.write(json.dumps(r) + "\n")
    if args.check:
        with open(args.check) as fh:
            old = [json.loads(line) for line in fh]
        before = {r["product"]: r for r in old if "product" in r}
        changed = [r["product"] for r in records if before.get(r["product"], {}).get("sha256")
                   != r["sha256"]]  # fmt: skip
        for name in changed:
            print(f"changed: {name}", file=sys.stderr)
        missing = sorted(set(before) - {r["product"] for r in records})
        for name in missing:
            print(f"missing: {name}", file=sys.stderr)
        return 1 if changed or missing else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
