"""Where the statistics' kernels spend their time: the same real matmul as stats_breakdown.py's
kernel_times, with ozaki2_stats.cu patched (probes that drop parts of a kernel's work; their
results are not valid, only their times), and the host's time between the NaN/Inf check's
read-back and the first statistics launch.

    python docs/benchmarks/tools/stats_probe.py -N 8192 --dtype float32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import cupy as cp

from emulinalg.backends import cuda as _cuda
from emulinalg.backends import cupy as be
from emulinalg.inputs import phi_matrix

sys.path.insert(0, os.path.dirname(__file__))
from stats_breakdown import kernel_times

# (name, [(old, new), ...]): each old text must occur in ozaki2_stats.cu
PROBES = [
    ("as_is", []),
    ("bound_depth_3", [(
        "  static constexpr int kDepth = kSlotBytes <= 4608 ? 4 : kSlotBytes <= 9216 ? 3 : 2;",
        "  static constexpr int kDepth = kSlotBytes <= 9216 ? 3 : 2;",
    )]),
    ("line_terms_unroll_64", [(
        "#pragma unroll 16\n    for (int c = 0; c < nchunks; ++c) s = __dadd_rn(",
        "#pragma unroll 64\n    for (int c = 0; c < nchunks; ++c) s = __dadd_rn(",
    )]),
    ("cert_4_blocks_register_columns", [(
        "  constexpr bool kSharedCols = sizeof(T) == 4 && !GEMM;",
        "  constexpr bool kSharedCols = false;",
    )]),
]


def host_gap(a, b, repeat):
    """Host ms from the NaN/Inf check's read-back (line_scan's return) to the prescale hook's
    call, and from there to the first statistics kernel's launch (no stage syncs)."""
    import emulinalg

    stamps = {}
    real_scan, real_pre, real_kernel = be.line_scan, be.ozaki2_prescale, be.kernels._stats_kernel

    def scan(*args, **kw):
        out = real_scan(*args, **kw)
        stamps["scan_done"] = time.perf_counter()
        return out

    def pre(*args, **kw):
        stamps["prescale_called"] = time.perf_counter()
        return real_pre(*args, **kw)

    def kernel(expr):
        fn = real_kernel(expr)

        def run(*args, **kw):
            if expr.startswith("bound_operand") and "first_launch" not in stamps:
                stamps["first_launch"] = time.perf_counter()
            return fn(*args, **kw)

        return run

    # bound_operand's launch looks the kernel up in backends/cupy/statistics.py
    be.line_scan, be.ozaki2_prescale, be.statistics._stats_kernel = scan, pre, kernel
    runs = []
    try:
        with emulinalg.config(strategy="eager"):
            for _ in range(repeat + 1):
                stamps.clear()
                emulinalg.matmul(a, b)
                cp.cuda.Device().synchronize()
                runs.append((
                    (stamps["prescale_called"] - stamps["scan_done"]) * 1e3,
                    (stamps["first_launch"] - stamps["prescale_called"]) * 1e3,
                ))
    finally:
        be.line_scan, be.ozaki2_prescale = real_scan, real_pre
        be.statistics._stats_kernel = real_kernel
    runs = runs[1:]
    return {
        "engine_ms": round(statistics.median(r[0] for r in runs), 4),
        "prescale_to_launch_ms": round(statistics.median(r[1] for r in runs), 4),
    }


def host_steps(a, b, repeat=50):
    """Host microseconds per call of ozaki2_prescale's steps before its first launch (no
    syncs inside; the device is idle while they run in a real product)."""
    ops = be.kernels._Operands(a, None, b, None)
    B, m, k, n, kp = ops.B, ops.m, ops.k, ops.n, ops.kp
    ea, _ = be.statistics._line_exponents(ops)
    small = cp.zeros((64,), dtype=cp.uint64)
    import numpy as np

    mem = cp.cuda.alloc_pinned_memory(30 * 8)
    pinned = np.frombuffer(mem, dtype=np.uint64, count=30)
    steps = {
        "usable": lambda: be.statistics._usable(a, None, b, None),
        "operands": lambda: be.kernels._Operands(a, None, b, None),
        "zeros": lambda: cp.zeros((4 * B * (m + n),), dtype=cp.uint64),
        "empty_planes": lambda: cp.empty((1, 1, B, m, kp), dtype=cp.int8),
        "empty_small": lambda: cp.empty((B, m), dtype=cp.int64),
        "stats_kernel_lookup": lambda: be.kernels._stats_kernel("bound_operand<float, false>"),
        "bound_planes_A": lambda: be.statistics._bound_planes(
            *ops.a, ops.a_strides, B, m, m, k, kp, ea
        ),
        "line_scan": lambda: be.line_scan(a, None, b, None),
        # the certificate's read-back of its counts (30 words): pageable, and into pinned memory
        "readback_asnumpy": lambda: cp.asnumpy(small[:30]),
        "readback_pinned": lambda: small[:30].get(out=pinned),
    }
    out = {}
    for name, fn in steps.items():
        fn()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        t1 = time.perf_counter()
        cp.cuda.Device().synchronize()
        out[name] = round((t1 - t0) / repeat * 1e6, 1)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=8192)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    a = cp.asarray(phi_matrix((args.N, args.N), 1.0, args.dtype, seed=1))
    b = cp.asarray(phi_matrix((args.N, args.N), 1.0, args.dtype, seed=2))
    rec = {"N": args.N, "dtype": args.dtype, "host": host_gap(a, b, args.repeat)}
    rec["host_steps_us"] = host_steps(a, b)
    real_source = _cuda.source
    text = real_source("ozaki2_stats.cu")
    keys = ("statistics:bound_operand", "statistics:bound_max", "statistics:cert_entries",
            "statistics:cert_line_terms")
    probes = {}
    try:
        for name, patches in PROBES:
            src = text
            for old, new in patches:
                assert src.count(old) == 1, (name, old)
                src = src.replace(old, new)
            _cuda.source = lambda f, src=src: src if f == "ozaki2_stats.cu" else real_source(f)
            be.kernels._modules.clear()
            kt = kernel_times(a, b, args.repeat)
            probes[name] = {k.split(":")[1]: kt.get(k) for k in keys}
    finally:
        _cuda.source = real_source
        be.kernels._modules.clear()
    rec["probes_ms"] = probes
    rec["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
