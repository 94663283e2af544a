"""How fast Scheme II can be on this GPU at all: the INT8 GEMM rate it sustains on residues,
beside the native products, in one run, and the end-to-end ratio that rate allows.

Per N (square), each figure the median of --repeat CUDA-event timings after two warm-ups:

- ``native``: cuBLAS DGEMM, SGEMM, ZGEMM (cupy.matmul) on phi = 1 inputs;
- ``int8``: the INT8 products of 18 moduli on residues uniform in each modulus' range (the
  data Scheme II multiplies): cuBLAS strided-batched INT32 out (``backends.cupy``), the fused
  CUTLASS kernel with its mod epilogue (``backends.cuda.fused``, its default configuration),
  and one cuBLAS INT8 GEMM on the same residues and on zeros (the rate's dependence on the
  data: the tensor cores' power draw);
- the SM clock and board power nvidia-smi sampled while each ran (mean over the variant);
- ``bound``: for each row of issue #4's targets, the ratio to native the product would reach
  if its INT8 GEMMs ran at the best rate measured here and everything else took no time,
  ``t_native / (gemms * 2 N^3 / rate)``, and the same at the 1,979 Top/s peak.

    python3 docs/benchmarks/tools/gpu_ceiling.py --out OUT.jsonl [--sizes 8192,16384] [--repeat 10]
        [--counts float64:0.5=17,float64:1=18,...]  (default: DEFAULT_COUNTS)

The counts are the moduli the default levels' certificates chose at N = 16384 (the benchmark
records); complex products take 3 INT8 GEMMs per modulus (3M).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools" / "device"))  # gpu_records

import cupy as cp
from fused_bench import NMOD, residue_planes  # same folder
from gpu_records import median_ms, records

from emulinalg.backends import cupy as be
from emulinalg.backends.cuda import fused

PEAK_TOPS = 1979.0  # H200 dense INT8 (NVIDIA's figure)
DEFAULT_COUNTS = (
    "float64:0.5=17,float64:1=18,float64:2=20,complex128:1=18,float32:0.5=10,float32:1=10"
)


def phi_device(n, dtype, seed):
    """(U(0,1) - 0.5) exp(N(0,1)) entries made on the device (the host would take minutes for
    16384^2 complex)."""
    rng = cp.random.default_rng(seed)

    def part():
        return (rng.random((n, n)) - 0.5) * cp.exp(rng.standard_normal((n, n)))

    x = part() + 1j * part() if dtype.startswith("complex") else part()
    return x.astype(dtype)


class Sampler:
    """nvidia-smi in the background, 100 ms period; ``mean(t0, t1)`` of a window."""

    def __init__(self):
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
             "-lms", "100"],
            stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        self.rows = []
        import threading

        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                clk, pwr = (float(v) for v in line.split(","))
            except ValueError:
                continue
            self.rows.append((time.time(), clk, pwr))

    def mean(self, t0, t1):
        sel = [(c, p) for t, c, p in self.rows if t0 <= t <= t1]
        if not sel:
            return None, None
        return sum(c for c, _ in sel) / len(sel), sum(p for _, p in sel) / len(sel)

    def close(self):
        self.proc.terminate()


def timed(sampler, fn, repeat):
    t0 = time.time()
    ms = median_ms(fn, repeat)
    clk, pwr = sampler.mean(t0, time.time())
    return {"ms": ms, "sm_clock_mhz": clk, "power_w": pwr}


def run_size(n, repeat, counts, sampler, emit):
    flops = 2.0 * n**3
    native = {}
    for dtype in ("float64", "float32", "complex128"):
        a, b = phi_device(n, dtype, 1), phi_device(n, dtype, 2)
        rec = timed(sampler, lambda a=a, b=b: cp.matmul(a, b), repeat)
        scale = 4 if dtype.startswith("complex") else 1
        rec["tflops"] = scale * flops / (rec["ms"] * 1e-3) / 1e12
        native[dtype] = rec["ms"]
        emit({"N": n, "variant": "native", "dtype": dtype, **rec})
    a = b = None
    cp.get_default_memory_pool().free_all_blocks()

    kp, n_p = -(-n // 16) * 16, -(-n // 4) * 4
    pa, pb = residue_planes(n, kp, 1), residue_planes(n_p, kp, 2)
    rates = {}

    def int8(name, fn, planes, **extra):
        rec = timed(sampler, fn, repeat)
        rec["tops"] = planes * 2.0 * n * n_p * kp / (rec["ms"] * 1e-3) / 1e12
        rates[name] = rec["tops"]
        emit({"N": n, "variant": "int8", "kernel": name, "moduli": planes, **extra, **rec})

    int8("cublas_batched_s32", lambda: be.gemm._int8_products(pa, pb), NMOD)
    if fused.available():
        cfg = fused.configs()[fused.config]["name"]
        int8("fused_mod_s8", lambda: fused.int8_mod_products(pa, pb, NMOD), NMOD,
             config=cfg, swizzle=fused.swizzle)  # fmt: skip
    one_a, one_b = pa[:, :1], pb[:, :1]
    int8("cublas_one_s32", lambda: be.gemm._int8_products(one_a, one_b), 1, data="residues")
    za, zb = cp.zeros_like(one_a), cp.zeros_like(one_b)
    int8("cublas_one_s32_zeros", lambda: be.gemm._int8_products(za, zb), 1, data="zeros")
    pa = pb = one_a = one_b = za = zb = None  # freed before the next size
    cp.get_default_memory_pool().free_all_blocks()

    best_name = max((k for k in rates if not k.endswith("zeros")), key=rates.get)
    best = rates[best_name]
    for key, count in counts.items():
        dtype, phi = key
        gemms = count * (3 if dtype.startswith("complex") else 1)  # complex: 3M's counts
        t_native = native[dtype]
        emit({"N": n, "variant": "bound", "dtype": dtype, "phi": phi, "moduli": count,
              "int8_gemms": gemms, "native_ms": t_native, "rate_kernel": best_name,
              "rate_tops": best,
              "bound_ratio": t_native / (gemms * flops / (best * 1e12) * 1e3),
              "bound_ratio_at_peak":
                  t_native / (gemms * flops / (PEAK_TOPS * 1e12) * 1e3)})  # fmt: skip


def summary(rec):
    v = rec["variant"]
    head = f"N={rec['N']} {v:7s}"
    extra = ""
    if rec.get("sm_clock_mhz") is not None:
        extra = f"  [{rec['sm_clock_mhz']:.0f} MHz, {rec['power_w']:.0f} W]"
    if v == "native":
        return f"{head} {rec['dtype']:10s} {rec['ms']:8.2f} ms {rec['tflops']:6.1f} TFLOP/s{extra}"
    if v == "int8":
        return (f"{head} {rec['kernel']:22s} x{rec['moduli']:<2d} {rec['ms']:8.2f} ms "
                f"{rec['tops']:6.0f} Top/s{extra}")  # fmt: skip
    return (f"{head} {rec['dtype']} phi={rec['phi']} {rec['moduli']} moduli ({rec['int8_gemms']} "
            f"GEMMs): at most {rec['bound_ratio']:.2f}x native at {rec['rate_tops']:.0f} Top/s "
            f"({rec['rate_kernel']}), {rec['bound_ratio_at_peak']:.2f}x at the peak")  # fmt: skip


def parse_counts(text):
    out = {}
    for item in text.split(","):
        key, count = item.split("=")
        dtype, phi = key.split(":")
        out[(dtype, float(phi))] = int(count)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON lines output path")
    p.add_argument("--sizes", default="8192,16384", help="comma-separated N")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per measurement")
    p.add_argument("--counts", default=DEFAULT_COUNTS, help="dtype:phi=moduli, comma-separated")
    args = p.parse_args(argv)
    counts = parse_counts(args.counts)
    sampler = Sampler()
    try:
        with records(args.out, "docs/benchmarks/tools/gpu_ceiling.py", argv, summary) as emit:
            for n in (int(s) for s in args.sizes.split(",")):
                run_size(n, args.repeat, counts, sampler, emit)
    finally:
        sampler.close()


if __name__ == "__main__":
    main()
