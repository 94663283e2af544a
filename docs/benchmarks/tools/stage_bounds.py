"""Time per stage of one emulated product against the stage's bound (issue #24), from a
``kernel_profile.py`` record: each kernel's device time grouped into the engine's stages, beside
the least time the stage could take on the device:

- memory-bound stages: the bytes they must move at least (each operand read once, each output
  written once: below) at ``--bandwidth`` (default 4.0e12 B/s, the H200's device copy);
- GEMMs: their operations at ``--int8`` op/s (default 1.52e15: the fused INT8 GEMM inside the
  float32 level's product on the H200, ``kernels_level_2026-12-03.jsonl``, the fastest INT8
  rate measured there; cuBLAS's inside GEMMul8 ran at about 1.42e15), the certificate's
  bfloat16 magnitude GEMM at half that rate.

Bytes (N x N operands and output, s bytes per source entry, n moduli; a complex product has two
parts per operand, three residue planes and two output parts):

| stage | least bytes or operations |
|---|---|
| statistics passes (line scan, bound operands) | read A, B; write the two int8 bound operands |
| bound GEMM | 2 N^3 INT8 operations |
| certificate (its kernels over F) | read F (int32) once |
| residues | read A, B; write the n int8 planes of each |
| INT8 GEMMs | n (3n complex) times 2 N^3 operations |
| CRT | read the n planes of the product, write the output |
| refit | read the output once |
| magnitude GEMM (bfloat16, with its operands) | 2 N^3 operations at half the INT8 rate |
| elementwise (cupy's own kernels, copies) | read A, B |

The zero-overhead bound of the product is its INT8 GEMMs alone (the issue's definition).
Writes a markdown table (stdout) and, with ``--plot``, a bar chart per record.

    python docs/benchmarks/tools/stage_bounds.py \\
        docs/benchmarks/h200/kernels_level_2026-12-03.jsonl \\
        --plot docs/benchmarks/h200/stage_bounds_2026-12-03.png
"""

from __future__ import annotations

import argparse
import json
import re

STAGES = (  # (stage, kernel-name pattern), first match wins
    ("INT8 GEMMs", r"GemmUniversal"),
    ("bound GEMM", r"sm90_xmma_gemm_i8i32|gemm_i8"),
    ("magnitude GEMM", r"nvjet|bf16_lower|cert_operand"),
    ("residues", r"ozaki2_residues"),
    ("CRT", r"ozaki2_crt"),
    ("certificate", r"cert_|refine_|suspect_ranks|bound_max"),
    ("refit", r"refit_"),
    ("statistics passes", r"line_max_exponent|bound_operand"),
    ("elementwise", r"cupy_|emulinalg_balance|Memcpy|Memset|cub::"),
)


def stage_of(kernel):
    for name, pattern in STAGES:
        if re.search(pattern, kernel):
            return name
    return "other"


def moduli_of(plan):
    m = re.search(r"moduli=(\d+)", plan)
    return int(m.group(1)) if m else 0


def bounds(rec, bandwidth, int8):
    """Per stage: the least seconds (``STAGES``' bytes or operations; module docstring)."""
    n_mod, N = moduli_of(rec["plan"]), rec["N"]
    cplx = rec["dtype"].startswith("complex")
    s = {"float64": 8, "float32": 4, "complex128": 8, "complex64": 4}[rec["dtype"]]
    gaussian = bool(re.search(r"moduli=\d+, mode=\w+, gaussian", rec["plan"]))
    parts, planes = (2, 2 if gaussian else 3) if cplx else (1, 1)  # the Gaussian moduli: u, v
    e = N * N
    ops = 2.0 * N**3
    src = 2 * parts * s * e  # A and B read once
    return {
        "statistics passes": (src + 2 * e) / bandwidth,
        "bound GEMM": ops / int8,
        "certificate": 4 * e / bandwidth,
        "residues": (src + 2 * planes * n_mod * e) / bandwidth,
        "INT8 GEMMs": planes * n_mod * ops / int8,
        "CRT": (planes * n_mod * e + parts * s * e) / bandwidth,
        "refit": parts * s * e / bandwidth,
        "magnitude GEMM": ops / (int8 / 2),
        "elementwise": src / bandwidth,
    }


def table(rec, bandwidth, int8):
    got = {}
    for kernel, (ms, _) in rec["kernels"].items():
        got[stage_of(kernel)] = got.get(stage_of(kernel), 0.0) + ms
    bound = bounds(rec, bandwidth, int8)
    rows = [(st, got[st], 1e3 * bound.get(st, 0.0)) for st, _ in STAGES + (("other", ""),)
            if got.get(st)]  # fmt: skip
    return rows, 1e3 * bound["INT8 GEMMs"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records")
    p.add_argument("--bandwidth", type=float, default=4.0e12, help="bytes/s")
    p.add_argument("--int8", type=float, default=1.52e15, help="INT8 GEMM op/s")
    p.add_argument("--plot", help="PNG path: one panel per record")
    args = p.parse_args()
    with open(args.records) as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    panels = []
    for rec in recs:
        rows, zero = table(rec, args.bandwidth, args.int8)
        level = f"OzakiII({moduli_of(rec['plan'])})"
        head = (f"{rec['dtype']} N = {rec['N']} φ = {rec['phi']}, {level}: {rec['wall_ms']:.1f} "
                f"ms wall, {rec['device_ms']:.1f} ms on the device, zero-overhead bound "
                f"{zero:.1f} ms")  # fmt: skip
        print(f"\n{head}\n\n| stage | device ms | bound ms | × bound |\n|---|---|---|---|")
        for st, ms, b in rows:
            ratio = f"{ms / b:.1f}" if b else "-"
            print(f"| {st} | {ms:.2f} | {b:.2f} | {ratio} |")
        idle = rec["wall_ms"] - rec["device_ms"]
        print(f"| device idle (wall - device) | {idle:.2f} | 0 | - |")
        panels.append((head, rows + [("device idle", idle, 0.0)]))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.2 * len(panels)), squeeze=False)
        for ax, (head, rows) in zip(axes[:, 0], panels):
            names = [r[0] for r in rows]
            y = range(len(rows))
            ax.barh([i + 0.2 for i in y], [r[1] for r in rows], 0.4, label="measured")
            ax.barh([i - 0.2 for i in y], [r[2] for r in rows], 0.4, label="bound")
            ax.set_yticks(list(y), names, fontsize=8)
            ax.set_xscale("log")
            ax.set_xlabel("ms (log scale)")
            ax.set_title(head, fontsize=8)
            ax.invert_yaxis()
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
