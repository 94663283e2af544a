"""The default float64 product on cupy arrays (precision=None, strategy="performant") against
``cupy.matmul``, alternated, median of 5 each, then a cProfile of one default call: does the
default add anything where it picks the native product?

    python3 probe_default.py
"""

from __future__ import annotations

import cProfile
import io
import pstats

import cupy as cp
from gpu_records import timed  # same folder: one CUDA-event timer

import emulinalg
from emulinalg.inputs import phi_matrix

N = 16384


def main():
    a = cp.asarray(phi_matrix((N, N), 1.0, "float64", seed=1))
    b = cp.asarray(phi_matrix((N, N), 1.0, "float64", seed=2))

    def native():
        return cp.matmul(a, b)

    def default():
        return emulinalg.matmul(a, b)

    native()
    default()
    for name, fn in [("cupy.matmul", native), ("default", default)] * 2:
        print(f"{name}: {1e3 * timed(fn, warmup=0):.1f} ms", flush=True)
    print(emulinalg.last_plan())
    cp.cuda.Device().synchronize()
    prof = cProfile.Profile()
    prof.enable()
    default()
    cp.cuda.Device().synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(25)
    print(text.getvalue())


if __name__ == "__main__":
    main()
