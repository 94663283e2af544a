"""The refit's one-pass pick of a real result against the two passes, on one GPU in one process
(issue #24): the level under ``strategy="eager"`` with ``backends.cupy.refit.SAMPLE_STEP`` as
shipped (the sampled rows bound the spread: one pass over the output) and set beyond any row
count (the smallest ratio, then the selection), results compared bit for bit, then seven
interleaved rounds of three CUDA-event-timed calls of each (medians), cuBLAS before and after
(``gpu_records.constant_ab``). One JSON line per row, appended to the output file.

    python3 tools/device/refit_ab.py OUT.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_records

import cupy as cp
from gpu_records import constant_ab

from emulinalg.backends.cupy import refit

ROWS = ["float32:16384:0.5", "float64:16384:1"]
TWO_PASSES = 1 << 30  # SAMPLE_STEP beyond any row count


def main(out):
    variants = {"one_pass": refit.SAMPLE_STEP, "two_pass": TWO_PASSES}

    def identical(rec, run):
        rec["identical"] = bool(cp.array_equal(run(variants["one_pass"]), run(TWO_PASSES)))

    constant_ab(refit, "SAMPLE_STEP", variants, ROWS, out, identical)


if __name__ == "__main__":
    main(sys.argv[1])
