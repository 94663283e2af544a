"""Where a dask graph of an emulated product spends its workers' time (issue #27).

Runs ``emulinalg.matmul`` of two phi-matrices made chunk by chunk on the workers (held before the
timed runs) through each graph in ``--modes`` (``EMULINALG_DASK_MODE``: "shared", the residues
once per chunk and exact K-block sums; "dd", a block product per task added in double-double)
and dask's native product, on a cluster of one worker (``--gpus``: dask-cuda's, cupy chunks;
else a CPU ``LocalCluster``), and prints per mode the wall time of the computation and the
workers' compute time by task prefix (the scheduler's task stream: the sum of each task's
compute interval; transfers and idle time are the difference to the wall). One JSON line per
mode with ``--out``.

    python3 docs/benchmarks/tools/dask_task_times.py --gpus --shape 16384,16384,16384 \
        --chunks 4096,16384,4096 --out X.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict

import dask.array as da
import numpy as np

import emulinalg
import emulinalg.backends.dask
from emulinalg.examples import multi_gpu, out_of_core


def _prefix(key):
    name = key[0] if isinstance(key, tuple) else key
    head, _, tail = str(name).rpartition("-")
    return head if head and len(tail) >= 8 else str(name)  # drop dask's token


def _times(client, wanted):
    """(wall seconds, {prefix: [compute seconds, tasks]}) of one computation of ``wanted``."""
    client.get_task_stream(count=0)
    t_start = time.time()
    t0 = time.perf_counter()
    client.compute(wanted, sync=True)
    wall = time.perf_counter() - t0
    per = defaultdict(lambda: [0.0, 0])
    for rec in client.get_task_stream(start=t_start):
        for ss in rec["startstops"]:
            if ss["action"] == "compute":
                p = per[_prefix(rec["key"])]
                p[0] += ss["stop"] - ss["start"]
                p[1] += 1
    return wall, dict(sorted(per.items(), key=lambda kv: -kv[1][0]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", action="store_true", help="a one-GPU dask-cuda worker, cupy chunks")
    p.add_argument("--shape", default="16384,16384,16384")
    p.add_argument("--chunks", default="4096,16384,4096")
    p.add_argument("--modes", default="dd,shared,native")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=2, help="timed runs after one warm-up")
    p.add_argument("--out")
    args = p.parse_args()
    m, k, n = (int(v) for v in args.shape.split(","))
    chunks = tuple(int(v) for v in args.chunks.split(","))
    if args.gpus:
        cluster, client = multi_gpu.start_cluster(1, quiet=True)
    else:
        import distributed

        cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1,
                                           dashboard_address=None)  # fmt: skip
        client = distributed.Client(cluster)
    try:
        a = out_of_core.operand((m, k), chunks[:2], args.phi, 0, 0, args.gpus)
        b = out_of_core.operand((k, n), chunks[1:], args.phi, 0, 1, args.gpus)
        a, b = client.persist([a, b])
        for mode in args.modes.split(","):
            if mode == "native":
                c = da.matmul(a, b)
                plan = "dask native"
            else:
                os.environ[emulinalg.backends.dask.MODE_ENV] = mode
                with emulinalg.config(strategy="eager"):
                    c = emulinalg.matmul(a, b)
                plan = str(emulinalg.last_plan())
            wanted = [da.sum(c)]
            walls, per = [], None
            for i in range(1 + args.repeat):
                wall, per_i = _times(client, wanted)
                if i:
                    walls.append(wall)
                    per = per_i
            rec = {"mode": mode, "m": m, "k": k, "n": n, "chunks": list(chunks),
                   "phi": args.phi, "chunk_library": "cupy" if args.gpus else "numpy",
                   "wall_seconds": float(np.median(walls)), "walls": walls,
                   "tflops": 2.0 * m * n * k / float(np.median(walls)) / 1e12,
                   "compute_by_prefix": {k_: [round(v[0], 4), v[1]] for k_, v in per.items()},
                   "plan": plan[:400]}  # fmt: skip
            busy = sum(v[0] for v in per.values())
            print(f"{mode}: wall {rec['wall_seconds']:.3f} s ({rec['tflops']:.1f} TFLOP/s), "
                  f"tasks' compute {busy:.3f} s", flush=True)  # fmt: skip
            for name, (sec, cnt) in list(per.items())[:14]:
                print(f"  {name:<48} {sec:8.3f} s  {cnt:5d} tasks")
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
