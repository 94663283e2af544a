"""Command line: ``python -m emulinalg {bench,demo,grade,info}`` (also the ``emulinalg`` script).

The options of every subcommand and the dispatch to its body: ``demo`` (:mod:`.demo`, or the
examples' ``scf`` and ``dask`` workloads), ``info`` (:mod:`.machine`), ``bench``
(:mod:`.bench_cli`) and ``grade`` (:mod:`.suite`).
"""

from __future__ import annotations

import argparse
import sys

from emulinalg import _extras

from . import bench_cli, machine, suite


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _extend(values: list[list]) -> list | None:
    flat = [x for group in values or [] for x in group]
    return flat or None


def demo(args) -> int:
    workload = getattr(args, "workload", "matmul")
    if getattr(args, "gpus", None) is not None and workload != "dask":
        print("demo: --gpus is for the dask workload: python -m emulinalg demo dask --gpus N",
              file=sys.stderr)  # fmt: skip
        return 2
    if workload == "scf":
        from emulinalg.examples import scf_demo

        return scf_demo.main(args)  # checks for PySCF before its first line
    if workload == "dask":
        if getattr(args, "gpus", None) is not None:  # its own hint: the [multigpu] extra
            from emulinalg.examples import multi_gpu

            return multi_gpu.demo_main(args)
        # the hint before anything starts (out_of_core imports them as it goes)
        hint = _extras.missing("dask.array", "distributed", needed_by="demo dask")
        if hint:
            print(hint, file=sys.stderr)
            return _extras.MISSING_EXTRA
        from emulinalg.examples import out_of_core

        return out_of_core.demo_main(args)
    from . import demo as matmul_demo

    return matmul_demo.main(args)


def calibrate(args) -> int:
    """``python -m emulinalg calibrate``: the current GPU's or AMX host's rates, cached, and the
    cost model they give."""
    from emulinalg import _calibration

    backend = args.backend
    if backend is None:  # the GPU where cupy sees one, else the AMX host where AMX is usable
        no_gpu = _extras.missing("cupy") or _calibration.device_name("cupy") is None
        amx_host = _calibration.device_name("amx") is not None
        backend = "amx" if no_gpu and amx_host else "cupy"
    if backend == "cupy":
        hint = _extras.missing("cupy", needed_by="calibrate")
        if hint:
            print(hint, file=sys.stderr)
            return _extras.MISSING_EXTRA
    if _calibration.device_name(backend) is None:
        what = "no CUDA GPU with cupy" if backend == "cupy" else "AMX is not usable"
        print(f"calibrate: {what} here (the numpy backend keeps its fitted model; "
              "emulinalg.set_cost_model overrides any model)", file=sys.stderr)  # fmt: skip
        return 2
    rates, model = _calibration.calibrate_device(backend)
    print(f"rates of {rates.name}: native GEMM flop/s {_rates(rates.native_flops)}; INT8 GEMM "
          f"{rates.int8_ops:.3g} op/s; bandwidth {rates.bandwidth:.3g} B/s")  # fmt: skip
    if model is None:  # rates cached, but no fitted device's rates to move the model by
        print(f"cost model for {backend}: the built-in one (fitted without these rates: "
              "docs/backends.md)")  # fmt: skip
        return 0
    print(f"cost model for {backend}: {model.source}")
    for name in ("native_flops", "int_gemm_ops", "entry_seconds", "stats_flops"):
        print(f"  {name}: {getattr(model, name)}")
    return 0


def _rates(flops):
    return ", ".join(f"{d} {v:.3g}" for d, v in flops.items())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m emulinalg",
        description="emulinalg: FP64/FP32 matrix products on low-precision matrix engines "
        "(Ozaki schemes).",
    )
    sub = parser.add_subparsers(dest="command", metavar="{bench,calibrate,demo,grade,info}")

    p = sub.add_parser(
        "demo",
        help="emulated vs native products on built-in inputs: accuracy and time",
        description="Compare native and emulated products, printing a line per step: matmul "
        "(default) on square phi-matrices, effective bits against the exact product and time "
        "relative to native; scf, Hartree-Fock energies against native; dask, a product on a "
        "LocalCluster graded on sampled rows. Each takes under a minute on 2 cores by default; "
        "bigger cases: --size/--phi/--dtype (matmul), --molecule benzene or --precision all "
        "(scf), --out-of-core (dask).",
    )
    p.add_argument(
        "workload",
        nargs="?",
        choices=("matmul", "scf", "dask"),
        default="matmul",
        help="matmul (default): phi-matrices against the exact product; scf: density-fitted "
        'Hartree-Fock energies against native (needs PySCF: pip install ".[scf]"); '
        "dask: a product on a LocalCluster, operands made chunk by chunk on the workers "
        '(emulinalg.examples.out_of_core; needs dask: pip install ".[dask]")',
    )
    p.add_argument(
        "--molecule",
        type=_words,
        action="append",
        metavar="NAME[/BASIS][,...]",
        help="scf only: water, benzene, naphthalene, anthracene or a PySCF atom string, "
        "optional basis (default water; benzene/cc-pvdz takes minutes per emulated row on the "
        "CPU; the larger ones are for the GPU)",
    )
    p.add_argument(
        "--basis",
        metavar="BASIS",
        help="scf only: the basis of molecules given without one (default cc-pvdz)",
    )
    p.add_argument(
        "--out-of-core",
        action="store_true",
        help="dask only: operands larger than the workers' memory (1024 x 81920 times "
        "81920 x 64, 680 MiB, on two workers of 300 MiB: they spill to disk and pause, which "
        "distributed logs; minutes on 2 cores) instead of the default 256 x 8192 times 8192 x 64 "
        "with the workers' memory left to dask",
    )
    p.add_argument(
        "--gpus",
        metavar="N|LIST|all",
        help="dask only: a dask-cuda cluster of one worker per GPU, the product on 1 then N GPUs "
        "with dask's native product beside it and the scaling efficiency "
        '(emulinalg.examples.multi_gpu; needs cupy and dask-cuda: pip install ".[multigpu]")',
    )
    p.add_argument(
        "--size", "-N", type=int, default=512, help="matmul only: matrix size N (default 512)"
    )
    p.add_argument(
        "--phi",
        type=_floats,
        action="append",
        metavar="X[,X...]",
        help="exponent spread phi of the inputs; repeatable or comma list (default 1)",
    )
    p.add_argument(
        "--precision",
        type=_words,
        action="append",
        metavar="P[,P...]",
        help="only these emulated rows, e.g. float64, float32, OzakiII, OzakiI "
        "(prefix match; native rows are always shown); scf: default native, float64 and "
        "OzakiII(moduli=14), 'all' for every row",
    )
    p.add_argument(
        "--dtype",
        type=_words,
        action="append",
        metavar="D[,D...]",
        help="input dtypes: float64, float32, complex128, complex64 (matmul: default "
        "float64,float32; dask: the first one, default float64)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        help="matmul only: timed runs per row, median (default: up to 3, fewer once a row's "
        "runs take 2 s together)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs (default 0)")
    p.add_argument(
        "--strategy",
        choices=("eager", "performant"),
        default="eager",
        help="eager (default) always emulates; performant lets emulinalg choose native "
        "where that is faster at the asked accuracy",
    )
    p.add_argument("--json", action="store_true", help="print one JSON list of records")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=demo)

    p = sub.add_parser("info", help="versions, BLAS and CPU features")
    p.set_defaults(func=machine.info)

    p = sub.add_parser(
        "calibrate",
        help="measure this GPU's or AMX host's rates for the cost model (cached per device "
        "and version)",
        description="Time the native GEMM per dtype (cuBLAS; numpy.matmul on an AMX host), the "
        "INT8 GEMM the schemes run and a copy on the current GPU or AMX host (about a second), "
        "cache the rates in the user cache directory and print the cost model the default "
        "strategy then uses there. The first product large enough to ask does the same by "
        "itself on a GPU other than the one the built-in model was fitted on, and on any AMX "
        "host.",
    )
    p.add_argument("--backend", choices=("cupy", "amx"), default=None,
                   help="the device to measure (default: the GPU where cupy sees one, else "
                   "the AMX host)")  # fmt: skip
    p.set_defaults(func=calibrate)

    bench_cli.add_parser(sub)
    suite.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    for name in ("phi", "precision", "dtype"):
        if hasattr(args, name):
            setattr(args, name, _extend(getattr(args, name)))
    if getattr(args, "dtype", None):
        bad = set(args.dtype) - {"float64", "float32", "complex128", "complex64"}
        if bad:
            parser.error(f"unknown dtype(s): {', '.join(sorted(bad))}")
    return args.func(args)
