"""Emulated product on a dask cluster, out of core on request: operands made on the workers.

``python -m emulinalg.examples.out_of_core`` (also ``python -m emulinalg demo dask``) starts a
``distributed.LocalCluster``, builds ``A`` (m x k) and ``B`` (k x n) chunk by chunk from a fixed
seed on the workers (entries ``(U(0,1) - 0.5) * exp(phi * N(0,1))``, the field's phi-matrices;
every chunk has its own random stream, so nothing is ever held whole and no array travels in
the graph), multiplies them with ``emulinalg.matmul`` (a lazy Scheme II graph: statistics over
the whole matrices, residues made once per chunk, block products added modulo each modulus
over K-blocks, one CRT per output block; with ``EMULINALG_DASK_MODE=dd``, block products added
in double-double) and computes, in one pass over the graph, the sum of all entries of ``C`` (so
every block of the product is computed) and the entries of ``C`` in a few sampled rows (and
columns, ``--cols``): the only part that travels back. Those are graded against the exact
product (``emulinalg.reference``), next to the native product. While the graph computes, a
progress bar (on a terminal) or a line every few seconds says how many of its tasks are done.

The default shape, a Gram-type product with a long inner dimension, 256 x 8192 times 8192 x 64
(20 MiB), takes seconds on two workers with dask's share of the machine's memory each.
``--out-of-core`` makes the operands larger than the workers' memory: 1024 x 81920 times
81920 x 64 (680 MiB) on two workers of 300 MiB each. The count of moduli depends on statistics
over the whole matrices, so the workers hold the chunks from the statistics pass to the residue
pass and spill to disk what does not fit, pausing near their limit (distributed logs that);
that takes minutes on two cores with the numpy reference backend. ``--scheduler tcp://...``
runs on an existing cluster instead; ``--threads N`` on dask's threaded scheduler (no
``distributed``), which is the simple way to use one GPU with cupy chunks (``--cupy``).

The native figures are those of the chunk library's product of the sampled rows (``--native
rows``, default) or of the whole matrices (``--native whole``: A and B are materialised once, on
the host or the GPU, for that product only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time

import numpy as np

from emulinalg import _extras
from emulinalg.algorithm.xputil import to_host


def phi_block(block_id=None, block_info=None, phi=1.0, seed=0, stream=0, cupy=False,
              dtype_name="float64"):  # fmt: skip
    """One chunk of a phi-matrix of ``dtype_name`` (float64, float32, complex128, complex64: drawn
    in float64, the imaginary part after the real one, then rounded), from its own random
    stream ``(seed, stream, i, j)`` (numpy's generator, or cupy's on the device: the two give
    different matrices)."""
    info = block_info[None]
    shape = info["chunk-shape"]
    i, j = block_id
    if cupy:  # generated on the device (a host stream would dominate at GPU sizes)
        import cupy as xp

        state = int(np.random.SeedSequence([seed, stream, i, j]).generate_state(1)[0])
        rs = xp.random.RandomState(state)

        def draw():
            return (rs.random_sample(shape) - 0.5) * xp.exp(phi * rs.standard_normal(shape))
    else:
        rng = np.random.default_rng([seed, stream, i, j])

        def draw():
            return (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))

    x = draw()
    if np.dtype(dtype_name).kind == "c":
        x = x + 1j * draw()
    return x.astype(dtype_name, copy=False)


def operand(shape, chunks, phi, seed, stream, cupy=False, dtype="float64"):
    """A lazy phi-matrix of ``shape`` and ``dtype`` built chunk by chunk (nothing is generated
    yet)."""
    import dask.array as da

    rows = _split(shape[0], chunks[0])
    cols = _split(shape[1], chunks[1])
    if cupy:
        import cupy as cp

        meta = cp.empty((0, 0), dtype=dtype)
    else:
        meta = np.empty((0, 0), dtype=dtype)
    return da.map_blocks(
        phi_block,
        chunks=(rows, cols),
        dtype=np.dtype(dtype),
        meta=meta,
        phi=phi,
        seed=seed,
        stream=stream,
        cupy=cupy,
        dtype_name=np.dtype(dtype).name,
    )


def _split(n, c):
    return (c,) * (n // c) + ((n % c,) if n % c else ())


def _sync(x):
    """Wait for the device (cupy arrays); nothing for host arrays."""
    if type(x).__module__.startswith("cupy"):
        import cupy as cp

        cp.cuda.Device().synchronize()


def _gather(client, threads, *xs):
    """``xs`` computed: on ``client`` when there is one (persisted operands live there), else on
    dask's threaded scheduler."""
    import dask

    if client is not None:
        return tuple(client.compute(list(xs), sync=True))
    return dask.compute(*xs, scheduler="threads", num_workers=threads)


def _incore(client, a, b, precision, repeat, threads):
    """The single-call in-core emulated product of the whole operands (materialised once),
    timed after a warm-up on a corner: ``(C, median seconds, plan)``."""
    import emulinalg

    A, B = _gather(client, threads, a, b)
    with emulinalg.config(strategy="eager"):
        w = min(2048, *A.shape, B.shape[1])
        emulinalg.matmul(A[:w, :w], B[:w, :w], precision=precision)  # kernels compiled
        _sync(A)
        times = []
        for _ in range(repeat):
            C = None
            t0 = time.perf_counter()
            C = emulinalg.matmul(A, B, precision=precision)
            _sync(C)
            times.append(time.perf_counter() - t0)
        plan = emulinalg.last_plan()
    return C, float(np.median(times)), plan


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
    persist=False,
    incore=False,
    repeat=1,
    warmup=0,
    report=None,
    native_graph=False,
    dtype="float64",
):
    """Build the product, compute it (on ``client``, or with dask's threaded scheduler when
    ``client`` is None) and grade the sampled entries; returns a dict of results.

    ``progress``: a progress bar while the graph computes (for terminals). ``report``: called
    with a line of text at each step and, on ``client`` without the bar, every
    ``REPORT_SECONDS`` while the graph computes (how many of its tasks are done).

    ``persist``: the operands are computed and held before the timed runs (their generation is
    then not timed). ``incore``: also time one in-core emulated call on the whole operands
    (materialised once, on the host or the GPU) and grade it on the same entries.
    ``repeat``: timed runs of the graph (the median is reported), after ``warmup`` untimed ones
    (kernel compilation, memory pools). ``native_graph``: also time dask's own product of the same
    operands (``dask.array.matmul``, the chunk library's GEMM per block) through the same
    computation, runs and workers, and grade its sampled entries (``native_graph_*``)."""
    import dask
    import dask.array as da

    import emulinalg
    from emulinalg.reference import accuracy, effective_bits, exact_matmul

    say = report or (lambda msg: None)
    cm, ck, cn = chunks
    a = operand((m, k), (cm, ck), phi, seed, 0, cupy, dtype)
    b = operand((k, n), (ck, cn), phi, seed, 1, cupy, dtype)
    rsel, csel = _sample(m, rows), _sample(n, cols)
    inc = None
    if incore:  # first, so that its workspace never meets the held chunks
        say("in-core emulated product of the whole operands (materialised once) ...")
        C, inc_seconds, inc_plan = _incore(client, a, b, precision, max(1, repeat), threads)
        inc = {"c": to_host(C[rsel, :][:, csel]), "seconds": inc_seconds, "plan": str(inc_plan)}
        del C
    if persist:
        say("operands computed and held (persist) ...")
        if client is not None:
            from distributed import wait

            a, b = client.persist([a, b])
            wait([a, b])  # made before the first timed run, with or without a warm-up
        else:
            a, b = dask.persist(a, b, scheduler="threads", num_workers=threads)

    t0 = time.perf_counter()
    with emulinalg.config(strategy="eager"):
        c = emulinalg.matmul(a, b, precision=precision)
    plan = emulinalg.last_plan()
    build = time.perf_counter() - t0

    # One pass over the graph: every block of C (its sum) and the sampled entries.
    wanted = [c[rsel, :][:, csel], da.sum(c)]
    peaks = {}
    times = []
    tasks = _task_count(wanted)
    moved = None
    for run_i in range(warmup + max(1, repeat)):
        if run_i == warmup:
            moved = _moved(client)
        what = "warm-up run" if run_i < warmup else "computing"
        say(
            f"{what}: {tasks} tasks (the sum of C and the sampled entries) on "
            + ("the cluster" if client is not None else f"{threads or 'default'} threads")
            + " ..."
        )
        t0 = time.perf_counter()
        if client is not None:
            started = time.time()  # the scheduler's clock for the task stream
            if report and not progress:
                client.get_task_stream(count=0)  # starts recording tasks from here on
            futures = client.compute(wanted)
            if progress:
                from distributed import progress as show

                show(futures)
                print(file=sys.stderr)
            elif report:
                _wait_reporting(client, futures, started, tasks, say)
            c_s, total = (f.result() for f in futures)
            peaks = client.run(_peak_rss)  # the workers' largest resident set so far
        else:
            from dask.diagnostics import ProgressBar

            with ProgressBar(out=sys.stderr) if progress else contextlib.nullcontext():
                c_s, total = dask.compute(*wanted, scheduler="threads", num_workers=threads)
            _sync(c_s)
        if run_i >= warmup:
            times.append(time.perf_counter() - t0)
    seconds = float(np.median(times))
    moved = None if moved is None else (_moved(client) - moved) / len(times)
    c_s, total = to_host(c_s), to_host(total)
    graph = (
        _native_graph(client, threads, a, b, rsel, csel, warmup, repeat, say)
        if native_graph
        else None
    )

    say(f"computed in {seconds:.1f} s; grading {len(rsel)} x {len(csel)} sampled entries ...")
    # Grade: exact and native on the sampled entries, a group of columns at a time (B is never
    # held whole here); the maxima of the per-group errors are the maxima over all of them.
    (a_rows,) = _gather(client, threads, a[rsel, :])
    a_rows_h = to_host(a_rows)
    nat_whole = nat_seconds = None
    if native == "whole":  # timed after a warm-up call
        A, B = _gather(client, threads, a, b)
        A @ B
        _sync(A)
        t0 = time.perf_counter()
        C = A @ B
        _sync(C)
        nat_seconds = time.perf_counter() - t0
        nat_whole = to_host(C[rsel, :][:, csel])
        A = B = C = None
    worst = {label: [0.0, 0.0] for label in ("emulated", "native", "incore", "graph")}
    mismatch = 0
    for g0 in range(0, len(csel), 256):
        group = csel[g0 : g0 + 256]
        (b_g,) = _gather(client, threads, b[:, group])
        b_g_h = to_host(b_g)
        ref = exact_matmul(a_rows_h, b_g_h)
        nat = nat_whole[:, g0 : g0 + 256] if nat_whole is not None else to_host(a_rows @ b_g)
        graded = [("emulated", c_s[:, g0 : g0 + 256]), ("native", nat)]
        if inc is not None:
            graded.append(("incore", inc["c"][:, g0 : g0 + 256]))
        if graph is not None:
            graded.append(("graph", graph["c"][:, g0 : g0 + 256]))
        for label, c_g in graded:
            acc = accuracy(c_g, a_rows_h, b_g_h, ref=ref)
            w = worst[label]
            w[0], w[1] = max(w[0], acc["maxrel"]), max(w[1], acc["maxcw"])
            if label == "emulated":
                mismatch += acc["nonfinite_mismatch"]
    dt = np.dtype(dtype)
    flops = 2.0 * m * n * k * (4 if dt.kind == "c" else 1)  # a complex product: 4 real ones
    res = {
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
        "dtype": dt.name,
        "operand_bytes": dt.itemsize * (m * k + k * n),
        "seconds": seconds,
        "build_seconds": build,
        "sum": _number(total),
        "worker_peak_rss": max((v for v in peaks.values() if v), default=None),
        "bits_maxrel": effective_bits(worst["emulated"][0]),
        "bits_cw": effective_bits(worst["emulated"][1]),
        "native_bits_maxrel": effective_bits(worst["native"][0]),
        "native_bits_cw": effective_bits(worst["native"][1]),
        "nonfinite_mismatch": mismatch,
        "plan": str(plan),
        "tflops": flops / seconds / 1e12,
        "times": times,
        "warmup": warmup,
        "persist": persist,
        "moved_bytes": moved,
    }
    if native == "whole":
        res["native_seconds"] = nat_seconds
        res["native_tflops"] = flops / nat_seconds / 1e12
    if graph is not None:
        res["native_graph_seconds"] = graph["seconds"]
        res["native_graph_tflops"] = flops / graph["seconds"] / 1e12
        res["native_graph_times"] = graph["times"]
        res["native_graph_moved_bytes"] = graph["moved"]
        res["native_graph_sum"] = graph["sum"]
        res["native_graph_bits_maxrel"] = effective_bits(worst["graph"][0])
        res["native_graph_bits_cw"] = effective_bits(worst["graph"][1])
    if inc is not None:
        res["incore_seconds"] = inc["seconds"]
        res["incore_tflops"] = flops / inc["seconds"] / 1e12
        res["ratio_to_incore"] = inc["seconds"] / seconds
        res["incore_bits_maxrel"] = effective_bits(worst["incore"][0])
        res["incore_bits_cw"] = effective_bits(worst["incore"][1])
        res["incore_plan"] = inc["plan"]
    return res


def _native_graph(client, threads, a, b, rsel, csel, warmup, repeat, say):
    """dask's own product ``a @ b`` through the same computation as ``run``'s (the sum of every
    block and the sampled entries), ``warmup`` untimed runs then ``repeat`` timed ones on the
    same workers: ``{"c": sampled entries (host), "sum", "seconds" (median), "times"}``."""
    import dask.array as da

    c = da.matmul(a, b)
    wanted = (c[rsel, :][:, csel], da.sum(c))
    say("dask's native product of the same operands, for comparison ...")
    times, moved = [], None
    for run_i in range(warmup + max(1, repeat)):
        if run_i == warmup:
            moved = _moved(client)
        t0 = time.perf_counter()
        c_s, total = _gather(client, threads, *wanted)
        _sync(c_s)
        if run_i >= warmup:
            times.append(time.perf_counter() - t0)
    moved = None if moved is None else (_moved(client) - moved) / len(times)
    return {"c": to_host(c_s), "sum": _number(to_host(total)), "seconds": float(np.median(times)),
            "times": times, "moved": moved}  # fmt: skip


def _sum_text(v):
    return f"{v:.17g}" if isinstance(v, float) else f"{complex(*v)!r}"


def _number(x):
    """A 0-d sum as JSON takes it: a float, or [re, im] for a complex one."""
    v = complex(x) if np.iscomplexobj(x) else float(x)
    return [v.real, v.imag] if isinstance(v, complex) else v


def _moved(client):
    """Bytes the workers of ``client`` have sent so far (to one another, and the results to the
    client; their uncapped counters, not the transfer logs, which keep the last entries only;
    None without a client): the traffic of the graph's placement."""
    if client is None:
        return None

    def sent(dask_worker):
        return dask_worker.transfer_outgoing_bytes_total

    return sum(client.run(sent).values())


# While the graph computes without a progress bar, a line this often (seconds), four times
# as far apart after the first minute.
REPORT_SECONDS = 5.0


def _task_count(xs):
    """Tasks in the optimized graph of the collections ``xs`` (what the scheduler runs)."""
    import dask

    keys = set()
    for x in dask.optimize(*xs):
        keys.update(x.__dask_graph__().keys())
    return len(keys)


def _wait_reporting(client, futures, started, tasks, say):
    """Wait for ``futures``, saying every ``REPORT_SECONDS`` (later 4 times that) how many
    tasks the workers have finished since ``started`` (the scheduler's task stream, started
    before the graph was sent)."""
    from distributed import TimeoutError as WaitTimeout  # asyncio's (not the builtin on 3.10)
    from distributed import wait

    t0 = time.perf_counter()
    while True:
        try:
            slow = time.perf_counter() - t0 >= 60
            wait(futures, timeout=REPORT_SECONDS * (4 if slow else 1))
            return
        except WaitTimeout:
            done = len(client.get_task_stream(start=started))
            say(f"  {time.perf_counter() - t0:.0f} s: {done} of {tasks} tasks done")


def _peak_rss():
    """Peak resident set size of this process in bytes (Linux/macOS; None elsewhere)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


# Seconds a LocalCluster's worker process gets to exit when the example closes the cluster.
CLOSE_TIMEOUT = 30.0


def _quiet_workers(client):
    """Silence the workers' own logs for the shutdown: a heartbeat that races the scheduler's
    close logs a CommClosedError traceback at ERROR (distributed; once in ~30 runs of the demo),
    harmless once the results are in."""

    def quiet():
        for name in ("distributed.worker", "distributed.core", "distributed.comm"):
            logging.getLogger(name).setLevel(logging.CRITICAL)

    with contextlib.suppress(Exception):  # a worker already gone has nothing left to say
        client.run(quiet)


def _close_cluster(cluster):
    """Close a LocalCluster, its workers first with ``CLOSE_TIMEOUT`` to exit: the cluster's
    own close gives a worker process 4 s and then kills it with a warning, which a loaded
    machine exceeds."""
    import asyncio

    async def close_workers(workers):
        await asyncio.gather(*(w.close(timeout=CLOSE_TIMEOUT) for w in workers))

    try:
        cluster.sync(close_workers, list(cluster.workers.values()))
    finally:
        cluster.close()


def _bytes(text):
    from dask.utils import parse_bytes

    return parse_bytes(text)


# The defaults: a product that takes seconds on 2 cores, the workers' memory left to dask (no
# spilling); and --out-of-core, operands of 680 MiB on two workers of 300 MiB each.
_DEFAULT = {"shape": "256,8192,64", "chunks": "128,2048,64", "memory_limit": "auto"}
_OUT_OF_CORE = {"shape": "1024,81920,64", "chunks": "512,2048,64", "memory_limit": "300MiB"}


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m emulinalg.examples.out_of_core",
        description="Emulated product of dask operands made chunk by chunk on a cluster's "
        "workers (--out-of-core: larger than the workers' memory).",
    )
    p.add_argument(
        "--out-of-core",
        action="store_true",
        help="operands larger than the workers' memory: the defaults of --shape, --chunks and "
        f"--memory-limit become {_OUT_OF_CORE['shape']}, {_OUT_OF_CORE['chunks']} and "
        f"{_OUT_OF_CORE['memory_limit']} (the workers spill to disk and pause, and distributed "
        "logs that; minutes on 2 cores)",
    )
    p.add_argument(
        "--shape",
        help=f"m,k,n (default {_DEFAULT['shape']}; --out-of-core {_OUT_OF_CORE['shape']})",
    )
    p.add_argument(
        "--chunks",
        help=f"chunk sizes cm,ck,cn (default {_DEFAULT['chunks']}; --out-of-core "
        f"{_OUT_OF_CORE['chunks']})",
    )
    p.add_argument("--phi", type=float, default=1.0, help="exponent spread phi (default 1)")
    p.add_argument(
        "--rows", type=int, default=16, help="sampled rows graded exactly (0: all of them)"
    )
    p.add_argument("--cols", type=int, default=0, help="sampled columns (default 0: all)")
    p.add_argument(
        "--native",
        choices=("rows", "whole"),
        default="rows",
        help="native figures from the product of the sampled rows (default) or of the whole "
        "matrices (materialised once for it)",
    )
    p.add_argument("--precision", default="float64", help="float64 (default), float32, bits")
    p.add_argument(
        "--dtype",
        default="float64",
        choices=("float64", "float32", "complex128", "complex64"),
        help="the operands' dtype (default float64)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="LocalCluster workers (default 2)")
    p.add_argument(
        "--memory-limit",
        help="memory per LocalCluster worker, e.g. 2GiB (default auto: dask's share of this "
        f"machine's memory per worker; --out-of-core {_OUT_OF_CORE['memory_limit']})",
    )
    p.add_argument("--scheduler", help="address of an existing scheduler instead of a cluster")
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="dask's threaded scheduler with N threads instead of a cluster (one GPU: --cupy)",
    )
    p.add_argument("--cupy", action="store_true", help="cupy chunks (GPU workers)")
    p.add_argument("--persist", action="store_true", help="hold the operands before the timed runs")
    p.add_argument(
        "--incore",
        action="store_true",
        help="also time one in-core emulated call on the whole operands (they must fit)",
    )
    p.add_argument("--repeat", type=int, default=1, help="timed runs (median reported)")
    p.add_argument(
        "--warmup", type=int, default=0, help="untimed runs of the graph before them (default 0)"
    )
    p.add_argument("--out", help="append a benchmark record (JSON line) to this file")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    return p


def _triple(parser, text, what):
    """Three positive integers "a,b,c", or a usage error."""
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) != 3 or min(vals) < 1:
        parser.error(f"{what} must be three positive integers 'a,b,c', got {text!r}")
    return vals


def _check(parser, args):
    """Usage errors before anything starts (a cluster, a long computation); fills in the
    defaults of --shape, --chunks and --memory-limit (those of --out-of-core with it)."""
    for name, value in (_OUT_OF_CORE if args.out_of_core else _DEFAULT).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    m, k, n = _triple(parser, args.shape, "--shape")
    chunks = _triple(parser, args.chunks, "--chunks")
    for name in ("threads", "workers", "repeat"):
        v = getattr(args, name)
        if v is not None and v < 1:
            parser.error(f"--{name} must be at least 1, got {v}")
    if args.warmup < 0:
        parser.error(f"--warmup must be at least 0, got {args.warmup}")
    if not (args.threads or args.scheduler) and args.memory_limit != "auto":
        try:
            _bytes(args.memory_limit)
        except (ValueError, TypeError, KeyError):
            parser.error(
                f"--memory-limit: a size such as 300MiB or auto, not {args.memory_limit!r}"
            )
    if args.out:
        try:  # a run that cannot write its record should fail now, not after computing
            open(args.out, "a").close()
        except OSError as e:
            parser.error(f"--out: cannot write {args.out!r}: {e.strerror}")
    return (m, k, n), chunks


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    # The extras first, as one line (_check already parses --memory-limit with dask);
    # --threads runs on dask's threaded scheduler, without distributed.
    needs = ["dask.array"] + ([] if args.threads else ["distributed"])
    hint = _extras.missing(*needs, needed_by=parser.prog)
    if args.cupy and not hint:
        hint = _extras.missing("cupy", needed_by=f"{parser.prog} --cupy")
    if hint:
        print(hint, file=sys.stderr)
        return _extras.MISSING_EXTRA
    (m, k, n), chunks = _check(parser, args)
    precision = int(args.precision) if args.precision.isdigit() else args.precision
    cluster = client = None

    def say(msg):
        if not (args.quiet or args.json):
            print(msg, file=sys.stderr, flush=True)

    log = logging.getLogger("distributed")
    log_level = log.level
    if args.quiet or args.json:  # no memory warnings from spilling (--out-of-core) either
        log.setLevel(logging.ERROR)
    try:
        dt = np.dtype(args.dtype)
        operands = (
            f"A: {m} x {k}, B: {k} x {n} {dt.name}, {dt.itemsize * (m * k + k * n) / 2**20:.0f} MiB"
        )
        if args.threads:
            where = f"dask threaded scheduler, {args.threads} threads"
        elif args.scheduler:
            from distributed import Client

            say(f"connecting to the cluster at {args.scheduler} ...")
            client = Client(args.scheduler)
            where = f"cluster at {args.scheduler}"
        else:
            import dask
            from distributed import Client, LocalCluster

            say(f"starting a LocalCluster of {args.workers} workers ...")
            # Workers spill and pause near their limit; none is killed for reaching it (with
            # --out-of-core the limit is what makes this run out of core).
            settings = {"distributed.worker.memory.terminate": False}
            if args.memory_limit == "auto":
                # distributed's workers return freed memory to the OS at once
                # (MALLOC_TRIM_THRESHOLD_=65536), which keeps their memory low near a limit but
                # makes every large numpy temporary fresh zeroed pages: the numpy backend's
                # elementwise stages ran 3-4x slower. With dask's own share of memory, no need.
                settings["distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"] = None
            with dask.config.set(settings):
                cluster = LocalCluster(
                    n_workers=args.workers,
                    threads_per_worker=1,
                    processes=True,
                    memory_limit=args.memory_limit,
                    # no dashboard, and the scheduler's HTTP server on a free port (not 8787,
                    # which another cluster may hold: distributed warns then)
                    dashboard_address=":0",
                    scheduler_kwargs={"dashboard": False},
                    silence_logs=logging.ERROR if args.quiet or args.json else logging.WARNING,
                )
            client = Client(cluster)
            limits = [
                w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()
            ]
            per = max(limits, default=0)
            origin = (
                " (dask's share of this machine's memory)" if args.memory_limit == "auto" else ""
            )
            size = f"{per / 2**30:.1f} GiB" if per >= 2**30 else f"{per / 2**20:.0f} MiB"
            where = (
                f"LocalCluster: {args.workers} workers x {size}{origin}"
                if per
                else f"LocalCluster: {args.workers} workers, no memory limit"
            )
        say(f"{operands} of operands; {where}")
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
            # a progress bar redrawn into a log file floods it: bars on terminals only, lines
            # every few seconds elsewhere
            progress=not (args.quiet or args.json) and sys.stderr.isatty(),
            cupy=args.cupy,
            native=args.native,
            threads=args.threads,
            persist=args.persist,
            incore=args.incore,
            repeat=args.repeat,
            warmup=args.warmup,
            report=None if args.quiet or args.json else say,
            dtype=args.dtype,
        )
        res["workers"] = where
    finally:
        if client is not None:
            if cluster is not None:  # our own workers (not a cluster the caller runs)
                _quiet_workers(client)
            client.close()
        if cluster is not None:
            _close_cluster(cluster)
        log.setLevel(log_level)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(_record(res, argv)) + "\n")
    if args.json:
        print(json.dumps(res))
    else:
        print(res["plan"])
        print(
            f"computed in {res['seconds']:.1f} s (graph built in {res['build_seconds'] * 1e3:.0f}"
            f" ms); sum of C = {_sum_text(res['sum'])}"
        )
        if res.get("moved_bytes") is not None:
            print(
                f"the workers sent {res['moved_bytes'] / 2**20:.1f} MiB per run (to one another, "
                "and the results to the client)"
            )
        if res["worker_peak_rss"]:
            print(f"largest worker resident set: {res['worker_peak_rss'] / 2**20:.0f} MiB")
        if "incore_seconds" in res:
            print(
                f"in-core single call: {res['incore_seconds']:.2f} s; the graph reaches "
                f"{100 * res['ratio_to_incore']:.0f} % of its throughput "
                f"({res['tflops']:.3g} vs {res['incore_tflops']:.3g} TFLOP/s effective)"
            )
        print(
            f"{res['rows']} x {res['cols']} sampled entries against the exact product: bits "
            f"maxrel {res['bits_maxrel']:.1f} (native {res['native_bits_maxrel']:.1f}), "
            f"componentwise {res['bits_cw']:.1f} (native {res['native_bits_cw']:.1f}; "
            f"native of the {res['native']})"
        )
    return 0


def _record(res, argv, prog="python -m emulinalg.examples.out_of_core"):
    """A benchmark record (the fields of docs/performance.md, ``backend: "dask"``) from
    ``run``'s result; ``prog`` and ``argv``: the command that made it."""
    import datetime
    import shlex

    device = "cpu"
    if res["chunk_library"] == "cupy":
        import cupy as cp

        device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rec = {
        "backend": "dask", "op": "matmul", "dtype": res["dtype"], "precision": res["precision"],
        "scheme": res["plan"], "m": res["m"], "n": res["n"], "k": res["k"], "batch": 1,
        "phi": res["phi"], "seconds": res["seconds"], "tflops": res["tflops"],
        "bits_maxrel": res["bits_maxrel"], "native_bits_maxrel": res["native_bits_maxrel"],
        "bits_cw": res["bits_cw"], "native_bits_cw": res["native_bits_cw"],
        "reference": f"exact on {res['rows']} x {res['cols']} sampled entries",
        "device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "command": prog + " "
        + " ".join(shlex.quote(v) for v in (argv if argv is not None else sys.argv[1:])),
    }  # fmt: skip
    import os

    import emulinalg

    rec["emulinalg"] = emulinalg.__version__
    rec["load_average"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for key in ("native_tflops", "incore_seconds", "incore_tflops", "ratio_to_incore",
                "incore_bits_maxrel", "incore_bits_cw", "incore_plan", "chunks", "chunk_library",
                "workers", "operand_bytes", "times", "warmup", "persist", "native",
                "worker_peak_rss", "sum", "nonfinite_mismatch", "rows", "cols",
                "build_seconds", "native_graph_seconds", "native_graph_tflops",
                "native_graph_times", "native_graph_bits_maxrel", "native_graph_bits_cw",
                "moved_bytes", "native_graph_moved_bytes", "native_graph_efficiency",
                "native_graph_sum",
                "gpus", "scaling_efficiency"):  # fmt: skip
        if key in res:
            rec[key] = res[key]
    if "native_tflops" in res:
        rec["speedup"] = res["tflops"] / res["native_tflops"]
    if "native_graph_tflops" in res:  # dask's own product on the same workers
        rec["speedup_native_graph"] = res["tflops"] / res["native_graph_tflops"]
    return rec


def demo_main(args):
    """``python -m emulinalg demo dask``: the defaults above, with ``demo_argv(args)``."""
    return main(demo_argv(args))


def demo_argv(args):
    """The arguments ``python -m emulinalg demo dask`` passes on to this example (and to
    ``multi_gpu``): ``--out-of-core``, ``--phi``, ``--precision`` and ``--dtype`` (first
    values), ``--seed``, ``--json`` and ``--quiet``."""
    argv = ["--seed", str(args.seed)] + ["--out-of-core"] * bool(getattr(args, "out_of_core", 0))
    if args.phi:
        argv += ["--phi", str(args.phi[0])]
    if args.precision:
        argv += ["--precision", str(args.precision[0])]
    if getattr(args, "dtype", None):
        argv += ["--dtype", str(args.dtype[0])]
    return argv + ["--json"] * bool(args.json) + ["--quiet"] * bool(args.quiet)


if __name__ == "__main__":
    sys.exit(main())
