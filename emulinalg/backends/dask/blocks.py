"""What the dask graphs share: the contraction chunks aligned, the chunks' backend and dtype,
plan notes of the chunking, object chunks (flattened, K-summed) and the per-chunk helpers of
the shared graph's tasks (finite parts, the whole lines' exponents and pre-shifts, integer GEMM
operands).
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from emulinalg._precision import REAL_DTYPE
from emulinalg.algorithm import operands
from emulinalg.algorithm.scaling import max_exponent, prescale_shift

_CHUNKS = {"emulinalg": "chunks"}  # per-chunk layers: never fused into the block products
_BLOCKS = {"emulinalg": "blocks"}


def _align(a, b):
    """Contraction chunks aligned (K follows the operand with fewer, larger K-blocks), batch
    chunks of b following a's."""
    ka, kb = a.chunks[-1], b.chunks[-2]
    kchunks = ka if len(ka) <= len(kb) else kb
    if a.chunks[-1] != kchunks:
        a = a.rechunk(a.chunks[:-1] + (kchunks,))
    want_b = a.chunks[:-2] + (kchunks, b.chunks[-1])
    if b.chunks != want_b:
        b = b.rechunk(want_b)
    return a, b, kchunks


def _fmt(chunks):
    """``(64, 64, 64, 32)`` -> ``"3x64+32"``: chunk sizes, compactly."""
    out, prev, count = [], None, 0
    for c in [*chunks, None]:
        if c == prev:
            count += 1
            continue
        if prev is not None:
            out.append(f"{count}x{prev}" if count > 1 else f"{prev}")
        prev, count = c, 1
    return "+".join(out)


def _dtype_name(dt):
    name_ = np.dtype(dt).name if not hasattr(dt, "name") else dt.name
    if name_ not in REAL_DTYPE:
        raise TypeError(f"internal: unsupported dtype {dt}")
    return name_


def _chunk_backend(x):
    """The emulinalg backend of a dask array's chunks (from its meta), or None."""
    import array_api_compat

    from .. import for_namespace

    meta = x._meta
    try:
        xp = array_api_compat.array_namespace(meta)
    except TypeError:
        return None
    if array_api_compat.is_dask_namespace(xp):
        return None
    return for_namespace(xp)


def _chunk_quiet(xp, backend):
    return backend.quiet() if backend is not None else contextlib.nullcontext()


def _xp_backend(x):
    import array_api_compat

    from .. import for_namespace

    xp = array_api_compat.array_namespace(x)
    return xp, for_namespace(xp)


def _chunk_arrays(args):
    """The arrays among a task's arguments: chunks, and those in its lists, tuples and dicts
    (concatenate=False's lists of chunks, the K-summed partials), nested to any depth."""
    import array_api_compat

    out = []
    for x in args:
        if isinstance(x, (list, tuple)):
            out.extend(_chunk_arrays(x))
        elif isinstance(x, dict):
            out.extend(_chunk_arrays(list(x.values())))
        elif array_api_compat.is_array_api_obj(x):  # cupy's arrays too (no __array_namespace__)
            out.append(x)
    return out


# array type -> its backend module, resolved once (for_namespace costs microseconds per task;
# for numpy types it depends on EMULINALG_AMX, but neither numpy backend gates first uses)
_BACKENDS: dict = {}


def _gate(arrays):
    """The ``first_use`` of the first backend among the arrays' that declares one (a task of
    cupy chunks may also take small numpy arrays), or None (numpy chunks: no gate)."""
    seen = set()
    for x in arrays:
        t = type(x)
        if t in seen:
            continue
        seen.add(t)
        if t not in _BACKENDS:
            import array_api_compat

            from .. import for_namespace

            _BACKENDS[t] = for_namespace(array_api_compat.array_namespace(x))
        gate = getattr(_BACKENDS[t], "first_use", None)
        if gate is not None:
            return gate
    return None


class Idle:
    """A task's result when it did none of its kind's work (an early return): its first use
    then leaves the kind cold for the next run (``task``)."""

    def __init__(self, value):
        self.value = value


def idle(value):
    """``value`` as an early return of a ``task`` (``Idle``)."""
    return Idle(value)


def task(fn):
    """A function the graphs run per chunk or block (a dask task): its first run of each kind
    (the function and its arrays' dtypes) that does its work (not an ``idle`` return) on a
    backend that compiles kernels at first use runs alone among that kind's runs (the backend's
    ``first_use``: cupy chunks), so that dask's worker threads on a fresh machine wait for one
    compile of the kernels it uses instead of each compiling them at once."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def run(*args, **kwargs):
        arrays = _chunk_arrays(args)
        first_use = _gate(arrays) if arrays else None
        if first_use is None:
            out = fn(*args, **kwargs)
        else:
            with first_use(("dask task", name, *sorted({str(x.dtype) for x in arrays}))) as g:
                out = fn(*args, **kwargs)
                if isinstance(out, Idle):
                    g.idle()
        return out.value if isinstance(out, Idle) else out

    return run


def _block_index(ix):
    return tuple(int(v[0]) for v in ix)


def _identity(x, axis=None, keepdims=None):
    return x


def _flatten(parts):
    if isinstance(parts, (list, tuple)):
        out = []
        for q in parts:
            out.extend(_flatten(q))
        return out
    return [parts]


def _squeeze(x, axis, keepdims):
    if keepdims:
        return x
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    return xp.squeeze(x, axis=tuple(axis))


@task
def _lsum(parts, axis=None, keepdims=False, computing_meta=False, **kwargs):
    """K-block partials ``{key: float64 array or None}`` added in float64 (the caller's factor
    covers the rounding: all terms are >= 0); None stays None (nothing was computed)."""
    parts = [x for x in _flatten(parts) if isinstance(x, dict)]
    if computing_meta or not parts:  # dask asking for the meta
        return np.empty((0,) * 2, dtype=object)
    out = dict(parts[0])
    for key, v in out.items():
        if v is not None:
            for x in parts[1:]:
                v = v + x[key]
            out[key] = v
    return out


def _finite_parts(xp, x):
    """float64 real/imaginary parts with NaN/Inf entries zeroed (as the engine computes its
    statistics and products), and the elementwise finiteness."""
    re, im = operands.parts(xp, x)
    ok = xp.isfinite(re) if im is None else xp.isfinite(re) & xp.isfinite(im)
    if not bool(xp.all(ok)):
        re, im = operands.zero_nonfinite(xp, re, im)
    return re, im, ok


def _line_exponent(xp, lines):
    """floor(log2 max |x|) per line (0 for zero lines) from the lines' [max, bad] stats: the
    engine's ``max_exponent`` of the whole line (the max over K-chunks is the line's max)."""
    return max_exponent(xp, xp.expand_dims(lines[..., 0], axis=-1), None, axis=-1)


def _prescale_shift(xp, lines, cplx):
    """The whole lines' pre-shifts (``scaling.prescale_shift``) from their [max, bad] stats."""
    return prescale_shift(_line_exponent(xp, lines), cplx)


def _gemm_operand(xp, backend, x):
    """int8 planes as ``backend.int_matmul`` takes them: as they are for cupy (its GEMM reads
    int8), integer-valued float64 otherwise (the numpy/AMX contract)."""
    return x if backend.name == "cupy" else xp.astype(x, xp.float64)
