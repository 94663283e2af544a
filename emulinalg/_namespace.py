"""``emulinalg.namespace``: the array library's Array API namespace with emulated products."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import array_api_compat

from . import _api, _einsum
from ._precision import Precision, parse

PRODUCTS = ("matmul", "tensordot", "vecdot")
# Contractions outside the Array API that numpy, cupy and dask have: emulated where the library
# has them, so code written with them does not silently run natively.
CONTRACTIONS = ("einsum", "dot")


def _bind(fn: Callable[..., Any], precision: Precision) -> Callable[..., Any]:
    if precision is None:
        return fn

    @functools.wraps(fn)
    def bound(*args: Any, precision: Precision = precision, **kw: Any) -> Any:
        return fn(*args, precision=precision, **kw)

    return bound


class EmulatedNamespace(types.ModuleType):
    """An Array API namespace: everything from array_api_compat's namespace for the library,
    with ``matmul``, ``tensordot``, ``vecdot`` (and ``linalg``'s) emulated, and ``einsum`` and
    ``dot`` where the library has them."""

    def __init__(self, base: types.ModuleType, precision: Precision = None) -> None:
        super().__init__(f"emulinalg[{base.__name__}]")
        self._base = base
        self.precision = precision
        for name in PRODUCTS:
            setattr(self, name, _bind(getattr(_api, name), precision))
        for name in CONTRACTIONS:
            if hasattr(base, name):
                setattr(self, name, _bind(getattr(_einsum, name), precision))
        linalg = types.SimpleNamespace(
            **{n: getattr(base.linalg, n) for n in dir(base.linalg) if not n.startswith("_")}
        )
        for name in PRODUCTS:
            setattr(linalg, name, getattr(self, name))
        self.linalg = linalg

    def __getattr__(self, name: str) -> Any:  # everything else comes from the library's namespace
        return getattr(self._base, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._base)) | set(self.__dict__))

    def __repr__(self) -> str:
        return f"<emulinalg namespace over {self._base.__name__}, precision={self.precision!r}>"


def namespace(*arrays: Any, precision: Precision = None) -> EmulatedNamespace:
    """The Array API namespace for ``arrays``' library, with emulated products.

    Parameters
    ----------
    *arrays : arrays of one library (numpy, cupy, dask, ...)
    precision : see :func:`emulinalg.matmul`
        Default precision of the namespace's products (a call's own ``precision=`` overrides it).

    Returns
    -------
    EmulatedNamespace
        array_api_compat's namespace for that library with ``matmul``, ``tensordot``, ``vecdot``
        and ``linalg.matmul/tensordot/vecdot`` replaced, and, where the library has them (numpy,
        cupy, dask), ``einsum`` and ``dot`` (:func:`emulinalg._einsum.einsum`,
        :func:`emulinalg._einsum.dot`: pairwise products through the same engine).

    Raises
    ------
    TypeError
        No arrays, arrays of different libraries, or non-array arguments.
    ValueError, TypeError
        A bad ``precision``.

    Notes
    -----
    The products follow :func:`emulinalg.matmul` (Ozaki Scheme I: Ozaki, Ogita, Oishi, Rump
    2012; Scheme II: Ozaki, Uchino, Imamura, arXiv:2504.08009); everything else is
    array_api_compat's namespace for the library.
    """
    parse(precision)
    if not arrays:
        raise TypeError("namespace() needs at least one array to know the library")
    base = array_api_compat.array_namespace(*arrays)
    return EmulatedNamespace(base, precision)
