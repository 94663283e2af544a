"""A/B on the device: the eager level with this tree's CUDA sources against an older copy of
``src_cuda/`` (``--old-dir``, e.g. ``git archive REF src_cuda | tar -x -C DIR``), the same
Python code driving both (``backends.cuda.source_dir`` and the compiled-kernel cache swapped per
variant), on the same operands: results compared bit for bit, the level's CUDA-event medians in
alternating rounds (``gpu_records.timed``), and per variant the device ms of the kernels whose
names match ``--kernels`` in one call under ``torch.profiler`` (CUPTI; a measuring tool of the
GPU machine). One JSON line per row.

    python3 tools/device/source_ab.py --old-dir DIR [--rows complex128:1:8192,float64:1:16384]
        [--kernels balance|refit] [--out X.jsonl]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_records

import cupy as cp
from gpu_records import emit, timed

import emulinalg
from emulinalg.backends import cuda as _cuda
from emulinalg.backends.cupy import kernels
from emulinalg.inputs import phi_matrix


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old-dir", required=True)
    p.add_argument("--rows", default="complex128:1:8192,float64:1:16384")
    p.add_argument("--kernels", default="balance|refit")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.init()
    new_dir, old_dir = _cuda.source_dir(), Path(args.old_dir).resolve()
    caches = {"new": kernels._modules, "old": {}}

    def use(tag):
        _cuda.source_dir = (lambda: new_dir) if tag == "new" else (lambda: old_dir)
        _cuda.source.cache_clear()  # (cached by file name: else both compile the first's text)
        kernels._modules = caches[tag]

    pick = re.compile(args.kernels)
    for row in args.rows.split(","):
        dt, phi, n = row.split(":")
        a = cp.asarray(phi_matrix((int(n), int(n)), float(phi), dt, seed=1))
        b = cp.asarray(phi_matrix((int(n), int(n)), float(phi), dt, seed=2))
        xp = emulinalg.namespace(a)

        def call(xp=xp, a=a, b=b):
            with emulinalg.config(strategy="eager"):
                return xp.matmul(a, b, explain=True)

        res, kern, ms = {}, {}, {"new": [], "old": []}
        for tag in ("new", "old"):
            use(tag)
            c, plan = call()
            res[tag] = (c, str(plan)[:200])
            cp.cuda.Device().synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                call()
                cp.cuda.Device().synchronize()
            kern[tag] = {
                ev.key[:60]: round(getattr(ev, "device_time_total", 0) / 1e3, 3)
                for ev in prof.key_averages()
                if pick.search(ev.key) and getattr(ev, "device_time_total", 0) > 0
            }
        same = bool(cp.array_equal(res["new"][0], res["old"][0]))
        for r in range(args.rounds):
            for tag in ("new", "old") if r % 2 == 0 else ("old", "new"):
                use(tag)
                ms[tag].append(round(1e3 * timed(call, repeat=args.repeat), 2))
        use("new")
        emit({"tool": "source_ab", "row": row, "identical": same, "plan": res["new"][1],
              "level_ms": ms, "kernels_ms": kern, "old_dir": str(old_dir)}, args.out)  # fmt: skip
        del res


if __name__ == "__main__":
    main()
