"""A/B on the device: a complex array's interleaved parts read in pairs along memory (the cupy
backend's ``kernels._interleaved``, d2f5ca1) against the reading before it (``_interleaved``
forced False: the parts taken as separate strided arrays), per kernel (line scan, bound operand,
residues of A and B) and end to end (the eager float64 level and cuBLAS's ZGEMM), in alternating
rounds; CUDA-event medians in ms, one JSON line.

    python3 tools/device/pair_ab.py [N] [OUT.jsonl]
"""

import json
import sys
import time

import cupy as cp
import numpy as np

import emulinalg
from emulinalg.backends.cupy import kernels, products, statistics
from emulinalg.inputs import phi_matrix

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
out = sys.argv[2] if len(sys.argv) > 2 else None
real_inter = kernels._interleaved


def set_mode(on):
    f = real_inter if on else (lambda re, im, strides: False)
    for mod in (kernels, statistics, products):
        if hasattr(mod, "_interleaved"):
            mod._interleaved = f


def ev_time(fn, reps=7):
    ts = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e))
    return float(np.median(ts))


rng = np.random.default_rng(0)
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
        "line_max_exponent_A": ev_time(
            lambda: statistics._line_max_exponent(*ops.a, ops.a_strides, Bn, m, k)
        ),
        "line_max_exponent_B": ev_time(
            lambda: statistics._line_max_exponent(*ops.b, ops.b_strides, Bn, n, k)
        ),
        "bound_operand_A": ev_time(
            lambda ea=ea: statistics._bound_planes(*ops.a, ops.a_strides, Bn, m, m, k, kp, ea)
        ),
        "bound_operand_B": ev_time(
            lambda eb=eb: statistics._bound_planes(*ops.b, ops.b_strides, Bn, n, n_p, k, kp, eb)
        ),
    }
    mu = cp.zeros((Bn, m), dtype=cp.int32)
    nu = cp.zeros((Bn, n), dtype=cp.int32)
    r["residues_A"] = ev_time(
        lambda mu=mu: products._residue_planes(
            ops.a[0], ops.a[1], ops.a_strides, m, m, k, kp, mu, m, 15, True
        )
    )
    r["residues_B"] = ev_time(
        lambda nu=nu: products._residue_planes(
            ops.b[0], ops.b[1], ops.b_strides, n, n_p, k, kp, nu, n, 15, True
        )
    )
    with emulinalg.config(strategy="eager"):
        emulinalg.matmul(A, B, precision="float64")
        r["level"] = ev_time(lambda: emulinalg.matmul(A, B, precision="float64"), reps=5)
    r["zgemm"] = ev_time(lambda: A @ B, reps=5)
    rec.setdefault("runs", []).append({"mode": tag, **r})
    print(tag, {kk: round(v, 3) for kk, v in r.items()}, flush=True)
set_mode(True)
rec["plan"] = str(emulinalg.last_plan())[:200]
rec.update(date=time.strftime("%Y-%m-%d"), tool="tools/device/pair_ab.py")
if out:
    with open(out, "a") as f:
        f.write(json.dumps(rec) + "\n")
