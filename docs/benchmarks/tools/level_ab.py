"""The eager level of a dtype against numpy.matmul at N x N, phi = 1, for whichever emulinalg is
first on the path (two builds are compared by running this once per build, interleaved; issue
#25). Median of R calls, the level and numpy.matmul alternated; one JSON line per dtype.

    OMP_NUM_THREADS=16 PYTHONPATH=/tmp/site-new python3 docs/benchmarks/tools/level_ab.py \
        8192 new float64,float32 3
"""

import json
import statistics
import sys
import time

import numpy as np

import emulinalg
from emulinalg.inputs import phi_matrix


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    n, label, dtypes, repeat = int(argv[0]), argv[1], argv[2].split(","), int(argv[3])
    for dt in dtypes:
        a = phi_matrix((n, n), 1.0, dt, seed=1)
        b = phi_matrix((n, n), 1.0, dt, seed=2)
        level = "float32" if dt in ("float32", "complex64") else "float64"

        def run(a=a, b=b, level=level):
            with emulinalg.config(strategy="eager"):
                return emulinalg.matmul(a, b, precision=level, explain=True)

        _, plan = run()
        ts, tn = [], []
        for _ in range(repeat):
            t = time.perf_counter()
            np.matmul(a, b)
            tn.append(time.perf_counter() - t)
            t = time.perf_counter()
            run()
            ts.append(time.perf_counter() - t)
        lev, nat = statistics.median(ts), statistics.median(tn)
        rec = {"label": label, "N": n, "dtype": dt, "level_s": round(lev, 4),
               "numpy_s": round(nat, 4), "x_numpy": round(nat / lev, 3),
               "levels": [round(x, 4) for x in ts], "numpys": [round(x, 4) for x in tn],
               "plan": str(plan)[:90], "backend": plan.backend}  # fmt: skip
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
