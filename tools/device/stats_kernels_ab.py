"""Device time per statistics kernel of one product at the level, for A/B builds of
``src_cuda/ozaki2_stats.cu`` (issue #24): ``stats_breakdown.kernel_times`` alone (CUDA events
around every launch of the statistics in ``emulinalg.matmul`` with ``strategy="eager"``, the
level; medians of --repeat calls after one warm-up), without that tool's other sweeps. The
build under test is whatever source the process compiles (edit the installed ``src_cuda``
between runs: NVRTC keys its cache by the text). One JSON line per run, with the label given.

    python3 tools/device/stats_kernels_ab.py -N 16384 --dtype float64 --phi 1 --label unroll4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "benchmarks" / "tools"))

import cupy as cp  # noqa: E402
from gpu_records import emit  # noqa: E402  (this folder: the A/B runs append their lines)
from stats_breakdown import kernel_times  # noqa: E402

from emulinalg.inputs import phi_matrix  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=16384)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--label", default="")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    a = cp.asarray(phi_matrix((args.N, args.N), args.phi, args.dtype, seed=1))
    b = cp.asarray(phi_matrix((args.N, args.N), args.phi, args.dtype, seed=2))
    rec = {"label": args.label, "N": args.N, "dtype": args.dtype, "phi": args.phi,
           "repeat": args.repeat, "ms": kernel_times(a, b, args.repeat),
           "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}  # fmt: skip
    emit(rec, args.out)  # printed, and appended to --out across the A/B processes


if __name__ == "__main__":
    main()
