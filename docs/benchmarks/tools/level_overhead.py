"""Where a level's time goes beyond its scheme's on cupy arrays: the level (certificate, refine,
refit), the same level without the refit of its cancelled entries, the explicit scheme at the
level's count, the refit's entry choice alone, cuBLAS before and after. One JSON line per row
(``--profile``: and a cProfile of one level call per row on stderr).

    python3 level_overhead.py --out level_overhead.jsonl
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools" / "device"))  # gpu_records

import array_api_compat.cupy as xpc
import cupy as cp
from gpu_records import emit, timed  # tools/device: one CUDA-event timer

import emulinalg
from emulinalg import _planner
from emulinalg.algorithm import refit
from emulinalg.inputs import phi_matrix

ROWS = [("float64", 16384, 1.0), ("float32", 16384, 1.0), ("complex128", 8192, 1.0)]


def _row(dt, n, phi, repeat, profile):
    a = cp.asarray(phi_matrix((n, n), phi, dt, seed=1))
    b = cp.asarray(phi_matrix((n, n), phi, dt, seed=2))
    rec = {"dtype": dt, "n": n, "phi": phi}
    native = functools.partial(cp.matmul, a, b)
    native()
    rec["native_before_s"] = timed(native, repeat=repeat, warmup=0)
    with emulinalg.config(strategy="eager"):
        level = functools.partial(emulinalg.matmul, a, b)
        c = level()
        plan = emulinalg.last_plan()
        rec["plan"] = str(plan)
        rec["level_s"] = timed(level, repeat=repeat, warmup=0)
        saved = _planner.refits
        _planner.refits = lambda *args: False
        try:
            level()
            rec["level_no_refit_s"] = timed(level, repeat=repeat, warmup=0)
        finally:
            _planner.refits = saved
        moduli = int(re.search(r"moduli=(\d+)", plan.scheme).group(1))
        scheme = functools.partial(emulinalg.matmul, a, b, precision=emulinalg.OzakiII(moduli))
        scheme()
        rec["scheme_s"] = timed(scheme, repeat=repeat, warmup=0)
    parts = (cp.real(c), cp.imag(c)) if cp.iscomplexobj(c) else (c,)
    s = cp.zeros(n, dtype=cp.int64)
    e = cp.abs(cp.asarray(phi_matrix((n, 1), phi, "float64", seed=3)))[:, 0] + 1.0
    pre = (s, s, e, e)
    rec["refit_choice_s"] = timed(
        lambda: refit.cancelled_entries(xpc, parts, pre), repeat=repeat, warmup=0
    )
    rec["native_after_s"] = timed(native, repeat=repeat, warmup=0)
    if profile:  # where the host waits: the GPU's time shows at the sync points
        prof = cProfile.Profile()
        with emulinalg.config(strategy="eager"):
            prof.runcall(level)
        cp.cuda.Device().synchronize()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(45)
        print(text.getvalue(), file=sys.stderr)
    return rec


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="cProfile one level call per row")
    args = p.parse_args()
    for dt, n, phi in ROWS:
        emit(_row(dt, n, phi, args.repeat, args.profile), args.out)


if __name__ == "__main__":
    main()
