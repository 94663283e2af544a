"""What the harness runs on: the CPU, numpy's BLAS, the backend numpy arrays take, and the
``info`` command that prints them (``python -m emulinalg info``)."""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import sys


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        try:
            return getattr(importlib.import_module(module), "__version__", "?")
        except Exception:
            return None


def blas() -> str:
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


def cpu_description() -> str:
    """CPU model and logical CPU count, e.g. ``"Intel(R) Xeon(R) ... (16 CPUs)"``."""
    from emulinalg._calibration import cpu_model

    return f"{cpu_model()} ({os.cpu_count()} CPUs)"


@contextlib.contextmanager
def backend_env(backend):
    """Select the backend the numpy namespace dispatches to: "amx" asks for the AMX backend,
    anything else keeps numpy arrays on the numpy backend (AMX is the default where usable).

    It sets ``EMULINALG_AMX`` for the block rather than a ``config()`` field, so that worker
    threads (dask's scheduler), which start from the environment's defaults, see it too.
    """
    old = os.environ.get("EMULINALG_AMX")
    try:
        os.environ["EMULINALG_AMX"] = "1" if backend == "amx" else "0"
        yield
    finally:
        if old is None:
            os.environ.pop("EMULINALG_AMX", None)
        else:
            os.environ["EMULINALG_AMX"] = old


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
    print(f"numpy             {np.__version__}, BLAS: {blas()}")
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
    from emulinalg import get_config
    from emulinalg.backends import for_namespace

    setting = get_config().amx
    where = for_namespace(np).name
    print(f"numpy arrays      {where} backend (EMULINALG_AMX={setting or 'unset'})")
    if setting != "0":
        from emulinalg.backends import amx

        why = amx.reason()
        print(f"  AMX backend     {'usable' if not why else 'not usable: ' + why}")
    return 0
