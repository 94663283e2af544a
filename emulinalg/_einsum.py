"""``einsum`` and ``dot``: contractions written outside the Array API's three products, run as
pairwise batched GEMMs on the same engine.

Each pairwise contraction becomes one ``(batch..., M, K) @ (batch..., K, N)`` product computed
exactly as :func:`emulinalg.matmul` computes it: batch labels are those of both operands still
needed afterwards, summed labels those of both operands needed nowhere else, free labels those of
one operand. What involves no product (diagonals, sums over a label of one operand only, a lone
operand) is the library's own ``einsum``.
"""

from __future__ import annotations

import operator
import string
from typing import Any, Literal, overload

from ._api import (
    Array,
    _broadcast_batch,
    _dask_operands,
    _floating,
    _gemm,
    _namespace,
    _namespace_of,
    _native,
    _precision,
    _prod,
)
from ._config import one_reading
from ._plan import Plan, clear, last_plan
from ._precision import Precision

_LETTERS = string.ascii_letters  # numpy's einsum labels
_ORDERS = ("greedy", "optimal")  # numpy.einsum_path's named orders


@overload
def einsum(
    subscripts: str,
    /,
    *operands: Array,
    precision: Precision = ...,
    explain: Literal[False] = ...,
    optimize: bool | str | list = ...,
) -> Array: ...
@overload
def einsum(
    subscripts: str,
    /,
    *operands: Array,
    precision: Precision = ...,
    explain: Literal[True],
    optimize: bool | str | list = ...,
) -> tuple[Array, list[Plan]]: ...
@one_reading
def einsum(
    subscripts: str,
    /,
    *operands: Any,
    precision: Precision = None,
    explain: bool = False,
    optimize: bool | str | list = "greedy",
) -> Any:  # the overloads above are the signature callers see
    """Einstein summation with numpy's ``einsum`` semantics, its products emulated at ``precision``.

    Parameters
    ----------
    subscripts : str
        numpy's subscripts: comma-separated labels (letters) per operand, an optional ``->``
        and output labels (implicit output: the labels that appear once, in alphabetical order,
        after the ``...`` dimensions). ``...`` stands for the dimensions not labelled; they
        broadcast as in numpy. A label repeated within one operand takes its diagonal; a label
        of size 1 broadcasts against the same label of another operand. (numpy's interleaved
        ``einsum(a, [0, 1], b, [1, 2])`` form is not accepted.)
    *operands : arrays of one library (numpy, cupy, dask)
    precision : see :func:`emulinalg.matmul`
        The level of every pairwise product.
    explain : bool
        True: return ``(result, plans)``, the :class:`emulinalg.Plan` of each pairwise product in
        the order they ran (the last is :func:`emulinalg.last_plan`); one native plan where no
        product ran.
    optimize : False, True, "greedy", "optimal" or a path ``["einsum_path", (i, j), ...]``
        The order of the pairwise products for three or more operands: False left to right
        (``((x0 x1) x2) ...``); otherwise ``numpy.einsum_path``'s order for that value (True
        is "greedy", the default); a path as ``numpy.einsum_path`` returns it is taken as is.

    Returns
    -------
    array
        numpy's ``einsum`` shape; dtype: the operands' promoted dtype (a 0-D array, not a
        scalar, for an empty output).

    Raises
    ------
    ValueError
        Bad subscripts (a character other than a letter, ``...``, ``,``, ``->``; a count of
        labels that does not match an operand's dimensions; an output label that is repeated or
        in no input; a missing ``...`` in an explicit output), a number of operands other than
        the subscripts name, sizes of one label that differ and are not 1 (within one operand:
        that differ at all), a bad ``optimize`` or bad precision values.
    TypeError
        Subscripts that are not a string, non-arrays, arrays of different libraries,
        unsupported dtypes, bad precision types.

    Notes
    -----
    Each pairwise contraction ``x, y`` is ``matmul(x', y')`` with ``x'`` the permutation
    (batch, free, summed labels, each group in ``x``'s order) reshaped to
    ``(batch..., M, K)`` and ``y'`` (batch, summed, free in ``y``'s order) reshaped to
    ``(batch..., K, N)``, the lower-numbered operand of the pair first: the bits equal that
    explicit :func:`emulinalg.matmul` call (Ozaki Scheme I: Ozaki, Ogita, Oishi, Rump 2012;
    Scheme II: Ozaki, Uchino, Imamura, arXiv:2504.08009). Diagonals and sums over a label of
    one operand only are taken natively first (no products); a single operand, and integer or
    bool operands, run natively (exact), as for :func:`emulinalg.matmul`.
    """
    clear()  # a call that raises leaves no plan behind, not the previous call's
    out, plans = _einsum(subscripts, operands, precision, optimize)
    return (out, plans) if explain else out


@overload
def dot(
    a: Array, b: Array, /, *, precision: Precision = ..., explain: Literal[False] = ...
) -> Array: ...
@overload
def dot(
    a: Array, b: Array, /, *, precision: Precision = ..., explain: Literal[True]
) -> tuple[Array, Plan]: ...
@one_reading
def dot(
    a: Any, b: Any, /, *, precision: Precision = None, explain: bool = False
) -> Any:  # the overloads above are the signature callers see
    """numpy's ``dot``, its product emulated at ``precision``.

    Parameters
    ----------
    a : array, shape (..., k) or 0-D
    b : array, shape (k,), (..., k, n) or 0-D
        Arrays of one library (numpy, cupy, dask). The last axis of ``a`` is contracted with
        the second-to-last of ``b`` (its only one when 1-D); the other axes are not broadcast:
        ``dot(a, b)[i, j, k, m] = sum(a[i, j, :] * b[k, :, m])``.
    precision : see :func:`emulinalg.matmul`
    explain : bool
        True: return ``(result, plan)``, the :class:`emulinalg.Plan` of this call.

    Returns
    -------
    array, shape a.shape[:-1] + b.shape[:-2] + b.shape[-1:]
        (``a.shape[:-1]`` for a 1-D ``b``; ``a * b`` for a 0-D operand.) dtype: the operands'
        promoted dtype; a 0-D array, not a scalar, for two 1-D operands.

    Raises
    ------
    ValueError
        Contracted sizes that differ (they are not broadcast), bad precision values.
    TypeError
        Non-arrays, arrays of different libraries, unsupported dtypes, bad precision types.

    Notes
    -----
    Computed as :func:`emulinalg.tensordot` ``(a, b, axes=([-1], [max(b.ndim - 2, 0)]))`` is,
    bit for bit: one GEMM, like :func:`emulinalg.matmul` (Ozaki Scheme I: Ozaki, Ogita, Oishi,
    Rump 2012; Scheme II: Ozaki, Uchino, Imamura, arXiv:2504.08009). A 0-D operand is a scalar
    multiple and runs natively, as do integer and bool operands (exact).
    """
    clear()  # a call that raises leaves no plan behind, not the previous call's
    out = _dot(a, b, precision)
    return (out, last_plan()) if explain else out


def _dot(a, b, precision):
    a, b = _dask_operands(a, b)
    xp = _namespace(a, b, "dot")
    request = _precision(precision)
    if a.ndim == 0 or b.ndim == 0:
        return _native(xp, "dot", xp.multiply(a, b), request, "0-D operand: a scalar multiple")
    kb = max(b.ndim - 2, 0)
    if a.shape[-1] != b.shape[kb]:
        raise ValueError(
            f"dot: shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (dim {a.ndim - 1}) "
            f"!= {b.shape[kb]} (dim {kb})"
        )
    dt = xp.result_type(a.dtype, b.dtype)
    if not _floating(xp, dt):
        return _native(xp, "dot", xp.tensordot(a, b, axes=([a.ndim - 1], [kb])), request)
    la = list(range(a.ndim))  # a's axes 0..; b's -1, -2, ..., its contracted axis a's last
    lb = [la[-1] if j == kb else -1 - j for j in range(b.ndim)]
    keep = set(la[:-1]) | set(lb[:kb] + lb[kb + 1 :])
    a, b = xp.astype(a, dt, copy=False), xp.astype(b, dt, copy=False)
    return _contract(xp, a, la, b, lb, keep, request, "dot")[0]


def _einsum(subscripts, operands, precision, optimize):
    if not isinstance(subscripts, str):
        raise TypeError(
            f"einsum: subscripts must be a string such as 'ij,jk->ik', got "
            f"{type(subscripts).__name__} (numpy's interleaved form is not accepted)"
        )
    _check_optimize(optimize)
    if not operands:
        raise ValueError("einsum: no operands given")
    operands = _dask_all(operands)
    xp = _namespace_of(operands, "einsum")
    request = _precision(precision)
    shapes = [tuple(x.shape) for x in operands]
    inputs, output = _parse(subscripts, shapes)
    dt = xp.result_type(*(x.dtype for x in operands))
    if len(operands) == 1 or not _floating(xp, dt):
        out = xp.einsum(subscripts, *operands)
        if len(operands) == 1:
            out = _native(xp, "einsum", out, request, "one operand: no product")
        else:
            out = _native(xp, "einsum", out, request)
        return out, [last_plan()]
    ops = [xp.astype(x, dt, copy=False) for x in operands]
    labels = [list(lx) for lx in inputs]
    plans, total = [], len(ops) - 1
    for group in _path(subscripts, shapes, optimize):
        picked = _step(group, len(ops))
        items = [(ops[i], labels[i]) for i in picked]
        for i in reversed(picked):
            del ops[i], labels[i]
        rest = set(output).union(*labels)
        x, lx = items[0]
        for j, (y, ly) in enumerate(items[1:], 2):
            keep = rest.union(*(lz for _, lz in items[j:]))
            op = f"einsum: product {len(plans) + 1} of {total}"
            x, lx = _contract(xp, x, lx, y, ly, keep, request, op)
            plans.append(last_plan())
        ops.append(x)
        labels.append(lx)
    if len(ops) != 1:
        raise ValueError(f"einsum: the contraction path leaves {len(ops)} operands, not one")
    x, lx = _reduce(xp, ops[0], labels[0], set(output))  # a path of single-operand steps only
    if lx != output:
        x = xp.permute_dims(x, tuple(lx.index(label) for label in output))
    return x, plans


def _step(group, n):
    """A path step's distinct positions among ``n`` operands, in increasing order."""
    try:
        picked = sorted(operator.index(i) for i in group)
    except TypeError:
        picked = []
    if not picked or len(set(picked)) < len(picked) or not 0 <= picked[0] <= picked[-1] < n:
        raise ValueError(f"einsum: bad contraction path step {group!r} for {n} operands")
    return picked


def _contract(xp, a, la, b, lb, keep, request, op):
    """``a`` (labels ``la``) times ``b`` (``lb``), summing the labels they share that are not in
    ``keep``: the result and its labels (batch, free of a, free of b)."""
    a, la = _reduce(xp, a, la, keep | set(lb))
    b, lb = _reduce(xp, b, lb, keep | set(la))
    sa, sb = dict(zip(la, a.shape)), dict(zip(lb, b.shape))
    batch = [label for label in la if label in sb and label in keep]
    summed = [label for label in la if label in sb and label not in keep]
    free_a = [label for label in la if label not in sb]
    free_b = [label for label in lb if label not in sa]
    a = _arrange(xp, a, la, batch + free_a + summed)
    b = _arrange(xp, b, lb, batch + summed + free_b)
    ks = tuple(sb[label] if sa[label] == 1 else sa[label] for label in summed)  # 1 broadcasts
    fa, fb = tuple(sa[label] for label in free_a), tuple(sb[label] for label in free_b)
    nb = len(batch)
    if a.shape[nb + len(fa) :] != ks:
        a = xp.broadcast_to(a, a.shape[:nb] + fa + ks)
    if b.shape[nb : nb + len(ks)] != ks:
        b = xp.broadcast_to(b, b.shape[:nb] + ks + fb)
    K = _prod(ks)
    a = xp.reshape(a, a.shape[:nb] + (_prod(fa), K))
    b = xp.reshape(b, b.shape[:nb] + (K, _prod(fb)))
    a, b = _broadcast_batch(xp, a, b, op)
    c = _gemm(xp, a, b, request, op)
    return xp.reshape(c, c.shape[:nb] + fa + fb), batch + free_a + free_b


def _arrange(xp, x, labels, order):
    return x if labels == order else xp.permute_dims(x, tuple(labels.index(v) for v in order))


def _reduce(xp, x, labels, keep):
    """Diagonals of repeated labels and sums over labels not in ``keep``, natively (no
    products): ``x`` and its labels, unique and in first-appearance order."""
    new = [v for v in dict.fromkeys(labels) if v in keep]
    if new == labels:
        return x, labels
    letter = {v: _LETTERS[i] for i, v in enumerate(dict.fromkeys(labels))}
    spec = "".join(letter[v] for v in labels) + "->" + "".join(letter[v] for v in new)
    return xp.einsum(spec, x), new


def _dask_all(operands):
    """numpy/cupy operands beside a dask operand become dask arrays, as for ``matmul``."""
    ops = list(operands)
    for _ in range(2):  # the first pass makes ops[0] dask if any is; the second the others
        for i in range(1, len(ops)):
            ops[0], ops[i] = _dask_operands(ops[0], ops[i])
    return ops


def _check_optimize(optimize):
    if isinstance(optimize, bool) or (isinstance(optimize, str) and optimize in _ORDERS):
        return
    if isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
        return
    raise ValueError(
        "einsum: optimize must be False, True, 'greedy', 'optimal' or a path "
        f"['einsum_path', (i, j), ...], got {optimize!r}"
    )


def _path(subscripts, shapes, optimize):
    """The contraction steps in ``numpy.einsum_path``'s form (positions in the list of
    operands, each step's result appended at its end)."""
    n = len(shapes)
    if n <= 2:
        return [tuple(range(n))]
    if optimize is False:
        return [(0, 1)] * (n - 1)
    if isinstance(optimize, (list, tuple)):
        return list(optimize[1:])
    import numpy

    # shapes only: read-only zero-stride views, whatever the operands' library
    dummies = [numpy.broadcast_to(numpy.empty(()), s) for s in shapes]
    return list(numpy.einsum_path(subscripts, *dummies, optimize=optimize)[0][1:])


def _parse(subscripts, shapes):
    """Labels of each operand and of the output. Letters label themselves; the dimensions an
    ellipsis stands for are labelled by their position from the right (0: the last), so that
    they broadcast as numpy's einsum broadcasts them. Checks the sizes."""
    spec = subscripts.replace(" ", "")
    lhs, arrow, rhs = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(
            f"einsum: subscripts {subscripts!r} name {len(terms)} operand(s), {len(shapes)} given"
        )
    inputs, widths = [], []
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        head, dots, tail = _split(term, f"operand {i}")
        named = len(head) + len(tail)
        if named > len(shape) or (not dots and named != len(shape)):
            raise ValueError(
                f"einsum: subscripts {term!r} of operand {i} name {named} dimensions, "
                f"the operand has {len(shape)}" + ("" if dots else " (no '...' for the others)")
            )
        width = len(shape) - named
        widths.append(width)
        inputs.append(head + list(range(width - 1, -1, -1)) + tail)
    ellipsis = list(range(max(widths) - 1, -1, -1))
    letters = [v for lx in inputs for v in lx if isinstance(v, str)]
    if arrow:
        head, dots, tail = _split(rhs, "the output")
        for v in head + tail:
            if v not in letters:
                raise ValueError(f"einsum: output subscript {v!r} appears in no operand")
            if (head + tail).count(v) > 1:
                raise ValueError(f"einsum: output subscript {v!r} repeated")
        if ellipsis and not dots:
            raise ValueError(
                "einsum: the operands' '...' dimensions need a '...' in the output subscripts"
            )
        output = head + ellipsis + tail
    else:
        output = ellipsis + sorted(v for v in set(letters) if letters.count(v) == 1)
    _check_sizes(inputs, shapes)
    return inputs, output


def _split(term, where):
    """A term's letters before and after its ellipsis, and whether it has one."""
    head, dots, tail = term.partition("...")
    for c in head + tail:
        if c == ".":
            raise ValueError(f"einsum: {where} has a '.' that is not part of one '...'")
        if c not in _LETTERS:
            raise ValueError(
                f"einsum: invalid subscript {c!r} in {where}: subscripts are letters (a-z, A-Z), "
                "with one '...', ',' between operands and '->' before the output"
            )
    return list(head), bool(dots), list(tail)


def _check_sizes(inputs, shapes):
    def name(v):
        return repr(v) if isinstance(v, str) else f"'...' dimension {-1 - v}"

    size, where = {}, {}
    for i, (labels, shape) in enumerate(zip(inputs, shapes)):
        own = {}
        for v, s in zip(labels, shape):
            if own.setdefault(v, s) != s:
                raise ValueError(
                    f"einsum: subscript {name(v)} repeats in operand {i} with sizes {own[v]} "
                    f"and {s} (a diagonal needs equal sizes)"
                )
        for v, s in own.items():
            have = size.get(v, 1)
            if s != 1 and have != 1 and s != have:
                raise ValueError(
                    f"einsum: subscript {name(v)} has size {have} in operand {where[v]} and {s} "
                    f"in operand {i} (sizes must be equal, or 1 to broadcast)"
                )
            if s != 1 or v not in size:
                size[v], where[v] = s, i
