"""Kernel-by-kernel times of the Scheme II statistics on the GPU (backends/cupy.py's
ozaki2_prescale and ozaki2_certificate), device-synchronised, median of repeats.

    python tools/device/stats_breakdown.py -N 8192 [--dtype float64] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import cupy as cp

from emulinalg import _select
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=8192)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--bits", type=int, default=53)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    N, r = args.N, args.repeat
    a = cp.asarray(phi_matrix((N, N), args.phi, args.dtype, seed=1)).astype(cp.float64)
    b = cp.asarray(phi_matrix((N, N), args.phi, args.dtype, seed=2)).astype(cp.float64)
    rec = {"N": N, "dtype": args.dtype, "phi": args.phi, "bits": args.bits}
    ops = be._Operands(a, None, b, None)
    B, m, k, n, kp, n_p = ops.B, ops.m, ops.k, ops.n, ops.kp, ops.n_p
    t, ea = timed(lambda: be._line_max_exponent(*ops.a, ops.a_strides, B, m, k), r)
    rec["line_max_A"] = t
    t, eb = timed(lambda: be._line_max_exponent(*ops.b, ops.b_strides, B, n, k), r)
    rec["line_max_B"] = t
    t, ra_ = timed(lambda: be._bound_planes(*ops.a, ops.a_strides, B, m, m, k, kp, ea), r)
    rec["bound_operand_A"] = t
    t, rb_ = timed(lambda: be._bound_planes(*ops.b, ops.b_strides, B, n, n_p, k, kp, eb), r)
    rec["bound_operand_B"] = t
    t, _ = timed(lambda: be._int8_products(ra_[1], rb_[1]), r)
    rec["int8_gemm"] = t
    rec["int8_tops"] = 2.0 * m * n * k / t / 1e12
    t, pre = timed(lambda: be.ozaki2_prescale(a, None, b, None, "accurate"), r)
    rec["prescale_total"] = t
    cc = _select.cert_constants(k, args.bits, False)
    t, _ = timed(lambda: be._line_terms(pre.lower.pa, B, m, pre[2], cc.scale, cc.l1fac), r)
    rec["line_terms_A"] = t
    calls = []
    real_gemm = be._bf16_gemm

    def counted(*a_):
        calls.append(1)
        return real_gemm(*a_)

    be._bf16_gemm = counted
    t, res = timed(lambda: be.ozaki2_certificate(a, None, b, None, pre, args.bits), r)
    rec["certificate_total"] = t
    rec["bf16_fallback_calls"] = len(calls)
    rec["count"] = res[0]
    rec["beyond"] = int(cp.count_nonzero(res[1]))
    saved = _select.REFINE_ENTRIES
    _select.REFINE_ENTRIES = -1
    t, res = timed(lambda: be.ozaki2_certificate(a, None, b, None, pre, args.bits), r)
    _select.REFINE_ENTRIES = saved
    be._bf16_gemm = real_gemm
    rec["certificate_no_refine"] = t
    rec["count_no_refine"] = res[0]
    a16 = be._cert_operand(*ops.a, ops.a_strides, B, m, m, k, kp, False, pre[0])
    b16 = be._cert_operand(*ops.b, ops.b_strides, B, n, n_p, k, kp, True, pre[1])
    t, _ = timed(lambda: be._cert_operand(*ops.a, ops.a_strides, B, m, m, k, kp, False, pre[0]), r)
    rec["bf16_operand_A"] = t
    t, _ = timed(lambda: be._bf16_gemm(a16, b16), r)
    rec["bf16_gemm"] = t
    dgemm, _ = timed(lambda: a @ b, r)
    rec["dgemm"] = dgemm
    rec["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    for key, v in list(rec.items()):
        if isinstance(v, float) and key not in ("phi", "int8_tops"):
            rec[key] = round(v * 1e3, 4)  # ms
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
