"""The cupy certificate's suspect cap (``certificate_plan.CUDA_SUSPECTS_MAX``) as shipped against
raised to every entry (2**32 - 1: the step takes all suspects, as 59dacc5 had it), on one GPU in
one process (issue #24): the eager level's plan (count and patch) with each, then seven
interleaved rounds of three CUDA-event-timed calls of each (medians), cuBLAS before and after
(``gpu_records.constant_ab``). Where the raised cap takes a count off with a line patch, the
difference is that count's GEMMs against the patch's steps, host work and native lines. One JSON
line per row.

    python3 tools/device/cap_ab.py OUT.jsonl [dtype:N:phi ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_records

from gpu_records import constant_ab

import emulinalg
from emulinalg.algorithm import certificate_plan

ROWS = ["float32:16384:1", "float32:16384:2", "float64:16384:2"]


def main(out, rows):
    variants = {"shipped": certificate_plan.CUDA_SUSPECTS_MAX, "all": 2**32 - 1}

    def plans(rec, run):
        for name, cap in variants.items():
            run(cap)
            rec[f"plan_{name}"] = str(emulinalg.last_plan())[:400]

    constant_ab(certificate_plan, "CUDA_SUSPECTS_MAX", variants, rows, out, plans)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ROWS)
