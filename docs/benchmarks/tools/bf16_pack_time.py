"""bf16_pack alone (the BF16 schedules' slicing, issue #9): median of 5 calls after one more, N x N
float64 operands, 6 slices 'fixed' (BF16xN), each call's panels released before the next.

    PYTHONPATH=<site> python docs/benchmarks/tools/bf16_pack_time.py LABEL N
"""

import statistics
import sys
import time

import numpy as np

from emulinalg import _amx

label, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
ts = []
for _ in range(6):
    t0 = time.perf_counter()
    p = _amx.bf16_pack(a, b, 6, "fixed")
    del p
    ts.append(time.perf_counter() - t0)
cache = _amx.cache_info() if hasattr(_amx, "cache_info") else {}
print(f"pack {label} N={n}: median {statistics.median(ts[1:]):.3f} s, min {min(ts[1:]):.3f}, "
      f"first call {ts[0]:.3f}; cache {cache}", flush=True)
