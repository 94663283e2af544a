"""Array API semantics of the three products; everything reduces to one batched GEMM.

Shapes, dtypes and errors are handled here once for every backend. Integer and bool products
are exact natively and never emulated.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import threading
from typing import Any, Literal, NamedTuple, overload

import array_api_compat

from . import _cost, _engine, _prepared
from ._config import get_config, one_reading
from ._plan import Plan, clear, last_plan, record
from ._precision import Precision, Request, parse
from ._prepared import Array, Prepared

_KINDS = ("bool", "integral", "real floating", "complex floating")
_EMULATED = ("float32", "float64", "complex64", "complex128")  # float16: at the float32 level


def _dask_operands(x1, x2):
    """A numpy/cupy operand beside a dask array becomes a dask array, as dask.array.matmul
    accepts it (``backends.dask.coerce_operands``)."""
    if "dask.array" not in sys.modules:
        return x1, x2
    libs = {type(x).__module__.split(".")[0] for x in (x1, x2)}
    if not libs <= {"numpy", "cupy", "dask"}:  # other libraries: _namespace's clear error
        return x1, x2
    from .backends import dask as backend

    return backend.coerce_operands(x1, x2)


def _namespace(x1, x2, op):
    return _namespace_of((x1, x2), op)


def _namespace_of(arrays, op):
    """The namespace of ``arrays`` (one or more), after checking they are arrays of one library
    with a supported dtype; errors name ``op``."""
    for x in arrays:
        if isinstance(x, _prepared.Prepared):
            raise TypeError(
                f"{op}: prepared operands are taken by matmul, tensordot and vecdot; pass "
                "its .data here"
            )
        if not array_api_compat.is_array_api_obj(x):
            raise TypeError(f"{op}: operands must be arrays, got {type(x).__name__}")
        if type(x).__module__.startswith("numpy.ma"):  # the mask would be silently dropped
            raise TypeError(f"{op}: masked arrays are not supported; pass x.filled(...)")
    try:
        xp = array_api_compat.array_namespace(*arrays)
    except TypeError as e:
        raise TypeError(f"{op}: operands come from different array libraries ({e})") from None
    for x in arrays:
        try:
            ok = _kind_in(xp, x.dtype, "biufc", _KINDS)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise TypeError(
                f"{op}: unsupported dtype {x.dtype}; "
                "expected bool, integer, real floating or complex floating"
            )
    return xp


def _precision(precision: object, prepared: tuple = (None, None)) -> Request:
    """The product's request: ``precision=``, else the config's, else the precision a prepared
    operand was made for (the first's), else None (the dtype's level)."""
    if precision is None and get_config().precision is None:
        made = [p._request for p in prepared if p is not None]
        if made:
            return made[0]
    return parse(get_config().precision if precision is None else precision)


def _backend(xp):
    from .backends import for_namespace

    return for_namespace(xp)


def _gemm(xp, a, b, request, op, prepared=(None, None), layouts=(None, None)):
    """Batched a (..., m, k) @ b (..., k, n) for floating dtypes with equal batch shapes.
    ``prepared``: the operands' ``Prepared`` (or None), ``layouts`` how a and b were made from
    them (``Prepared.side``'s key)."""
    dt = a.dtype
    compute = dt
    name = dt.name if hasattr(dt, "name") else str(dt)  # numpy dtypes (numpy, dask) and cupy's
    backend = _backend(xp)
    sides = _prepared.sides(prepared, layouts, op, request, name, backend, a, b)
    if name == "float16":  # computed at the float32 level, rounded like native
        compute = xp.float32
        a, b = xp.astype(a, compute), xp.astype(b, compute)
    elif name not in _EMULATED:  # e.g. numpy's longdouble: the library's own product, visibly
        record(
            Plan(
                backend=getattr(xp, "__name__", "?").split(".")[-1],
                precision=str(request or "native"),
                fallback=f"dtype {name}: no emulation for this dtype; native product",
                notes=[op],
            )
        )
        return xp.matmul(a, b)
    # A backend that schedules the product itself (dask: a graph of block products) provides
    # its own ``matmul``; the others run the engine over their integer GEMMs.
    run = getattr(backend, "matmul", None)
    if run is None:
        c, plan = _engine.matmul(xp, backend, a, b, request, get_config(), sides=sides)
    else:
        c, plan = run(xp, backend, a, b, request, get_config())
        for p, which in zip(prepared, ("x1", "x2")):
            if p is not None:  # the graph reads the persisted chunks; its tasks run per product
                plan.notes.append(f"prepared {which}: reused its persisted chunks")
    plan.notes.insert(0, op)
    record(plan)
    if compute == dt:
        return c
    with backend.quiet() if backend else contextlib.nullcontext():  # overflow to inf, as native
        return xp.astype(c, dt)


def _native(xp, op, result, request, why="integer/bool inputs: exact natively"):
    result = xp.asarray(result)  # a 0-D array, not a numpy scalar, as for the floating path
    record(
        Plan(
            backend=getattr(xp, "__name__", "?").split(".")[-1],
            precision=str(request or "native"),
            notes=[op, why],
        )
    )
    return result


def _broadcast_batch(xp, a, b, op):
    if a.shape[:-2] == b.shape[:-2]:  # nothing to broadcast (dask's query planning lacks it)
        return a, b
    try:
        batch = tuple(_broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise ValueError(
            f"{op}: batch dimensions {a.shape[:-2]} and {b.shape[:-2]} do not broadcast"
        ) from None
    return xp.broadcast_to(a, batch + a.shape[-2:]), xp.broadcast_to(b, batch + b.shape[-2:])


def _broadcast_shapes(s1, s2):
    n = max(len(s1), len(s2))
    s1 = (1,) * (n - len(s1)) + tuple(s1)
    s2 = (1,) * (n - len(s2)) + tuple(s2)
    out = []
    for d1, d2 in zip(s1, s2):
        if d1 != d2 and 1 not in (d1, d2):
            raise ValueError
        out.append(d2 if d1 == 1 else d1)
    return out


# numpy's limit on array dimensions in some of the functions the products use (numpy 1.x's
# NPY_MAXDIMS); ``numpy.vecdot`` itself takes operands of 32 dimensions.
MAX_DIMS = 32


def _explained(out, explain):
    """``explain=True``: ``(result, plan)``, the plan being what :func:`emulinalg.last_plan`
    reports for this call."""
    return (out, last_plan()) if explain else out


def _floating(xp, dt):
    return _kind_in(xp, dt, "fc", ("real floating", "complex floating"))


def _kind_in(xp, dt, kinds, names):
    """``xp.isdtype(dt, names)`` from the dtype's one-letter kind where it has one (numpy's and
    cupy's dtypes: ``kinds``, e.g. "fc"), which is a few times faster; dtypes numpy sees as
    void (kind "V": structured, or another library's bfloat16 and float8) ask ``xp``."""
    kind = getattr(dt, "kind", None)
    if isinstance(kind, str) and len(kind) == 1 and kind != "V":
        return kind in kinds
    return xp.isdtype(dt, names)


@overload
def matmul(
    x1: Array | Prepared[Array],
    x2: Array | Prepared[Array],
    /,
    *,
    precision: Precision = ...,
    explain: Literal[False] = ...,
) -> Array: ...
@overload
def matmul(
    x1: Array | Prepared[Array],
    x2: Array | Prepared[Array],
    /,
    *,
    precision: Precision = ...,
    explain: Literal[True],
) -> tuple[Array, Plan]: ...
@one_reading
def matmul(
    x1: Any, x2: Any, /, *, precision: Precision = None, explain: bool = False
) -> Any:  # the overloads above are the signature callers see
    """Matrix product with Array API ``matmul`` semantics, emulated at ``precision``.

    Parameters
    ----------
    x1 : array, shape (..., m, k) or (k,)
    x2 : array, shape (..., k, n) or (k,)
        Arrays of one library (numpy: CPU, cupy: GPU; others run natively). A 1-D operand is
        promoted to a matrix and the added axis removed from the result; batch dimensions
        broadcast.
    precision : None, "float64", "float32", "native", int, OzakiI, OzakiII, BF16x3 or BF16xN
        None: the level of the inputs' dtype (or ``emulinalg.config(precision=...)``).
        "float64"/"float32": error no worse than that native GEMM (certified per entry against
        ``|A||B|``; entries that cannot be certified are computed natively, as the plan reports).
        int: that many bits relative to ``|A||B|``. OzakiI/OzakiII/BF16x3/BF16xN: that exact
        scheme. "native": the library's own product. (The type: ``emulinalg._precision.Precision``.)
    explain : bool
        True: return ``(result, plan)``, the :class:`emulinalg.Plan` of this call (scheme,
        counts, the cost model's prediction, native fallbacks and why).

    Returns
    -------
    array, shape (..., m, n)
        Same dtype and library as ``x1 @ x2`` would give.

    Raises
    ------
    ValueError
        0-D operands, mismatched contraction sizes, non-broadcastable batch dimensions, bad
        precision values.
    TypeError
        Non-arrays, arrays of different libraries, unsupported dtypes, bad precision types.

    Notes
    -----
    Scheme I: Ozaki, Ogita, Oishi, Rump 2012; Ootomo, Ozaki, Yokota 2024. Scheme II: Ozaki,
    Uchino, Imamura, arXiv:2504.08009; Uchino et al., SC-W 2025. ``emulinalg.last_plan()``
    reports the scheme, counts and any native fallback.
    """
    clear()  # a call that raises leaves no plan behind, not the previous call's
    return _explained(_matmul(x1, x2, precision), explain)


# The performant verdict "native" of a plain 2-D matmul, kept per call signature: a repeated
# call that the cost model sent to the native product skips the front end and the planner (the
# host time they add to a native product of a few milliseconds: issue #24 allows 3 %). The
# verdict is the planner's, made by the first call of that signature; a different cost model in
# force (``set_cost_model``, another GPU's calibration) makes it again.
_VERDICTS: dict = {}
_VERDICTS_MAX = 256
_VERDICTS_LOCK = threading.Lock()


class _Verdict(NamedTuple):
    plan: Plan  # the first call's plan, copied into each later call's
    backend: Any  # the backend module that ran the native product
    model: Any  # the cost model it decided with


def _signature(x1, x2, precision):
    """The memo key of a matmul call that may reuse a native verdict, or None: two arrays of
    exactly numpy's or cupy's array type (no subclass, no prepared or dask operand), 2-D, of
    one emulated dtype, with the config this call reads."""
    t = type(x1)
    if (t is not type(x2) or t.__name__ != "ndarray"
            or t.__module__.partition(".")[0] not in ("numpy", "cupy")):  # fmt: skip
        return None
    # (numpy's dtype characters of float32, float64, complex64, complex128: _EMULATED)
    if x1.ndim != 2 or x2.ndim != 2 or x1.dtype != x2.dtype or x1.dtype.char not in "fdFD":
        return None
    # cupy: the current device too (the plan's note on the fused kernels is the device's own)
    device = sys.modules["cupy"].cuda.runtime.getDevice() if t.__module__ != "numpy" else None
    try:  # the precision's type too: True == 1, and only one of them is a valid precision
        key = (t, x1.dtype, x1.shape, x2.shape, type(precision), precision, get_config(), device)
        hash(key)
    except TypeError:  # an unhashable precision value: no memo
        return None
    return key


def _reused_verdict(key, x1, x2, flops):
    """The native product of a call whose signature ``key`` had the native verdict under the
    cost model still in force (``flops``: the product's, as ``_flops`` gives them), its plan
    recorded; None otherwise."""
    got = _VERDICTS.get(key)
    if got is None or _cost.get_cost_model(got.backend.name, flops) is not got.model:
        return None
    c = got.backend.native_matmul(x1, x2)  # a product that raises leaves no plan behind
    record(_copied(got.plan))
    return c


def _copied(p):
    """A plan with its own notes (each call's plan is the caller's to change)."""
    return Plan(backend=p.backend, precision=p.precision, scheme=p.scheme, gemms=p.gemms,
                k_block=p.k_block, fallback=p.fallback, native_entries=p.native_entries,
                notes=list(p.notes), shape=p.shape)  # fmt: skip


def _flops(x1, x2):
    """2 m n k (x4 complex) of a 2-D product: what ``_cost.get_cost_model`` asks of it."""
    return _cost._flops(x1.dtype.name, x1.shape[0], x2.shape[1], x1.shape[1], 1)


def _keep_verdict(key, backend, model, flops):
    """Keep the native verdict of the call just made (signature ``key``) where the cost model
    gave it from the shapes alone (before any statistics) and ``model``, the one in force when
    the call began, still is (another thread may have set another during the call)."""
    plan = last_plan()
    if (plan is None or not plan._shape_verdict
            or _cost.get_cost_model(backend.name, flops) is not model):  # fmt: skip
        return
    with _VERDICTS_LOCK:
        if len(_VERDICTS) >= _VERDICTS_MAX:
            _VERDICTS.clear()
        _VERDICTS[key] = _Verdict(_copied(plan), backend, model)


def _matmul(x1, x2, precision):
    key = _signature(x1, x2, precision)
    if key is None:
        return _matmul_checked(x1, x2, precision)
    flops = _flops(x1, x2)
    got = _reused_verdict(key, x1, x2, flops)
    if got is not None:
        return got
    # numpy's and cupy's arrays (``_signature``) always have a backend: numpy, amx or cupy
    backend = _backend(array_api_compat.array_namespace(x1))
    model = _cost.get_cost_model(backend.name, flops)
    c = _matmul_checked(x1, x2, precision)
    if model is not None:
        _keep_verdict(key, backend, model, flops)
    return c


def _matmul_checked(x1, x2, precision):
    x1, x2, prepared = _prepared.unwrap(x1, x2)
    x1, x2 = _dask_operands(x1, x2)
    xp = _namespace(x1, x2, "matmul")
    request = _precision(precision, prepared)
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError(
            "matmul: operands must have at least one dimension (0-D arrays are not matrices)"
        )
    a = xp.expand_dims(x1, axis=0) if x1.ndim == 1 else x1
    b = xp.expand_dims(x2, axis=-1) if x2.ndim == 1 else x2
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"matmul: contraction dimensions differ: x1 has {a.shape[-1]} (shape {x1.shape}), "
            f"x2 has {b.shape[-2]} (shape {x2.shape})"
        )
    a, b = _broadcast_batch(xp, a, b, "matmul")
    dt = xp.result_type(x1.dtype, x2.dtype)
    if not _floating(xp, dt):
        return _native(xp, "matmul", xp.matmul(x1, x2), request)
    layouts = (("matmul", "A", a.shape), ("matmul", "B", b.shape))
    a, b = xp.astype(a, dt, copy=False), xp.astype(b, dt, copy=False)
    c = _gemm(xp, a, b, request, "matmul", prepared, layouts)
    if x2.ndim == 1:
        c = c[..., 0]
    if x1.ndim == 1:
        c = c[..., 0, :] if x2.ndim > 1 else c[..., 0]
    return c


def _normalize_axes(seq, ndim, which):
    try:
        seq = (
            [operator.index(seq)]
            if not hasattr(seq, "__len__")
            else [operator.index(a) for a in seq]
        )
    except TypeError:
        raise TypeError(f"tensordot: axes of {which} must be integers, got {seq!r}") from None
    out = []
    for a in seq:
        if not -ndim <= a < ndim:
            raise ValueError(
                f"tensordot: axis {a} is out of range for {which} with {ndim} dimensions"
            )
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"tensordot: repeated axis in {which}: {seq}")
    return out


@overload
def tensordot(
    x1: Array | Prepared[Array],
    x2: Array | Prepared[Array],
    /,
    *,
    axes: int | tuple = ...,
    precision: Precision = ...,
    explain: Literal[False] = ...,
) -> Array: ...
@overload
def tensordot(
    x1: Array | Prepared[Array],
    x2: Array | Prepared[Array],
    /,
    *,
    axes: int | tuple = ...,
    precision: Precision = ...,
    explain: Literal[True],
) -> tuple[Array, Plan]: ...
@one_reading
def tensordot(
    x1: Any,
    x2: Any,
    /,
    *,
    axes: int | tuple = 2,
    precision: Precision = None,
    explain: bool = False,
) -> Any:
    """Tensor contraction with Array API ``tensordot`` semantics, emulated at ``precision``.

    Parameters
    ----------
    x1, x2 : arrays of one library
    axes : int or (sequence of int, sequence of int)
        An int N contracts the last N axes of x1 with the first N of x2; a pair lists the axes
        to contract (negative axes allowed). Contracted axes must have equal sizes (no
        broadcasting).
    precision : see :func:`matmul`
    explain : bool
        True: return ``(result, plan)``, the :class:`emulinalg.Plan` of this call (scheme,
        counts, the cost model's prediction, native fallbacks and why).

    Returns
    -------
    array
        Shape: the non-contracted axes of x1, then those of x2, in order; dtype as native.

    Raises
    ------
    ValueError
        Negative or too large N, axes out of range, repeated axes, unequal numbers of axes,
        contracted sizes that differ.
    TypeError
        As for :func:`matmul`, and non-integer axes.

    Notes
    -----
    The contraction is reshaped into one GEMM and computed like :func:`matmul` (Ozaki Scheme I
    or II; see there for the papers).
    """
    clear()  # a call that raises leaves no plan behind, not the previous call's
    return _explained(_tensordot(x1, x2, axes, precision), explain)


def _tensordot(x1, x2, axes, precision):
    x1, x2, prepared = _prepared.unwrap(x1, x2)
    x1, x2 = _dask_operands(x1, x2)
    xp = _namespace(x1, x2, "tensordot")
    request = _precision(precision, prepared)
    if isinstance(axes, bool):
        raise TypeError("tensordot: axes must be an int or a pair of sequences of ints")
    try:
        nax = operator.index(axes)
    except TypeError:
        nax = None
    if nax is not None:
        if nax < 0:
            raise ValueError(f"tensordot: axes must be non-negative, got {nax}")
        if nax > x1.ndim or nax > x2.ndim:
            raise ValueError(
                f"tensordot: cannot contract {nax} axes of arrays with "
                f"{x1.ndim} and {x2.ndim} dimensions"
            )
        ax1, ax2 = list(range(x1.ndim - nax, x1.ndim)), list(range(nax))
    else:
        try:
            first, second = axes
        except (TypeError, ValueError):
            raise TypeError(
                "tensordot: axes must be an int or a pair of sequences of ints"
            ) from None
        ax1 = _normalize_axes(first, x1.ndim, "x1")
        ax2 = _normalize_axes(second, x2.ndim, "x2")
        if len(ax1) != len(ax2):
            raise ValueError(f"tensordot: {len(ax1)} axes of x1 paired with {len(ax2)} axes of x2")
    for p, q in zip(ax1, ax2):
        if x1.shape[p] != x2.shape[q]:
            raise ValueError(
                f"tensordot: contracted axis {p} of x1 has size {x1.shape[p]} but axis {q} of x2 "
                f"has size {x2.shape[q]} (contracted axes are not broadcast)"
            )
    free1 = [i for i in range(x1.ndim) if i not in ax1]
    free2 = [i for i in range(x2.ndim) if i not in ax2]
    out_shape = tuple(x1.shape[i] for i in free1) + tuple(x2.shape[i] for i in free2)
    dt = xp.result_type(x1.dtype, x2.dtype)
    if not _floating(xp, dt):
        return _native(xp, "tensordot", xp.tensordot(x1, x2, axes=(ax1, ax2)), request)
    M = _prod(x1.shape[i] for i in free1)
    N = _prod(x2.shape[i] for i in free2)
    K = _prod(x1.shape[i] for i in ax1)
    a = xp.reshape(xp.permute_dims(xp.astype(x1, dt), tuple(free1 + ax1)), (M, K))
    b = xp.reshape(xp.permute_dims(xp.astype(x2, dt), tuple(ax2 + free2)), (K, N))
    layouts = (("tensordot", "A", tuple(free1 + ax1), (M, K)),
               ("tensordot", "B", tuple(ax2 + free2), (K, N)))  # fmt: skip
    return xp.reshape(_gemm(xp, a, b, request, "tensordot", prepared, layouts), out_shape)


def _prod(it):
    p = 1
    for v in it:
        p *= v
    return p


@overload
def vecdot(
    x1: Array | Prepared[Array],
    x2: Array | Prepared[Array],
    /,
    *,
    axis: int = ...,
    precision: Precision = ...,
    explain: Literal[False] = ...,
) -> Array: ...
@overload
def vecdot(
    x1: Array | Prepared[Array],
    x2: Array | Prepared[Array],
    /,
    *,
    axis: int = ...,
    precision: Precision = ...,
    explain: Literal[True],
) -> tuple[Array, Plan]: ...
@one_reading
def vecdot(
    x1: Any, x2: Any, /, *, axis: int = -1, precision: Precision = None, explain: bool = False
) -> Any:
    """Vector dot product over ``axis`` with Array API ``vecdot`` semantics (x1 is conjugated).

    Parameters
    ----------
    x1, x2 : arrays of one library, at least 1-D
        Non-contracted dimensions broadcast; the contracted axis must have equal sizes.
    axis : int
        Negative, counted from the end of both operands (a non-negative axis is accepted when
        both operands have the same number of dimensions).
    precision : see :func:`matmul`
    explain : bool
        True: return ``(result, plan)``, the :class:`emulinalg.Plan` of this call (scheme,
        counts, the cost model's prediction, native fallbacks and why).

    Returns
    -------
    array
        The broadcast shape without ``axis``; dtype as native.

    Raises
    ------
    ValueError
        0-D operands, an axis out of range, unequal contracted sizes, non-broadcastable shapes.
    TypeError
        As for :func:`matmul`.

    Notes
    -----
    Computed as a batch of 1 x k by k x 1 GEMMs, like :func:`matmul` (Ozaki Scheme I or II;
    see there for the papers).
    """
    clear()  # a call that raises leaves no plan behind, not the previous call's
    return _explained(_vecdot(x1, x2, axis, precision), explain)


def _vecdot(x1, x2, axis, precision):
    x1, x2, prepared = _prepared.unwrap(x1, x2)
    x1, x2 = _dask_operands(x1, x2)
    xp = _namespace(x1, x2, "vecdot")
    request = _precision(precision, prepared)
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("vecdot: operands must have at least one dimension")
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"vecdot: axis must be an int, got {axis!r}") from None
    if axis >= 0:
        if x1.ndim != x2.ndim or axis >= x1.ndim:
            raise ValueError(
                f"vecdot: axis {axis} must be negative (operands have {x1.ndim} and {x2.ndim} dims)"
            )
        axis -= x1.ndim
    if axis < -min(x1.ndim, x2.ndim):
        raise ValueError(
            f"vecdot: axis {axis} out of range for operands with {x1.ndim} and {x2.ndim} dims"
        )
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(
            f"vecdot: contracted sizes differ: {x1.shape[axis]} and {x2.shape[axis]} "
            "(the contracted axis is not broadcast)"
        )
    a = xp.moveaxis(x1, axis, -1)
    b = xp.moveaxis(x2, axis, -1)
    try:
        batch = tuple(_broadcast_shapes(a.shape[:-1], b.shape[:-1]))
    except ValueError:
        raise ValueError(f"vecdot: shapes {x1.shape} and {x2.shape} do not broadcast") from None
    dt = xp.result_type(x1.dtype, x2.dtype)
    if not _floating(xp, dt):
        return _native(xp, "vecdot", xp.vecdot(x1, x2, axis=axis), request)
    k = a.shape[-1]
    a = xp.broadcast_to(xp.astype(a, dt), batch + (k,))
    b = xp.broadcast_to(xp.astype(b, dt), batch + (k,))
    if xp.isdtype(dt, "complex floating"):
        a = xp.conj(a)
    if len(batch) > MAX_DIMS - 2:  # the (..., 1, k) @ (..., k, 1) products need two more axes
        a, b = xp.reshape(a, (-1, k)), xp.reshape(b, (-1, k))
    a, b = xp.expand_dims(a, axis=-2), xp.expand_dims(b, axis=-1)
    layouts = (("vecdot", "A", axis, a.shape), ("vecdot", "B", axis, b.shape))
    c = _gemm(xp, a, b, request, "vecdot", prepared, layouts)
    return xp.reshape(c[..., 0, 0], batch)
