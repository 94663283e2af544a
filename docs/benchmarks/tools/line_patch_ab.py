"""The certificate's line patch (refinement.line_patch) on and off: the dtype's level of an N x N
x N phi = 1 product on the numpy arrays' default backend (medians of 3 after a warm-up, beside
numpy.matmul), and the bits (max-rel / componentwise) of the same rows in both runs (every
N/8-th row and the rows the patch takes with lines on, up to four) against the exact product,
beside numpy.matmul's. One JSON line on stdout.

    python docs/benchmarks/tools/line_patch_ab.py ON N DTYPE    # ON: 1 lines, 0 none

Run on and off in separate processes, alternating (ci-cpu/line_patch_2026-12-05.jsonl).
"""

import json
import sys
import time

import numpy as np

import emulinalg
from emulinalg import _engine
from emulinalg.algorithm import refinement
from emulinalg.harness.machine import cpu_description
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul


def main(on, N, dt):
    a = phi_matrix((N, N), 1.0, dt, seed=1)
    b = phi_matrix((N, N), 1.0, dt, seed=2)
    level = "float32" if dt in ("float32", "complex64") else "float64"
    seen = []
    real = _engine._native_lines

    def spy(*args):  # the rows the patch takes (the same rows are measured in both runs)
        seen.append(args[7])
        return real(*args)

    _engine._native_lines = spy
    times, native_times = [], []
    with emulinalg.config(strategy="eager"):
        emulinalg.matmul(a, b, precision=level)  # with lines: their rows
        if not on:  # no entries may go to lines
            refinement.LINE_SHARE = 1 << 62
        for _ in range(3):
            t = time.perf_counter()
            c = emulinalg.matmul(a, b, precision=level)
            times.append(time.perf_counter() - t)
    plan = emulinalg.last_plan()
    for _ in range(2):
        t = time.perf_counter()
        nat = a @ b
        native_times.append(time.perf_counter() - t)
    took = [int(r) for r in seen[0].rows[:4]] if seen else []
    rows = sorted(set(range(0, N, N // 8)) | set(took))
    ref = exact_matmul(a[rows], b)
    e, n = accuracy(c[rows], a[rows], b, ref), accuracy(nat[rows], a[rows], b, ref)
    t, tn = float(np.median(times)), float(np.median(native_times))
    return dict(
        machine=cpu_description(), backend=plan.backend, dtype=dt, N=N, phi=1.0, lines=bool(on),
        scheme=plan.scheme, seconds=t, native_seconds=tn, x_native=tn / t,
        rows_measured=len(rows),
        bits=[round(e["bits_maxrel"], 1), round(e["bits_cw"], 1)],
        native_bits=[round(n["bits_maxrel"], 1), round(n["bits_cw"], 1)],
        patch=[x for x in plan.notes if x.startswith("patch")],
    )  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])), flush=True)
