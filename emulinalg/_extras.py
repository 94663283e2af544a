"""Optional dependencies: the one line that says which extra of pyproject.toml to install.

Every command and library function that needs an optional module asks here, so a missing extra
reads the same everywhere::

    demo scf needs pyscf (not installed): pip install ".[scf]"

Commands print that line and exit with :data:`MISSING_EXTRA` (no traceback); library functions
raise it as the message of a :class:`ModuleNotFoundError` (an :class:`ImportError`: the module
is there but fails to import), the original error chained as its cause.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# The exit status of a command whose extra is missing: argparse's for a usage error, which this
# is (the command cannot run as installed), and distinct from 1 (it ran and something failed).
MISSING_EXTRA = 2

# The extra of pyproject.toml that brings each optional module (by import name).
EXTRAS = {
    "cupy": "cuda",
    "dask": "dask",
    "dask.array": "dask",
    "distributed": "dask",
    "dask_cuda": "multigpu",
    "matplotlib": "bench",
    "pyscf": "scf",
    "hypothesis": "test",
    "sphinx": "docs",
    "myst_parser": "docs",
    "furo": "docs",
}


def _not_found(module: str, error: BaseException | None) -> bool:
    """Whether ``error`` says ``module`` (or a package above it) is absent, as opposed to
    present but failing to import (a missing dependency of its own, a broken build)."""
    if error is None:
        return True
    name = getattr(error, "name", None)
    return isinstance(error, ModuleNotFoundError) and (
        name == module or (name is not None and module.startswith(name + "."))
    )


def extra_hint(
    extra: str, module: str, *, needed_by: str | None = None, error: BaseException | None = None
) -> str:
    """The one line that names the module, why it is unusable, and the extra to install.

    Parameters
    ----------
    extra : str
        The extra of pyproject.toml ("cuda", "dask", "test", "bench", "scf", "docs").
    module : str
        The import name that failed, e.g. "matplotlib" or "dask.array".
    needed_by : str, optional
        What needs it (a command such as "bench --plot", or a function); default "emulinalg".
    error : BaseException, optional
        The import's error: absent (None, or ModuleNotFoundError naming ``module``) reads "not
        installed", anything else is quoted (first line only: the hint stays one line).

    Returns
    -------
    str
        E.g. ``bench --plot needs matplotlib (not installed): pip install ".[bench]"``.
    """
    if _not_found(module, error):
        why = "not installed"
    else:
        text = str(error).strip().splitlines()
        why = f"{type(error).__name__}: {text[0] if text else '?'}"
    return f'{needed_by or "emulinalg"} needs {module} ({why}): pip install ".[{extra}]"'


def require(module: str, extra: str | None = None, *, needed_by: str | None = None) -> ModuleType:
    """Import ``module`` or raise with its :func:`extra_hint` as the message.

    Parameters
    ----------
    module : str
        Import name, e.g. "pyscf" or "dask.array".
    extra : str, optional
        Default: :data:`EXTRAS`'s entry for the module.
    needed_by : str, optional
        As for :func:`extra_hint`.

    Returns
    -------
    types.ModuleType
        The imported module.

    Raises
    ------
    ModuleNotFoundError
        The module is not installed.
    ImportError
        It is installed but fails to import (the original error is the ``__cause__``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        hint = extra_hint(extra or EXTRAS[module], module, needed_by=needed_by, error=exc)
        kind = ModuleNotFoundError if _not_found(module, exc) else ImportError
        raise kind(hint, name=module) from exc


def missing(*modules: str, extra: str | None = None, needed_by: str | None = None) -> str | None:
    """The hint for the first of ``modules`` that does not import, or None when all do: what a
    command checks before it starts work (and prints, exiting with :data:`MISSING_EXTRA`).

    Parameters
    ----------
    *modules : str
        Import names, checked in order.
    extra, needed_by : str, optional
        As for :func:`require`.

    Returns
    -------
    str or None
    """
    for module in modules:
        try:
            require(module, extra, needed_by=needed_by)
        except ImportError as exc:
            return str(exc)
    return None
