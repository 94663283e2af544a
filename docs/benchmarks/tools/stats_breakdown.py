"""Kernel-by-kernel times of the Scheme II statistics on the GPU (emulinalg/backends/cupy/'s
ozaki2_prescale and ozaki2_certificate), device-synchronised, median of repeats.

    python docs/benchmarks/tools/stats_breakdown.py -N 8192 [--dtype float64] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import cupy as cp

from emulinalg import _planner
from emulinalg._precision import Level
from emulinalg.algorithm import certificate, refinement
from emulinalg.backends import cupy as be
from emulinalg.inputs import phi_matrix


def timed(fn, repeat):
    out = fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def kernel_times(a, b, repeat):
    """Device time (ms, median over repeats) of every kernel and GEMM the statistics launch in
    one emulinalg.matmul at the default level (CUDA events around each launch), and the
    statistics stage's wall time: the difference is host time with the device idle."""
    import emulinalg
    from emulinalg import _timing
    from emulinalg._timing import recording

    spans = []

    def timed_launch(name, fn):
        def run(*args, **kw):
            stack = _timing._RECORDER.get()._stack
            where = stack[-1][0] if stack else "check"  # line_scan: before the stages
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            out = fn(*args, **kw)
            e1.record()
            if where in ("statistics", "check"):  # not the product's own GEMMs
                spans.append((f"{where}:{name}", e0, e1))
            return out

        return run

    marks = {}  # events at the prescale's start and after the certificate's read-back

    def marked(name, fn, at_start):
        def run(*args, **kw):
            if at_start:
                marks[name] = cp.cuda.Event()
                marks[name].record()
            out = fn(*args, **kw)
            if not at_start:
                marks[name] = cp.cuda.Event()
                marks[name].record()
            return out

        return run

    real_kernel = be.kernels._stats_kernel
    # the modules that launch them look them up in their own namespaces
    users = {"_stats_kernel": (be.statistics, be.certificate), "_int8_products": (be.statistics,),
             "_bf16_gemm": (be.certificate,)}
    saved = {n: getattr(be.gemm, n) for n in ("_int8_products", "_bf16_gemm")}
    hooks = {n: getattr(be, n) for n in ("ozaki2_prescale", "ozaki2_certificate")}
    for mod in users["_stats_kernel"]:
        mod._stats_kernel = lambda expr: timed_launch(expr.split("<")[0], real_kernel(expr))
    for n, fn in saved.items():
        for mod in users[n]:
            setattr(mod, n, timed_launch(n.strip("_"), fn))
    be.ozaki2_prescale = marked("begin", hooks["ozaki2_prescale"], True)
    be.ozaki2_certificate = marked("end", hooks["ozaki2_certificate"], False)
    runs = []
    sync = cp.cuda.get_current_stream().synchronize
    try:
        with emulinalg.config(strategy="eager"):
            for _ in range(repeat + 1):
                spans.clear()
                with recording(sync) as rec:
                    emulinalg.matmul(a, b)
                sync()
                per = {}
                for name, e0, e1 in spans:
                    per[name] = per.get(name, 0.0) + cp.cuda.get_elapsed_time(e0, e1)
                # device idle time (or untimed kernels: memsets, elementwise) before each
                # timed launch of the statistics, and after the last one to the read-back
                prev = marks.get("begin")
                for name, e0, e1 in spans:
                    if name.startswith("statistics") and prev is not None:
                        key = "gap_before:" + name.split(":", 1)[1]
                        per[key] = per.get(key, 0.0) + cp.cuda.get_elapsed_time(prev, e0)
                    if name.startswith("statistics"):
                        prev = e1
                if prev is not None and "end" in marks:
                    per["gap_to_readback"] = cp.cuda.get_elapsed_time(prev, marks["end"])
                per["statistics_stage"] = rec.seconds.get("statistics", 0.0) * 1e3
                per["total_stages"] = sum(rec.seconds.values()) * 1e3
                runs.append(per)
    finally:
        for n, fn in {"_stats_kernel": real_kernel, **saved}.items():
            for mod in users[n]:
                setattr(mod, n, fn)
        for n, fn in hooks.items():
            setattr(be, n, fn)
    runs = runs[1:]  # the first: compilation, plans
    return {k: round(statistics.median(r.get(k, 0.0) for r in runs), 4) for k in runs[0]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=8192)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument(
        "--bits",
        type=int,
        help="the strict form at these bits (default: the dtype's level, the native form)",
    )
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument(
        "--profile",
        action="store_true",
        help="print the host's cProfile of the statistics (prescale + certificate)",
    )
    args = p.parse_args()
    N, r = args.N, args.repeat
    bits = args.bits or (24 if args.dtype == "float32" else 53)
    level = Level(bits, "float32" if bits == 24 else "float64")
    target = certificate.Target(args.bits) if args.bits else _planner.target_for(level, N, be)
    a_in = cp.asarray(phi_matrix((N, N), args.phi, args.dtype, seed=1))
    b_in = cp.asarray(phi_matrix((N, N), args.phi, args.dtype, seed=2))
    a, b = a_in.astype(cp.float64), b_in.astype(cp.float64)
    if be.narrow_statistics and args.dtype == "float32":  # what the engine hands the hooks
        a, b = a_in, b_in
    rec = {"N": N, "dtype": args.dtype, "phi": args.phi, "bits": bits}
    ops = be.kernels._Operands(a, None, b, None)
    B, m, k, n, kp, n_p = ops.B, ops.m, ops.k, ops.n, ops.kp, ops.n_p
    t, _ = timed(lambda: bool(cp.isfinite(cp.sum(a))) and bool(cp.isfinite(cp.sum(b))), r)
    rec["finite_check_sums"] = t  # the engine's NaN/Inf check without line_scan
    t, scan = timed(lambda: be.line_scan(a, None, b, None), r)
    rec["line_scan"] = t  # the same check fused with the line exponents
    t, _ = timed(lambda: be.ozaki2_prescale(a, None, b, None, "accurate", exponents=scan[1]), r)
    rec["prescale_after_scan"] = t
    t, ea = timed(lambda: be.statistics._line_max_exponent(*ops.a, ops.a_strides, B, m, k), r)
    rec["line_max_A"] = t
    t, eb = timed(lambda: be.statistics._line_max_exponent(*ops.b, ops.b_strides, B, n, k), r)
    rec["line_max_B"] = t
    bound_planes = be.statistics._bound_planes
    t, ra_ = timed(lambda: bound_planes(*ops.a, ops.a_strides, B, m, m, k, kp, ea), r)
    rec["bound_operand_A"] = t
    t, rb_ = timed(lambda: bound_planes(*ops.b, ops.b_strides, B, n, n_p, k, kp, eb), r)
    rec["bound_operand_B"] = t
    # bound_operand's grid (backends/cupy/statistics.py: _BOUND_WARPS): every warp the device holds
    # (resident), fewer, and more (then not all shares run side by side)
    resident = be.kernels._resident_blocks(f"bound_operand<{be.kernels._in_type(a)}, false>", 32)
    rec["bound_operand_resident_warps"] = resident
    warps = {}
    saved_warps = be.statistics._BOUND_WARPS
    try:
        for nw in (resident // 2, resident, 2 * resident, 8 * resident):
            be.statistics._BOUND_WARPS = nw
            ta, _ = timed(lambda: bound_planes(*ops.a, ops.a_strides, B, m, m, k, kp, ea), r)
            tb, _ = timed(lambda: bound_planes(*ops.b, ops.b_strides, B, n, n_p, k, kp, eb),
                          r)  # fmt: skip
            warps[nw] = [round(ta * 1e3, 4), round(tb * 1e3, 4)]
    finally:
        be.statistics._BOUND_WARPS = saved_warps
    rec["bound_operand_warps_ms"] = warps
    t, _ = timed(lambda: be.gemm._int8_products(ra_[1], rb_[1]), r)
    rec["int8_gemm"] = t
    rec["int8_tops"] = 2.0 * m * n * k / t / 1e12
    t, pre = timed(lambda: be.ozaki2_prescale(a, None, b, None, "accurate"), r)
    rec["prescale_total"] = t
    cc = certificate.cert_constants(k, target, False)
    line_terms = be.certificate._line_terms
    t, _ = timed(lambda: line_terms(pre.lower.pa, B, m, pre[2].reshape(B * m), cc.scale,
                                    cc.l1fac, cc.norm == "l2"), r)  # fmt: skip
    rec["line_terms_A"] = t
    calls = []
    real_gemm = be.gemm._bf16_gemm

    def counted(*a_):
        calls.append(1)
        return real_gemm(*a_)

    be.certificate._bf16_gemm = counted
    t, res = timed(lambda: be.ozaki2_certificate(a, None, b, None, pre, target), r)
    rec["certificate_total"] = t
    rec["bf16_fallback_calls"] = len(calls)
    rec["count"] = res[0]
    rec["beyond"] = 0 if res[1] is None else int(cp.count_nonzero(res[1]))
    saved = refinement.REFINE_ENTRIES
    refinement.REFINE_ENTRIES = -1
    t, res = timed(lambda: be.ozaki2_certificate(a, None, b, None, pre, target), r)
    refinement.REFINE_ENTRIES = saved
    be.certificate._bf16_gemm = real_gemm
    rec["certificate_no_refine"] = t
    rec["count_no_refine"] = res[0]
    # the certificate's bf16 pass reads float64 operands (copies where the inputs are float32)
    wide = be.kernels._Operands(a.astype(cp.float64), None, b.astype(cp.float64), None)
    cert_operand = be.statistics._cert_operand
    a16 = cert_operand(*wide.a, wide.a_strides, B, m, m, k, kp, False, pre[0])
    b16 = cert_operand(*wide.b, wide.b_strides, B, n, n_p, k, kp, True, pre[1])
    t, _ = timed(lambda: cert_operand(*wide.a, wide.a_strides, B, m, m, k, kp, False, pre[0]), r)
    rec["bf16_operand_A"] = t
    t, _ = timed(lambda: be.gemm._bf16_gemm(a16, b16), r)
    rec["bf16_gemm"] = t
    rec["kernels"] = kernel_times(a_in, b_in, r)
    # F's passes at other grids (emulinalg/backends/cupy/: _BOUND_MAX_ROWS, _CERT_BLOCKS),
    # inside a real matmul
    grids = {}
    saved_grid = be.statistics._BOUND_MAX_ROWS, be.certificate._CERT_BLOCKS
    try:
        for rows, blocks in ((128, 2048), (512, 1024), (1024, 512), (2048, 8192)):
            be.statistics._BOUND_MAX_ROWS, be.certificate._CERT_BLOCKS = rows, blocks
            kt = kernel_times(a_in, b_in, 3)
            grids[f"{rows},{blocks}"] = [
                kt.get("statistics:bound_max"), kt.get("statistics:cert_entries")
            ]
    finally:
        be.statistics._BOUND_MAX_ROWS, be.certificate._CERT_BLOCKS = saved_grid
    rec["f_pass_grid_ms"] = grids  # "bound_max rows, cert blocks": [bound_max, cert_entries]
    if args.profile:  # host time of the statistics' Python (launches, allocations, checks)
        import cProfile
        import pstats

        def stats_calls():
            for _ in range(r):
                p_ = be.ozaki2_prescale(a, None, b, None, "accurate", exponents=scan[1])
                be.ozaki2_certificate(a, None, b, None, p_, target)

        prof = cProfile.Profile()
        prof.runcall(stats_calls)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    native, _ = timed(lambda: a_in @ b_in, r)
    rec["native_gemm"] = native
    rec["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    for key, v in list(rec.items()):
        if isinstance(v, float) and key not in ("phi", "int8_tops"):
            rec[key] = round(v * 1e3, 4)  # ms
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
