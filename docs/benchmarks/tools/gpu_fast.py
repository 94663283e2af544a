"""Stage timings of the cupy backend's Scheme II kernels (issue #4) beside cuBLAS DGEMM.

float64 phi = 1 inputs, OzakiII(moduli=18, mode="accurate"), N = 4096 and 8192 (16384 with
--big). Per size: residues (A and B), the batched INT8 GEMMs (and their Top/s), the CRT pass,
the whole ``ozaki2_product`` call, the end-to-end ``emulinalg.matmul``, DGEMM in the same run,
and the bytes the three stages move; the statistics that choose the number of moduli at the
float64 level (issue #6): the backend's prescale and certificate hooks (``statistics_ms``;
kernel by kernel: ``stats_breakdown.py``) beside the generic code on the device
(``statistics_generic_ms``). Each time is the median of --repeat runs (CUDA events) after two
warm-up runs. At the smallest size the product is also compared bit for bit with the generic
``products.product`` on the device, and the hooks' prescale and (count, beyond) with the generic
ones.

    python3 docs/benchmarks/tools/gpu_fast.py --out OUT.jsonl [--big] [--sizes 4096,8192] \\
        [--repeat 10]

Writes one JSON object per size to --out (and prints a summary line).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools" / "device"))  # gpu_records

import array_api_compat.cupy as cxp
import cupy as cp
from gpu_records import median_ms  # tools/device: one CUDA-event timer

import emulinalg
from emulinalg.algorithm import certificate, products
from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import ozaki2_prescale, ozaki2_shifts, rounds_to_nearest
from emulinalg.backends import cupy as be

MODULI, MODE, PHI = 18, "accurate", 1.0
BITS = 53  # the float64 level


def phi_matrix_gpu(n, phi, seed):
    """(U(0,1) - 0.5) exp(phi N(0,1)), as emulinalg.inputs.phi_matrix, generated on the device."""
    rng = cp.random.default_rng(seed)
    return (rng.random((n, n)) - 0.5) * cp.exp(phi * rng.standard_normal((n, n)))


def _generic_backend():
    """The backend surface without the statistics hooks (the generic code, same bf16 bound)."""
    import types

    return types.SimpleNamespace(
        int_matmul=be.int_matmul, magnitude_lower_matmul=be.magnitude_lower_matmul,
        native_matmul=be.native_matmul,
    )  # fmt: skip


def statistics(a, b, repeat, check):
    """Times of the statistics at the float64 level: the hooks (prescale + certificate) and the
    generic code; with ``check`` the hooks' outputs against it."""
    rec = {}

    def hooks():
        pre = be.ozaki2_prescale(a, None, b, None, MODE)
        return pre, be.ozaki2_certificate(a, None, b, None, pre, BITS)

    def generic():
        pre = ozaki2_prescale(cxp, be.int_matmul, a, None, b, None, MODE)
        return pre, certificate.ozaki2_moduli_needed(cxp, _generic_backend(), a, None, b, None, pre,
                                                 BITS)  # fmt: skip

    rec["statistics_ms"] = median_ms(hooks, repeat)
    rec["statistics_generic_ms"] = median_ms(generic, max(3, repeat // 3))
    pre = be.ozaki2_prescale(a, None, b, None, MODE)
    rec["prescale_ms"] = median_ms(lambda: be.ozaki2_prescale(a, None, b, None, MODE), repeat)
    rec["certificate_ms"] = median_ms(
        lambda: be.ozaki2_certificate(a, None, b, None, pre, BITS), repeat
    )
    # the kernels one by one: docs/benchmarks/tools/stats_breakdown.py
    if check:
        got, want = hooks(), generic()
        rec["prescale_equal_generic"] = all(
            bool(cp.array_equal(x, y)) and x.dtype == y.dtype for x, y in zip(got[0], want[0])
        )
        beyond = got[1][1] if got[1][1] is not None else cp.zeros_like(want[1][1])  # None: none
        rec["certificate_equal_generic"] = got[1][0] == want[1][0] and bool(
            cp.array_equal(beyond, want[1][1])
        )
        rec["certificate_count"] = got[1][0]
    return rec


def run_size(n, repeat, check):
    a, b = phi_matrix_gpu(n, PHI, 1), phi_matrix_gpu(n, PHI, 2)
    rec = {"N": n}
    rec["dgemm_ms"] = median_ms(lambda: cp.matmul(a, b), repeat)
    rec.update(statistics(a, b, repeat, check))
    pre = be.ozaki2_prescale(a, None, b, None, MODE)
    c = crt_constants(MODULI)
    mu, nu = ozaki2_shifts(cxp, pre, c.L, c.Q_down)
    ops = be.kernels._Operands(a, None, b, None, mu, nu)
    kp, n_p = ops.kp, ops.n_p
    near = rounds_to_nearest(MODULI, n, MODE)

    def residues():
        pa = be.products._residue_planes(
            ops.a[0], None, ops.a_strides, n, n, n, kp, ops.mu, n, MODULI, near
        )
        pb = be.products._residue_planes(
            ops.b[0], None, ops.b_strides, n, n_p, n, kp, ops.nu, n, MODULI, near
        )
        return pa, pb

    rec["residues_ms"] = median_ms(residues, repeat)
    pa, pb = residues()
    rec["gemms_ms"] = median_ms(lambda: be.gemm._int8_products(pa, pb), repeat)
    rec["int8_tops"] = 2.0 * n * n_p * kp * MODULI / (rec["gemms_ms"] * 1e-3) / 1e12
    prod = be.gemm._int8_products(pa, pb)
    pa = pb = None  # free before the next stage
    out = [cp.empty((1, n, n), dtype=cp.float64)]
    rec["crt_ms"] = median_ms(
        lambda: be.products._crt(prod, MODULI, False, ops.mu, ops.nu, 0, out, "float64"), repeat
    )
    prod = out = None

    def hook():
        return be.ozaki2_product(a, None, b, None, MODULI, MODE, "float64", pre)

    rec["total_ms"] = median_ms(hook, repeat)
    scheme = emulinalg.OzakiII(moduli=MODULI, mode=MODE)
    with emulinalg.config(strategy="eager"):
        rec["end_to_end_ms"] = median_ms(
            lambda: emulinalg.matmul(a, b, precision=scheme), max(3, repeat // 3)
        )
    plane = MODULI * (n * kp + n_p * kp)  # int8 residues of A and B
    int32_out = 4 * MODULI * n * n_p  # the INT32 products
    rec["bytes_moved"] = {
        "residues": 8 * 2 * n * n + plane,
        "gemms": plane + int32_out,  # each plane read at least once
        "crt": int32_out + 8 * n * n,
    }
    rec["bytes_moved"]["total"] = sum(rec["bytes_moved"].values())
    rec["speedup_vs_dgemm"] = rec["dgemm_ms"] / rec["total_ms"]
    rec["tflops"] = 2.0 * n**3 / (rec["total_ms"] * 1e-3) / 1e12
    rec["native_tflops"] = 2.0 * n**3 / (rec["dgemm_ms"] * 1e-3) / 1e12
    if check:
        got = hook()[0]
        want = products.product(cxp, be.int_matmul, a, None, b, None, MODULI, MODE, "float64", pre)
        rec["bitwise_equal_generic"] = bool(
            cp.array_equal(got.view(cp.uint64), want[0].view(cp.uint64))
        )
    return rec


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON lines output path")
    p.add_argument("--big", action="store_true", help="also N = 16384")
    p.add_argument("--sizes", default="4096,8192", help="comma-separated N")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per measurement")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] + ([16384] if args.big else [])
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    command = "python3 docs/benchmarks/tools/gpu_fast.py " + " ".join(argv or sys.argv[1:])
    with open(args.out, "w") as f:
        for i, n in enumerate(sizes):
            rec = run_size(n, args.repeat, check=(i == 0))
            rec.update(
                backend="cupy", op="matmul", dtype="float64", phi=PHI,
                scheme=f"OzakiII(moduli={MODULI}, mode={MODE})", device=device,
                date=datetime.date.today().isoformat(), command=command,
            )  # fmt: skip
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(
                f"N={n}: residues {rec['residues_ms']:.2f} ms, GEMMs {rec['gemms_ms']:.2f} ms "
                f"({rec['int8_tops']:.0f} Top/s), CRT {rec['crt_ms']:.2f} ms, total "
                f"{rec['total_ms']:.2f} ms ({rec['tflops']:.1f} TF, {rec['speedup_vs_dgemm']:.2f}x "
                f"DGEMM {rec['dgemm_ms']:.2f} ms), statistics {rec['statistics_ms']:.2f} ms "
                f"(prescale {rec['prescale_ms']:.2f}, certificate {rec['certificate_ms']:.2f}; "
                f"generic {rec['statistics_generic_ms']:.2f}), "
                f"end-to-end {rec['end_to_end_ms']:.2f} ms, "
                f"{rec['bytes_moved']['total'] / 1e9:.2f} GB moved"
                + (
                    f", bitwise = generic: {rec['bitwise_equal_generic']}, statistics = generic: "
                    f"{rec['prescale_equal_generic']}/{rec['certificate_equal_generic']}"
                    if i == 0
                    else ""
                ),
                flush=True,
            )
            print(f"  statistics (ms): hooks {rec['statistics_ms']:.3f}, generic "
                  f"{rec['statistics_generic_ms']:.3f}")
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
