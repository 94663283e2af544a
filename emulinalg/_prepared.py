"""``emulinalg.prepare``: an operand used in many products, its one-sided work done once.

A product's work on one operand alone (its float64 parts, the NaN/Inf check, the line
statistics of the scaling, the certificate's line norms, its residue planes for given shifts)
is kept per layout (the matrix the front end makes of it: which axes are contracted, A or B)
in an ``operands.Side``, filled by the first product of that layout. The data is a read-only
snapshot taken by ``prepare``, so nothing kept goes stale when the caller's array changes.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any, Generic, NoReturn, TypeVar

import array_api_compat

from . import _planner
from ._config import get_config
from ._precision import NATIVE, REAL_DTYPE, SCHEMES, Precision, Request, level_for_dtype
from .algorithm.operands import Side

_DTYPES = ("float32", "float64", "complex64", "complex128")

# An array of the caller's library (numpy, cupy, dask, ...): the products return the same type,
# also for an operand prepared from such an array (``Prepared[Array]``).
Array = TypeVar("Array")


class Prepared(Generic[Array]):
    """An operand prepared for many emulated products (made by :func:`emulinalg.prepare`).

    Pass it to :func:`emulinalg.matmul`, :func:`emulinalg.tensordot` or
    :func:`emulinalg.vecdot` (and a namespace's) where the array would go. It holds a read-only
    snapshot of the array (``data``) and, per layout the products use it in, what those
    products compute from it alone; it is never updated from the caller's array.

    Attributes
    ----------
    data : array
        The snapshot (read-only for numpy; a persisted copy of the chunks for dask).
    shape, ndim, dtype
        Those of ``data``: a tuple of int, an int, the array library's dtype.
    precision : str
        The precision it was prepared for (as in a plan).
    backend : str
        The backend its products run on (``numpy``, ``amx``, ``cupy``, ``dask``).
    layouts : int
        The layouts prepared so far (one per distinct use: axes contracted, operand side).
    """

    __slots__ = ("_dtype", "_family", "_lock", "_request", "_sides", "backend", "data")

    def __init__(
        self, data: Array, request: Request, family: str, dtype_name: str, backend_name: str
    ) -> None:
        self.data = data
        self._request = request
        self._family = family
        self._dtype = dtype_name
        self.backend = backend_name
        self._sides: dict[Hashable, Side] = {}
        self._lock = threading.Lock()

    @property
    def _array(self) -> Any:  # ``data`` to the type checker: Array is any library's array type
        return self.data

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def dtype(self) -> Any:
        return self._array.dtype

    @property
    def precision(self) -> str:
        return str(self._request)

    @property
    def layouts(self) -> int:
        return len(self._sides)

    # ``p @ b`` and ``a @ p`` are emulinalg.matmul; numpy (and dask) arrays on the left defer to
    # __rmatmul__ because the operand opts out of numpy's ufuncs.
    __array_ufunc__ = None

    def __matmul__(self, other: Array | Prepared[Array]) -> Array:
        """``emulinalg.matmul(self, other)``."""
        from ._api import matmul

        return matmul(self, other)

    def __rmatmul__(self, other: Array) -> Array:
        """``emulinalg.matmul(other, self)`` (numpy and dask arrays on the left)."""
        from ._api import matmul

        return matmul(other, self)

    def __repr__(self) -> str:
        return (
            f"<emulinalg.Prepared {self._dtype} {tuple(self.shape)} for precision="
            f"{self.precision} on {self.backend}, {self.layouts} layout(s)>"
        )

    def side(self, layout: Hashable) -> Side:
        """The ``operands.Side`` of one layout (a hashable description), made on first use."""
        with self._lock:
            return self._sides.setdefault(layout, Side())

    def check(
        self,
        op: str,
        which: str,
        request: Request,
        dtype_name: str,
        backend_name: str,
        scheme_setting: str,
    ) -> None:
        """Raise ValueError where a product breaks what this operand was prepared for."""

        def refuse(what: str, prepared: object, here: str) -> NoReturn:
            raise ValueError(
                f"{op}: {which} was prepared for {what} {prepared}, this product has {here}; "
                "prepare it again for this product (emulinalg.prepare)"
            )

        if dtype_name != self._dtype:
            refuse("dtype", self._dtype, f"{dtype_name} (the result dtype)")
        resolved = level_for_dtype(REAL_DTYPE[dtype_name]) if request is None else request
        if resolved != self._request:
            refuse("precision", self.precision, f"precision {resolved}")
        if backend_name != self.backend:
            refuse("backend", self.backend, f"backend {backend_name}")
        family = _planner.family(scheme_setting)
        if not isinstance(resolved, SCHEMES) and family != self._family:
            refuse("scheme family", self._family, f"scheme family {family}")


def prepare(x: Array, /, *, precision: Precision = None) -> Prepared[Array]:
    """Prepare an operand used in many products: its one-sided work is done once.

    Parameters
    ----------
    x : array, float32, float64, complex64 or complex128 (numpy, cupy or dask)
        Any shape a product takes. ``prepare`` copies it: later changes to ``x`` do not
        reach the prepared operand (prepare again after changing it).
    precision : as for :func:`emulinalg.matmul`
        The precision of the products it will take part in; None: the config's default, or
        the level of ``x``'s dtype. The scheme family (``config(scheme=...)``) is fixed too.
        A product given the prepared operand without ``precision=`` (and no config default)
        takes this precision.

    Returns
    -------
    Prepared
        Accepted by :func:`emulinalg.matmul`, :func:`emulinalg.tensordot` and
        :func:`emulinalg.vecdot` (and an :func:`emulinalg.namespace`'s) as either operand;
        ``p @ b`` and ``a @ p`` (numpy or dask ``a``) are ``emulinalg.matmul``.
        Results are bit-identical to those of the unprepared array; the plan's notes say what
        the product reused (``prepared x1 (A): reused ...``).

    Raises
    ------
    TypeError
        ``x`` is not an array, its library has no emulation backend, or its dtype is not one
        of the four above.
    ValueError
        ``precision="native"`` (nothing to prepare), or a bad precision. A product raises
        ValueError when it does not match the preparation: another precision, scheme family,
        result dtype or backend (``EMULINALG_AMX`` changed, a numpy operand beside a dask
        one), or, for dask, contraction chunks that make the product rechunk the prepared
        operand along K.

    Notes
    -----
    The first product of each layout (axes contracted, operand side) computes and keeps the
    pieces that depend on the operand alone: its float64 parts, the NaN/Inf check, the line
    statistics of the scaling (pre-shifts, the accurate mode's bound operand and line sums),
    the certificate's line norms, and the residue planes of the last shifts used (Scheme II's
    shifts depend on both operands through the bound GEMM, so they are reused for the lines
    whose shift is unchanged). Backends whose kernels compute the statistics or the whole
    Scheme II product (``amx``, ``cupy``) reuse the parts and the NaN/Inf check only; dask
    reuses the persisted chunks. docs/performance.md lists what each backend reuses.
    """
    from ._api import _precision
    from .backends import for_namespace

    if not array_api_compat.is_array_api_obj(x) or type(x).__module__.startswith("numpy.ma"):
        raise TypeError(f"prepare: x must be an array, got {type(x).__name__}")
    xp = array_api_compat.array_namespace(x)
    backend = for_namespace(xp)
    if backend is None:
        raise TypeError(
            f"prepare: no emulation backend for {xp.__name__} arrays (their products run "
            "natively): nothing to prepare"
        )
    dtype = x.dtype  # type: ignore[union-attr]  # an array has one (is_array_api_obj)
    name = getattr(dtype, "name", str(dtype))
    if name not in _DTYPES:
        raise TypeError(f"prepare: dtype {name} is not emulated; expected one of {_DTYPES}")
    request = _precision(precision)
    if request is None:
        request = level_for_dtype(REAL_DTYPE[name])
    if request == NATIVE:
        raise ValueError("prepare: precision='native' runs no emulation: nothing to prepare")
    backend_name = backend.name
    family = _planner.family(get_config().scheme)
    return Prepared(_snapshot(xp, x), request, family, name, backend_name)


def _snapshot(xp, x):
    """A copy of ``x`` that nothing writes into: read-only for numpy, the chunks copied and
    persisted for dask (its source graph runs once)."""
    if array_api_compat.is_dask_array(x):
        return x.map_blocks(_copy, dtype=x.dtype, meta=x._meta).persist()
    data = xp.asarray(x, copy=True)
    if hasattr(data, "setflags"):
        data.setflags(write=False)
    return data


def _copy(block):
    return block.copy()


def unwrap(x1, x2):
    """``(x1, x2, prepared)``: the arrays of the operands and their ``Prepared`` (or None)."""
    p1 = x1 if isinstance(x1, Prepared) else None
    p2 = x2 if isinstance(x2, Prepared) else None
    return (x1 if p1 is None else p1.data), (x2 if p2 is None else p2.data), (p1, p2)


def sides(prepared, layouts, op, request, dtype_name, backend, a, b):
    """The ``operands.Side`` pair of a product (None where not prepared) after checking each
    prepared operand against it (``Prepared.check``); None when neither is prepared."""
    if prepared == (None, None):
        return None
    backend_name = backend.name if backend else "?"
    cfg = get_config()
    out = []
    for p, which, layout in zip(prepared, ("x1", "x2"), layouts):
        if p is None:
            out.append(None)
            continue
        p.check(op, which, request, dtype_name, backend_name, cfg.scheme)
        out.append(p.side(layout))
    if backend_name == "dask":
        _check_chunks(op, prepared, a, b)
    return tuple(out)


def _check_chunks(op, prepared, a, b):
    """A prepared dask operand keeps its contraction chunks: refuse a product whose alignment
    (``backends.dask.blocks._align``: K follows the operand with fewer K-blocks) would rechunk
    it along K."""
    ka, kb = a.chunks[-1], b.chunks[-2]
    kchunks = ka if len(ka) <= len(kb) else kb
    for p, which, own in zip(prepared, ("x1", "x2"), (ka, kb)):
        if p is not None and own != kchunks:
            raise ValueError(
                f"{op}: {which} was prepared with contraction chunks {own}, and this product "
                f"would rechunk it to {kchunks}; rechunk the other operand to {own} along K, "
                "or prepare it with those chunks"
            )
