"""Symmetry zeros at size: the contraction split against the native entries it replaces.

Operands with a mirror-plane structure (rows, contraction index and columns of two parities,
the entries across parities rounding noise, 2**-52 of the others: a molecule's integrals in a
basis that follows its plane) have about half their output entries beyond one Scheme II
product's certificate. Per size and dtype, on one backend, median of ``--repeat`` runs after a
warm-up, the native product timed before and after each row:

- ``split``: the default level (``_engine.K_SPLITS``: the contraction's classes' products);
- ``native_entries``: the level with ``K_SPLITS = 0`` (those entries from the native product,
  as before the split existed);
- under ``--strategy`` (eager: every product emulated; performant: the cost model decides both
  the emulation and the split).

Bits (max-rel / componentwise) on ``--ref-rows`` sampled rows against the exact product,
beside the native product's. One JSON line per row.

    python3 docs/benchmarks/tools/k_split_bench.py --out OUT.jsonl --sizes 4096,8192 \\
        --dtype float64 [--array cupy|numpy] [--strategy eager|performant]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time

import numpy as np

import emulinalg
from emulinalg import _engine
from emulinalg.reference import accuracy, exact_matmul


def mirrored(xp, n, dtype, seed):
    rng = np.random.default_rng(seed)
    pr, pk, pc = (rng.integers(0, 2, n) for _ in range(3))

    def make(rows, cols):
        x = rng.standard_normal((n, n))
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal((n, n))
        return xp.asarray(np.where(rows[:, None] != cols[None, :], x * 2.0**-52, x).astype(dtype))

    return make(pr, pk), make(pk, pc)


def timed(fn, sync, repeat):
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="2048,4096")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--array", choices=("cupy", "numpy"), default="cupy")
    ap.add_argument("--strategy", default="eager")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ref-rows", type=int, default=8)
    args = ap.parse_args(argv)
    if args.array == "cupy":
        import cupy as xp

        def sync():
            xp.cuda.Device().synchronize()

        def host(x):
            return xp.asnumpy(x)
    else:
        xp = np

        def sync():
            pass

        def host(x):
            return x

    for n in (int(s) for s in args.sizes.split(",")):
        a, b = mirrored(xp, n, args.dtype, seed=n)
        t_nat0, c_nat = timed(lambda a=a, b=b: a @ b, sync, args.repeat)
        rows = np.linspace(0, n - 1, args.ref_rows).astype(int)
        ah, bh = host(a[rows]), host(b)
        ref = exact_matmul(ah, bh)
        nat_acc = accuracy(host(c_nat[rows]), ah, bh, ref)
        rec = {"N": n, "dtype": args.dtype, "array": args.array, "strategy": args.strategy}
        with emulinalg.config(strategy=args.strategy):
            for label, splits in (("split", _engine.K_SPLITS), ("native_entries", 0)):
                keep = _engine.K_SPLITS
                _engine.K_SPLITS = splits
                try:
                    t, c = timed(lambda a=a, b=b: emulinalg.matmul(a, b), sync, args.repeat)
                    plan = emulinalg.last_plan()
                finally:
                    _engine.K_SPLITS = keep
                acc = accuracy(host(c[rows]), ah, bh, ref)
                rec[label] = {
                    "seconds": t, "scheme": plan.scheme, "native_entries": plan.native_entries,
                    "bits": [acc["bits_maxrel"], acc["bits_cw"]], "plan": str(plan),
                }  # fmt: skip
        t_nat1, _ = timed(lambda a=a, b=b: a @ b, sync, args.repeat)
        rec.update(
            native_seconds=[t_nat0, t_nat1],
            native_bits=[nat_acc["bits_maxrel"], nat_acc["bits_cw"]],
            split_x_native_entries=rec["native_entries"]["seconds"] / rec["split"]["seconds"],
            split_x_native=min(t_nat0, t_nat1) / rec["split"]["seconds"],
            date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        )
        line = json.dumps(rec)
        print(
            f"N={n} {args.dtype} {args.strategy}: native {t_nat0:.4f}/{t_nat1:.4f} s, "
            f"split {rec['split']['seconds']:.4f} s ({rec['split']['native_entries']} native), "
            f"native entries {rec['native_entries']['seconds']:.4f} s "
            f"({rec['native_entries']['native_entries']}); bits split {rec['split']['bits']}, "
            f"without {rec['native_entries']['bits']}, native {rec['native_bits']}",
            flush=True,
        )
        with open(args.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
