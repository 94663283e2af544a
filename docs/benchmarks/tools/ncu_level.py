"""One level product inside a profiler range, for Nsight Compute (GPU diagnostics, issue #24):
a warm-up call (kernels compiled, memory pool filled), then one call between
``cudaProfilerStart`` and ``cudaProfilerStop``, so that ``ncu --profile-from-start off`` reads
the counters of that call's kernels only (``--kernel-name`` picks them). ncu is a measuring tool
of the GPU machine, not a dependency of the project.

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --csv --page details \
        python3 docs/benchmarks/tools/ncu_level.py -N 16384 --dtype float64 --phi 1
"""

from __future__ import annotations

import argparse

import cupy as cp
from cupy.cuda import profiler

import emulinalg
from emulinalg.inputs import phi_matrix


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--phi", type=float, default=1.0)
    args = p.parse_args()
    n, dt = args.N, args.dtype
    a = cp.asarray(phi_matrix((n, n), args.phi, dt, seed=1))
    b = cp.asarray(phi_matrix((n, n), args.phi, dt, seed=2))
    xp = emulinalg.namespace(a)
    with emulinalg.config(strategy="eager"):
        xp.matmul(a, b)
        cp.cuda.Device().synchronize()
        profiler.start()
        plan = xp.matmul(a, b, explain=True)[1]
        cp.cuda.Device().synchronize()
        profiler.stop()
    print("plan:", plan, flush=True)


if __name__ == "__main__":
    main()
