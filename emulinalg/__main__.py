"""Command line: ``python -m emulinalg {bench,demo,grade,info}`` (also the ``emulinalg`` script)."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _extend(values: list[list]) -> list | None:
    flat = [x for group in values or [] for x in group]
    return flat or None


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        try:
            return getattr(importlib.import_module(module), "__version__", "?")
        except Exception:
            return None


def _blas() -> str:
    """The BLAS numpy was built with (and, with threadpoolctl, the one loaded)."""
    import numpy as np

    text = "unknown"
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        if blas:
            text = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:
        pass
    try:
        from threadpoolctl import threadpool_info

        loaded = [
            f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads)"
            for i in threadpool_info()
            if i.get("user_api") == "blas"
        ]
        if loaded:
            text += "; loaded: " + ", ".join(loaded)
    except Exception:
        pass
    return text


def _cpu_missing_reason(pkg) -> str:
    """Why ``emulinalg._cpu`` does not import: not built, or shadowed by a source checkout."""
    try:
        from importlib.metadata import distribution

        files = distribution("emulinalg").files or []
        installed = [f for f in files if str(f).startswith("emulinalg/_cpu")]
    except Exception:
        installed = []
    if installed:
        where = installed[0].locate()
        return (
            f"built ({where}) but not importable from this source checkout "
            f"({pkg.__path__[0]}); run from another folder"
        )
    return "not built (not x86-64, or installed without a C++ compiler)"


def info(args) -> int:
    """Print versions, the BLAS, and the CPU features seen by ``emulinalg._cpu``."""
    import numpy as np

    import emulinalg

    version = getattr(emulinalg, "__version__", None) or _version("emulinalg") or "?"
    print(f"emulinalg         {version} ({emulinalg.__file__})")
    print(f"python            {platform.python_version()} ({sys.executable})")
    print(f"platform          {platform.platform()} {platform.machine()}")
    print(f"numpy             {np.__version__}, BLAS: {_blas()}")
    print(f"array-api-compat  {_version('array_api_compat') or 'not installed'}")
    for name in ("cupy", "dask", "distributed"):
        print(f"{name:<17} {_version(name) or 'not installed'}")
    try:
        from emulinalg import _cpu
    except ImportError:
        print(f"emulinalg._cpu    {_cpu_missing_reason(emulinalg)}")
    else:
        feats = _cpu.features()
        on = [k for k, v in feats.items() if v]
        off = [k for k, v in feats.items() if not v]
        print(f"emulinalg._cpu    {_cpu.__file__}")
        print(f"  CPU features    yes: {', '.join(on) or '-'}")
        print(f"                  no:  {', '.join(off) or '-'}")
        amx = feats.get("amx_int8") and feats.get("amx_tile") and feats.get("os_xtiledata")
        print(f"  AMX (CPU, OS)   {'yes' if amx else 'no'}")
    from emulinalg.backends import for_namespace

    setting = os.environ.get("EMULINALG_AMX")
    where = for_namespace(np).name
    print(f"numpy arrays      {where} backend (EMULINALG_AMX={setting or 'unset'})")
    if setting != "0":
        from emulinalg.backends import amx

        why = amx.reason()
        print(f"  AMX backend     {'usable' if not why else 'not usable: ' + why}")
    return 0


def demo(args) -> int:
    if getattr(args, "workload", "matmul") == "scf":
        from emulinalg.examples import scf_demo

        return scf_demo.main(args)
    if getattr(args, "workload", "matmul") == "dask":
        try:
            import dask.array  # noqa: F401
            import distributed  # noqa: F401
        except ImportError as exc:
            print(f"demo dask needs dask[array] and distributed ({exc}): "
                  "pip install 'emulinalg[dask]'", file=sys.stderr)  # fmt: skip
            return 2
        from emulinalg.examples import out_of_core

        return out_of_core.demo_main(args)
    from emulinalg import _demo

    return _demo.main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m emulinalg",
        description="emulinalg: FP64/FP32 matrix products on low-precision matrix engines "
        "(Ozaki schemes).",
    )
    sub = parser.add_subparsers(dest="command", metavar="{bench,demo,grade,info}")

    p = sub.add_parser(
        "demo",
        help="emulated vs native products on built-in inputs: accuracy and time",
        description="Compare native and emulated matmul on square phi-matrices: effective bits "
        "against the exact product, and time relative to native.",
    )
    p.add_argument(
        "workload",
        nargs="?",
        choices=("matmul", "scf", "dask"),
        default="matmul",
        help="matmul (default): phi-matrices against the exact product; scf: density-fitted "
        "Hartree-Fock energies against native (needs PySCF: pip install 'emulinalg[scf]'); "
        "dask: an out-of-core product on a LocalCluster (emulinalg.examples.out_of_core)",
    )
    p.add_argument(
        "--molecule",
        type=_words,
        action="append",
        metavar="NAME[/BASIS][,...]",
        help="scf only: water, benzene or a PySCF atom string, optional basis "
        "(default water/cc-pvdz,benzene/cc-pvdz)",
    )
    p.add_argument("--size", "-N", type=int, default=512, help="matrix size N (default 512)")
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
        "(prefix match; native rows are always shown)",
    )
    p.add_argument(
        "--dtype",
        type=_words,
        action="append",
        metavar="D[,D...]",
        help="input dtypes: float64, float32, complex128, complex64 (default float64,float32)",
    )
    p.add_argument("--repeat", type=int, default=3, help="timed runs per row, median (default 3)")
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
    p.set_defaults(func=info)

    from emulinalg import _bench, _suite

    _bench.add_parser(sub)
    _suite.add_parser(sub)
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


if __name__ == "__main__":
    sys.exit(main())
