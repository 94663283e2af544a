"""A/B on the device: a complex array's interleaved parts read in pairs along memory (the cupy
backend's ``kernels._interleaved``, d2f5ca1) against the reading before it (``_interleaved``
forced False: the parts taken as separate strided arrays), per kernel (line scan, bound operand,
residues of A and B) and end to end (the eager float64 level and cuBLAS's ZGEMM), in alternating
rounds; medians in ms of ``gpu_records.median_ms`` (CUDA events after two warm-up calls),
one JSON line.

    python3 tools/device/pair_ab.py [N] [OUT.jsonl]
"""

import sys
import time

import cupy as cp
from gpu_records import emit, median_ms  # same folder: the CUDA-event timer

import emulinalg
from emulinalg.backends.cupy import kernels, products, statistics
from emulinalg.inputs import phi_matrix

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
out = sys.argv[2] if len(sys.argv) > 2 else None
real_inter = kernels._interleaved


def set_mode(on):
    f = real_inter if on else (lambda re, im, strides: False)
    kernels._interleaved = statistics._interleaved = f  # the two modules that read it


A = cp.asarray(phi_matrix((N, N), 1.0, "complex128", seed=1))
B = cp.asarray(phi_matrix((N, N), 1.0, "complex128", seed=2))
rec = {
    "N": N,
    "dtype": "complex128",
    "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
}
ops = kernels._Operands(A.real, A.imag, B.real, B.imag)
Bn, m, k, n, kp, n_p = ops.B, ops.m, ops.k, ops.n, ops.kp, ops.n_p
for on in (False, True, False, True):
    set_mode(on)
    tag = "pairs" if on else "old"
    ea = statistics._line_max_exponent(*ops.a, ops.a_strides, Bn, m, k)
    eb = statistics._line_max_exponent(*ops.b, ops.b_strides, Bn, n, k)
    r = {
        "line_max_exponent_A": median_ms(
            lambda: statistics._line_max_exponent(*ops.a, ops.a_strides, Bn, m, k), 7
        ),
        "line_max_exponent_B": median_ms(
            lambda: statistics._line_max_exponent(*ops.b, ops.b_strides, Bn, n, k), 7
        ),
        "bound_operand_A": median_ms(
            lambda ea=ea: statistics._bound_planes(*ops.a, ops.a_strides, Bn, m, m, k, kp, ea), 7
        ),
        "bound_operand_B": median_ms(
            lambda eb=eb: statistics._bound_planes(*ops.b, ops.b_strides, Bn, n, n_p, k, kp, eb), 7
        ),
    }
    mu = cp.zeros((Bn, m), dtype=cp.int32)
    nu = cp.zeros((Bn, n), dtype=cp.int32)
    r["residues_A"] = median_ms(
        lambda mu=mu: products._residue_planes(
            ops.a[0], ops.a[1], ops.a_strides, m, m, k, kp, mu, m, 15, True
        ),
        7,
    )
    r["residues_B"] = median_ms(
        lambda nu=nu: products._residue_planes(
            ops.b[0], ops.b[1], ops.b_strides, n, n_p, k, kp, nu, n, 15, True
        ),
        7,
    )
    with emulinalg.config(strategy="eager"):
        r["level"] = median_ms(lambda: emulinalg.matmul(A, B, precision="float64"), 5)
    r["zgemm"] = median_ms(lambda: A @ B, 5)
    rec.setdefault("runs", []).append({"mode": tag, **r})
    print(tag, {kk: round(v, 3) for kk, v in r.items()}, flush=True)
set_mode(True)
rec["plan"] = str(emulinalg.last_plan())[:200]
rec.update(date=time.strftime("%Y-%m-%d"), tool="tools/device/pair_ab.py")
emit(rec, out)
