"""Quick GPU timing: the INT8 GEMM alone, cuBLAS DGEMM, and the emulated default product."""

import time

import cupy as cp
from gpu_records import timed  # same folder: one CUDA-event timer for both scripts

import emulinalg
from emulinalg.backends import cupy as be
from emulinalg.inputs import phi_matrix

for n in (4096, 8192):
    r = cp.random.default_rng(0)
    a8 = r.integers(-128, 128, size=(n, n)).astype(cp.float64)
    b8 = r.integers(-128, 128, size=(n, n)).astype(cp.float64)
    t = timed(be._gemm_s8, a8.astype(cp.int8), b8.astype(cp.int8))
    print(
        f"N={n} int8 gemm (incl. padding copies): {t * 1e3:.2f} ms, {2 * n**3 / t / 1e12:.0f} Top/s"
    )
    t = timed(be.int_matmul, a8, b8, 128 * 128)
    print(f"N={n} int_matmul end to end: {t * 1e3:.2f} ms")
    for dtype in ("float64", "complex128", "float32"):
        a = cp.asarray(phi_matrix((n, n), 1, dtype, seed=1))
        b = cp.asarray(phi_matrix((n, n), 1, dtype, seed=2))
        tn = timed(cp.matmul, a, b)
        with emulinalg.config(strategy="eager"):
            w = time.perf_counter()
            te = timed(emulinalg.matmul, a, b, repeat=3)
            plan = emulinalg.last_plan()
        f = (8 if dtype.startswith("complex") else 2) * n**3
        print(
            f"N={n} {dtype}: native {tn * 1e3:.1f} ms ({f / tn / 1e12:.1f} TF), emulated "
            f"{te * 1e3:.1f} ms ({f / te / 1e12:.1f} TF, {tn / te:.2f}x) {plan} "
            f"[wall {time.perf_counter() - w:.1f} s]"
        )
    print(f"pool used {cp.get_default_memory_pool().used_bytes() / 2**30:.1f} GiB", flush=True)
