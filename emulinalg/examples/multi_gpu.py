"""Emulated products across the GPUs of one host: a dask-cuda cluster, one worker per GPU.

``python -m emulinalg.examples.multi_gpu --gpus 4`` (also ``python -m emulinalg demo dask --gpus
4``) starts ``dask_cuda.LocalCUDACluster`` with one worker process per GPU (device memory
limited, spilling to host memory past it, and to disk past the host limit) and a
``distributed.Client``, makes the two phi-matrix operands chunk by chunk on the workers
(``out_of_core.operand``: cupy chunks from their own random streams, held once made), and runs
the example of :mod:`emulinalg.examples.out_of_core` on them: the emulated product (cupy chunks
take the double-double graph: each block product one in-core call of the cupy engine, its
statistics and residues its own, K-block partials added in double-double; docs/dask.md), then
dask's own product of the same operands on the same workers (``dask.array.matmul``: cuBLAS per
block), both graded on sampled rows and columns against the exact product.

It does this first on one GPU and then on all ``N`` (``--gpus 1,2,4,8``: on each count in turn),
and prints per count the median time, the effective TFLOP/s (2mnk / t), the scaling
efficiency ``t_s s / (G t_G)`` against the smallest count s and the bytes the workers sent per
run (to one another; the few results to the client) of both products, and the emulated
product's speed over dask's native one. NVLink multicast stays off in every process it starts
(``NO_MULTICAST``).

The default product, 32768 x 32768 x 32768 float64 (16 GiB of operands) in chunks of 8192 x
32768 and 32768 x 8192, fits one GPU; ``--out-of-core`` asks for 131072 x 65536 times 65536 x
131072 (128 GiB of operands, held once made: beyond one H200's memory, so one GPU holds them only
by spilling to host memory, and beyond an H100's on two). Needs cupy and dask-cuda (``pip
install ".[multigpu]"``).
"""

from __future__ import annotations

import argparse
import json
import sys

from emulinalg import _extras

from . import out_of_core

# NVLink multicast off (NCCL's NVLS, PyTorch's symmetric memory, NVSHMEM): a program using it can
# take a shared host's GPUs out of service. The workers' nannies set it before they start them.
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# K whole in a chunk where it fits: each block product is then one in-core call of the cupy
# engine (docs/dask.md, "Clusters and GPUs")
_DEFAULT = {"shape": "32768,32768,32768", "chunks": "8192,32768,8192"}
_OUT_OF_CORE = {"shape": "131072,65536,131072", "chunks": "8192,16384,8192"}


def visible_gpus():
    """How many GPUs this process sees (cupy's count, within ``CUDA_VISIBLE_DEVICES``)."""
    import cupy as cp

    return cp.cuda.runtime.getDeviceCount()


def cuda_cluster(gpus, memory_limit="auto", device_memory_limit="default", quiet=False):
    """``dask_cuda.LocalCUDACluster`` of ``gpus`` workers, one thread each, on the first
    ``gpus`` visible GPUs (dask-cuda reads ``CUDA_VISIBLE_DEVICES``); ``device_memory_limit``:
    where a worker starts spilling device arrays to host memory (dask-cuda's "default": 80 % of
    the device)."""
    import logging

    from dask_cuda import LocalCUDACluster

    return LocalCUDACluster(
        n_workers=gpus,
        threads_per_worker=1,
        memory_limit=memory_limit,
        device_memory_limit=device_memory_limit,
        dashboard_address=":0",
        scheduler_kwargs={"dashboard": False},
        silence_logs=logging.ERROR if quiet else logging.WARNING,
    )


def start_cluster(gpus, factory=cuda_cluster, **kwargs):
    """``factory(gpus, **kwargs)`` with ``NO_MULTICAST`` in the environment its nannies give the
    worker processes they start (dask's ``distributed.nanny.pre-spawn-environ``; dask-cuda sets
    the nannies' own ``env`` to each worker's GPU; a variable the environment already sets keeps
    its value, dask's precedence): ``(cluster, client)``."""
    import dask
    from distributed import Client

    environ = {f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in NO_MULTICAST.items()}
    with dask.config.set(environ):
        cluster = factory(gpus, **kwargs)
    return cluster, Client(cluster)


def scaling(counts, factory=cuda_cluster, cluster_kwargs=None, report=None, **run_kwargs):
    """``out_of_core.run`` (with ``native_graph=True``, operands held) on a fresh cluster of
    each worker count in ``counts`` (ascending), closed after its run: the list of results,
    each with ``gpus`` and ``scaling_efficiency`` / ``native_graph_efficiency`` against the
    smallest count (``t_s s / (t_g g)``; 1.0 for the smallest)."""
    say = report or (lambda msg: None)
    results = []
    for g in sorted(set(counts)):
        say(f"starting a cluster of {g} worker(s) ...")
        cluster, client = start_cluster(g, factory, **(cluster_kwargs or {}))
        try:
            res = out_of_core.run(
                client, native_graph=True, persist=True, report=report, **run_kwargs
            )
            res["workers"] = _describe(client)
        finally:
            out_of_core._quiet_workers(client)
            client.close()
            out_of_core._close_cluster(cluster)
        res["gpus"] = g
        results.append(res)
    base = results[0]
    for res in results:
        g0, g = base["gpus"], res["gpus"]
        res["scaling_efficiency"] = base["seconds"] * g0 / (res["seconds"] * g)
        res["native_graph_efficiency"] = (
            base["native_graph_seconds"] * g0 / (res["native_graph_seconds"] * g)
        )
    return results


def _describe(client):
    """One line on the cluster's workers: how many, and their memory limits."""
    limits = client.run(lambda dask_worker: dask_worker.memory_manager.memory_limit or 0)
    host = ", ".join(f"{v / 2**30:.0f} GiB" for v in sorted(set(limits.values())) if v)
    return f"{len(limits)} worker(s), host memory limit {host or 'none'}"


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m emulinalg.examples.multi_gpu",
        description="Emulated and dask-native products of operands made on the workers of a "
        "dask-cuda cluster, one worker per GPU, on 1 and N GPUs: time, TFLOP/s, scaling "
        "efficiency, bits on sampled entries.",
    )
    p.add_argument(
        "--gpus",
        default="all",
        help="N (1 then N GPUs), a list such as 1,2,4,8, or all (default: every visible GPU)",
    )
    p.add_argument(
        "--out-of-core",
        action="store_true",
        help=f"the operands of {_OUT_OF_CORE['shape']} with chunks {_OUT_OF_CORE['chunks']}: "
        "128 GiB of float64 (complex128 256), beyond one H200's memory (spilled to host memory "
        "there)",
    )
    p.add_argument("--shape", help=f"m,k,n (default {_DEFAULT['shape']})")
    p.add_argument("--chunks", help=f"chunk sizes cm,ck,cn (default {_DEFAULT['chunks']})")
    p.add_argument("--phi", type=float, default=1.0, help="exponent spread phi (default 1)")
    p.add_argument("--precision", default="float64", help="float64 (default), float32, bits")
    p.add_argument(
        "--dtype",
        default="float64",
        choices=("float64", "float32", "complex128", "complex64"),
        help="the operands' dtype (default float64)",
    )
    p.add_argument("--rows", type=int, default=16, help="sampled rows graded (default 16)")
    p.add_argument("--cols", type=int, default=256, help="sampled columns (default 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory-limit", default="auto", help="host memory per worker (default auto)")
    p.add_argument(
        "--device-memory-limit",
        default="default",
        help="device memory per worker before it spills to host (default: dask-cuda's 80 %%)",
    )
    p.add_argument("--repeat", type=int, default=3, help="timed runs, median (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    p.add_argument("--out", help="append a benchmark record (JSON line) per count to this file")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    return p


def _counts(parser, text, visible):
    """The worker counts of ``--gpus``: "all", N (1 and N), or a list; within ``visible`` (None:
    the form only)."""
    if visible is not None and visible < 1:
        parser.error("--gpus: no GPU visible (CUDA_VISIBLE_DEVICES, cupy)")
    try:
        if text == "all":
            vals = [1, visible or 1]
        else:
            vals = [int(v) for v in text.split(",")]
            if len(vals) == 1:
                vals = [1, vals[0]]
    except ValueError:
        vals = []
    if not vals or min(vals) < 1:
        parser.error(f"--gpus: N, a list of counts such as 1,2,4 or all, not {text!r}")
    if visible is not None and max(vals) > visible:
        parser.error(f"--gpus: {max(vals)} GPUs asked for, {visible} visible")
    return sorted(set(vals))


def main(argv=None, from_demo=False):
    parser = build_parser()
    args = parser.parse_args(argv)
    _counts(parser, args.gpus, None)  # usage errors before the extras' hint
    if args.warmup < 0:
        parser.error(f"--warmup must be at least 0, got {args.warmup}")
    # one extra brings them all: the hint names it, and the command the user typed
    needed_by = "demo dask --gpus" if from_demo else parser.prog
    hint = _extras.missing("dask.array", "distributed", "cupy", "dask_cuda", extra="multigpu",
                           needed_by=needed_by)  # fmt: skip
    if hint:
        print(hint, file=sys.stderr)
        return _extras.MISSING_EXTRA
    defaults = _OUT_OF_CORE if args.out_of_core else _DEFAULT
    m, k, n = out_of_core._triple(parser, args.shape or defaults["shape"], "--shape")
    chunks = out_of_core._triple(parser, args.chunks or defaults["chunks"], "--chunks")
    for name in ("repeat", "rows", "cols"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    counts = _counts(parser, args.gpus, visible_gpus())
    precision = int(args.precision) if args.precision.isdigit() else args.precision
    quiet = args.quiet or args.json

    def say(msg):
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    results = scaling(
        counts,
        cluster_kwargs={"memory_limit": args.memory_limit,
                        "device_memory_limit": args.device_memory_limit, "quiet": quiet},
        report=say if not quiet else None,
        m=m, k=k, n=n, chunks=chunks, phi=args.phi, rows=args.rows, cols=args.cols,
        precision=precision, seed=args.seed, progress=False, cupy=True,
        repeat=args.repeat, warmup=args.warmup, dtype=args.dtype,
    )  # fmt: skip
    if args.out:
        with open(args.out, "a") as f:
            for res in results:
                rec = out_of_core._record(res, argv, prog=parser.prog)
                f.write(json.dumps(rec) + "\n")
    if args.json:
        print(json.dumps(results))
        return 0
    print(results[-1]["plan"])
    print(f"A: {m} x {k}, B: {k} x {n} {args.dtype} in chunks {chunks}; one worker per GPU")
    print(
        f"{'GPUs':>4}  {'emulated s':>10}  {'TFLOP/s':>8}  {'eff.':>5}  {'moved GiB':>9}  "
        f"{'dask native s':>13}  {'TFLOP/s':>8}  {'eff.':>5}  {'moved GiB':>9}  {'x native':>8}"
    )
    for r in results:
        print(
            f"{r['gpus']:>4}  {r['seconds']:>10.3f}  {r['tflops']:>8.2f}  "
            f"{r['scaling_efficiency']:>5.2f}  {r['moved_bytes'] / 2**30:>9.2f}  "
            f"{r['native_graph_seconds']:>13.3f}  {r['native_graph_tflops']:>8.2f}  "
            f"{r['native_graph_efficiency']:>5.2f}  {r['native_graph_moved_bytes'] / 2**30:>9.2f}  "
            f"{r['native_graph_seconds'] / r['seconds']:>8.2f}"
        )
    print("(eff.: against the smallest count; moved: bytes the workers sent per run, to one "
          "another and the sampled results to the client: the chunks' traffic)")  # fmt: skip
    last = results[-1]
    print(
        f"{last['rows']} x {last['cols']} sampled entries against the exact product: bits "
        f"maxrel {last['bits_maxrel']:.1f} (dask native {last['native_graph_bits_maxrel']:.1f}),"
        f" componentwise {last['bits_cw']:.1f} ({last['native_graph_bits_cw']:.1f})"
    )
    return 0


def demo_main(args):
    """``python -m emulinalg demo dask --gpus N``: ``--gpus`` and ``out_of_core.demo_argv``'s
    arguments passed on."""
    return main(["--gpus", str(args.gpus)] + out_of_core.demo_argv(args), from_demo=True)


if __name__ == "__main__":
    sys.exit(main())
