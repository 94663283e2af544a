"""Out-of-core emulated product on a dask cluster: operands larger than the workers' memory.

``python -m emulinalg.examples.out_of_core`` (also ``python -m emulinalg demo dask``) starts a
``distributed.LocalCluster`` whose workers together get less memory than the operands take,
builds ``A`` (m x k) and ``B`` (k x n) chunk by chunk from a fixed seed (entries
``(U(0,1) - 0.5) * exp(phi * N(0,1))``, the field's phi-matrices; every chunk has its own
random stream, so nothing is ever held whole), multiplies them with ``emulinalg.matmul``
(a lazy Scheme II graph: statistics over the whole matrices, residues made once per chunk,
block products added modulo each modulus over K-blocks, one CRT per output block; with
``EMULINALG_DASK_MODE=dd``, block products added in double-double) and computes, in one pass
over the graph, the sum of all entries of ``C`` (so every block of the product is computed)
and the entries of ``C`` in a few sampled rows (and columns, ``--cols``): the only part that
travels back. Those are graded against the exact product (``emulinalg.reference``), next to the
native product, and the progress of the computation is shown while it runs.

The default shape is a Gram-type product with a long inner dimension, 1024 x 81920 times
81920 x 64 (A: 640 MiB) on two workers of 300 MiB each; it takes one to two minutes on two cores
with the numpy reference backend. The count of moduli depends on statistics over the whole
matrices, so the workers hold the chunks from the statistics pass to the residue pass and spill
to disk what does not fit (``--memory-limit``). ``--scheduler tcp://...`` runs on an
existing cluster instead; ``--threads N`` on dask's threaded scheduler (no ``distributed``),
which is the simple way to use one GPU with cupy chunks (``--cupy``).

The native figures are those of the chunk library's product of the sampled rows (``--native
rows``, default) or of the whole matrices (``--native whole``: A and B are materialised once, on
the host or the GPU, for that product only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import numpy as np


def phi_block(block_id=None, block_info=None, phi=1.0, seed=0, stream=0, cupy=False):
    """One chunk of a phi-matrix, from its own random stream ``(seed, stream, i, j)``."""
    info = block_info[None]
    shape = info["chunk-shape"]
    i, j = block_id
    rng = np.random.default_rng([seed, stream, i, j])
    x = (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))
    if cupy:
        import cupy as cp

        return cp.asarray(x)
    return x


def operand(shape, chunks, phi, seed, stream, cupy=False):
    """A lazy phi-matrix of ``shape`` built chunk by chunk (nothing is generated yet)."""
    import dask.array as da

    rows = _split(shape[0], chunks[0])
    cols = _split(shape[1], chunks[1])
    if cupy:
        import cupy as cp

        meta = cp.empty((0, 0))
    else:
        meta = np.empty((0, 0))
    return da.map_blocks(
        phi_block,
        chunks=(rows, cols),
        dtype=np.float64,
        meta=meta,
        phi=phi,
        seed=seed,
        stream=stream,
        cupy=cupy,
    )


def _split(n, c):
    return (c,) * (n // c) + ((n % c,) if n % c else ())


def _host(x):
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


def _sample(n, count):
    """``count`` evenly spaced indices of ``range(n)`` (all of them when count <= 0)."""
    if count <= 0 or count >= n:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, count).astype(np.int64))


def run(
    client,
    m=1024,
    k=81920,
    n=64,
    chunks=(512, 2048, 64),
    phi=1.0,
    rows=16,
    cols=0,
    precision="float64",
    seed=0,
    progress=True,
    cupy=False,
    native="rows",
    threads=None,
):
    """Build the product, compute it (on ``client``, or with dask's threaded scheduler when
    ``client`` is None) and grade the sampled entries; returns a dict of results."""
    import dask
    import dask.array as da

    import emulinalg
    from emulinalg.reference import accuracy, effective_bits, exact_matmul

    cm, ck, cn = chunks
    a = operand((m, k), (cm, ck), phi, seed, 0, cupy)
    b = operand((k, n), (ck, cn), phi, seed, 1, cupy)
    rsel, csel = _sample(m, rows), _sample(n, cols)

    t0 = time.perf_counter()
    with emulinalg.config(strategy="eager"):
        c = emulinalg.matmul(a, b, precision=precision)
    plan = emulinalg.last_plan()
    build = time.perf_counter() - t0

    # One pass over the graph: every block of C (its sum) and the sampled entries.
    wanted = [c[rsel, :][:, csel], da.sum(c)]
    t0 = time.perf_counter()
    peaks = {}
    if client is not None:
        futures = client.compute(wanted)
        if progress:
            from distributed import progress as show

            show(futures)
            print(file=sys.stderr)
        c_s, total = (f.result() for f in futures)
        peaks = client.run(_peak_rss)  # the workers' largest resident set so far
    else:
        from dask.diagnostics import ProgressBar

        with ProgressBar(out=sys.stderr) if progress else contextlib.nullcontext():
            c_s, total = dask.compute(*wanted, scheduler="threads", num_workers=threads)
    seconds = time.perf_counter() - t0
    c_s, total = _host(c_s), _host(total)

    # Grade: exact and native on the sampled entries, a group of columns at a time (B is never
    # held whole here); the maxima of the per-group errors are the maxima over all of them.
    a_rows = a[rsel, :].compute(scheduler="sync")
    a_rows_h = _host(a_rows)
    nat_whole = None
    if native == "whole":
        A, B = dask.compute(a, b, scheduler="threads", num_workers=threads)
        nat_whole = _host((A @ B)[rsel, :][:, csel])
        A = B = None
    worst = {"emulated": [0.0, 0.0], "native": [0.0, 0.0]}
    mismatch = 0
    for g0 in range(0, len(csel), 256):
        group = csel[g0 : g0 + 256]
        b_g = b[:, group].compute(scheduler="sync")
        b_g_h = _host(b_g)
        ref = exact_matmul(a_rows_h, b_g_h)
        nat = nat_whole[:, g0 : g0 + 256] if nat_whole is not None else _host(a_rows @ b_g)
        for label, c_g in (("emulated", c_s[:, g0 : g0 + 256]), ("native", nat)):
            acc = accuracy(c_g, a_rows_h, b_g_h, ref=ref)
            w = worst[label]
            w[0], w[1] = max(w[0], acc["maxrel"]), max(w[1], acc["maxcw"])
            if label == "emulated":
                mismatch += acc["nonfinite_mismatch"]
    return {
        "m": m,
        "n": n,
        "k": k,
        "chunks": list(chunks),
        "phi": phi,
        "precision": str(precision),
        "chunk_library": "cupy" if cupy else "numpy",
        "rows": len(rsel),
        "cols": len(csel),
        "native": native,
        "operand_bytes": 8 * (m * k + k * n),
        "seconds": seconds,
        "build_seconds": build,
        "sum": float(total),
        "worker_peak_rss": max((v for v in peaks.values() if v), default=None),
        "bits_maxrel": effective_bits(worst["emulated"][0]),
        "bits_cw": effective_bits(worst["emulated"][1]),
        "native_bits_maxrel": effective_bits(worst["native"][0]),
        "native_bits_cw": effective_bits(worst["native"][1]),
        "nonfinite_mismatch": mismatch,
        "plan": str(plan),
    }


def _peak_rss():
    """Peak resident set size of this process in bytes (Linux/macOS; None elsewhere)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _bytes(text):
    from dask.utils import parse_bytes

    return parse_bytes(text)


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m emulinalg.examples.out_of_core",
        description="Emulated product of dask operands larger than the workers' memory.",
    )
    p.add_argument("--shape", default="1024,81920,64", help="m,k,n (default 1024,81920,64)")
    p.add_argument("--chunks", default="512,2048,64", help="chunk sizes cm,ck,cn")
    p.add_argument("--phi", type=float, default=1.0, help="exponent spread phi (default 1)")
    p.add_argument("--rows", type=int, default=16, help="sampled rows graded exactly")
    p.add_argument("--cols", type=int, default=0, help="sampled columns (default 0: all)")
    p.add_argument(
        "--native",
        choices=("rows", "whole"),
        default="rows",
        help="native figures from the product of the sampled rows (default) or of the whole "
        "matrices (materialised once for it)",
    )
    p.add_argument("--precision", default="float64", help="float64 (default), float32, bits")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="LocalCluster workers (default 2)")
    p.add_argument(
        "--memory-limit", default="300MiB", help="memory per LocalCluster worker (default 300MiB)"
    )
    p.add_argument("--scheduler", help="address of an existing scheduler instead of a cluster")
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="dask's threaded scheduler with N threads instead of a cluster (one GPU: --cupy)",
    )
    p.add_argument("--cupy", action="store_true", help="cupy chunks (GPU workers)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    m, k, n = (int(v) for v in args.shape.split(","))
    chunks = tuple(int(v) for v in args.chunks.split(","))
    precision = int(args.precision) if args.precision.isdigit() else args.precision
    cluster = client = None
    if args.threads:
        where = f"dask threaded scheduler, {args.threads} threads"
    elif args.scheduler:
        from distributed import Client

        client = Client(args.scheduler)
        where = f"cluster at {args.scheduler}"
    else:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=args.memory_limit,
            dashboard_address=None,
        )
        client = Client(cluster)
        total = args.workers * _bytes(args.memory_limit)
        where = (
            f"LocalCluster: {args.workers} workers x {args.memory_limit} = {total / 2**20:.0f} MiB"
        )
    try:
        if not args.quiet:
            operands = 8 * (m * k + k * n)
            print(
                f"A: {m} x {k}, B: {k} x {n} float64, {operands / 2**20:.0f} MiB of operands; "
                f"{where}",
                file=sys.stderr,
            )
        res = run(
            client,
            m=m,
            k=k,
            n=n,
            chunks=chunks,
            phi=args.phi,
            rows=args.rows,
            cols=args.cols,
            precision=precision,
            seed=args.seed,
            # a progress bar redrawn into a log file floods it: bars on terminals only
            progress=not (args.quiet or args.json) and sys.stderr.isatty(),
            cupy=args.cupy,
            native=args.native,
            threads=args.threads,
        )
        res["workers"] = where
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    if args.json:
        print(json.dumps(res))
    else:
        print(res["plan"])
        print(
            f"computed in {res['seconds']:.1f} s (graph built in {res['build_seconds'] * 1e3:.0f}"
            f" ms); sum of C = {res['sum']:.17g}"
        )
        if res["worker_peak_rss"]:
            print(f"largest worker resident set: {res['worker_peak_rss'] / 2**20:.0f} MiB")
        print(
            f"{res['rows']} x {res['cols']} sampled entries against the exact product: bits "
            f"maxrel {res['bits_maxrel']:.1f} (native {res['native_bits_maxrel']:.1f}), "
            f"componentwise {res['bits_cw']:.1f} (native {res['native_bits_cw']:.1f}; "
            f"native of the {res['native']})"
        )
    return 0


def demo_main(args):
    """``python -m emulinalg demo dask``: the defaults above; ``--phi`` (first value),
    ``--precision`` (first value), ``--seed``, ``--json`` and ``--quiet`` are passed on."""
    argv = ["--seed", str(args.seed)]
    if args.phi:
        argv += ["--phi", str(args.phi[0])]
    if args.precision:
        argv += ["--precision", str(args.precision[0])]
    argv += ["--json"] * bool(args.json) + ["--quiet"] * bool(args.quiet)
    return main(argv)


if __name__ == "__main__":
    sys.exit(main())
