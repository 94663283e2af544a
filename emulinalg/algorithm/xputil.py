"""The few operations the schemes need beyond the Array API standard.

numpy and cupy (and so their dask chunks) provide them natively; the generic fallbacks keep the
algorithms runnable on any Array API namespace.
"""

from __future__ import annotations

import functools
import math

import array_api_compat


def ldexp(xp, x, e):
    """``x * 2**e`` with one rounding (exact unless the result under- or overflows)."""
    f = getattr(xp, "ldexp", None)
    if f is not None:
        if not isinstance(e, int):
            e = xp.astype(e, xp.int32)
        return f(x, e)
    # Two steps keep every power of two representable.
    if isinstance(e, int):
        h = e // 2
        return (x * math.ldexp(1.0, h)) * math.ldexp(1.0, e - h)
    h = e // 2
    return (x * xp.pow(2.0, xp.astype(h, x.dtype))) * xp.pow(2.0, xp.astype(e - h, x.dtype))


def take(xp, x, idx, axis):
    """``xp.take(x, idx, axis=axis)`` that reads only the lines taken: numpy's take first makes
    a contiguous copy of a strided ``x`` (all of a complex operand's real part to take a few of
    its rows), its integer indexing gathers the lines alone."""
    if array_api_compat.is_numpy_array(x) and not x.flags.c_contiguous:
        return x[(slice(None),) * (axis % x.ndim) + (idx,)]
    return xp.take(x, idx, axis=axis)


def to_float32(xp, x):
    """float64 ``x`` rounded to float32 (nearest even, gradual underflow). cupy compiles its
    kernels with ``-ftz=true``, so its ``astype`` flushes float32 subnormal results to zero;
    there the conversion is one PTX ``cvt.rn.f32.f64``, which no compiler flag changes."""
    if array_api_compat.is_cupy_namespace(xp):
        return _cupy_to_float32()(xp.asarray(x, dtype=xp.float64))
    return xp.astype(x, xp.float32)


_CUPY_TO_FLOAT32 = []


def _cupy_to_float32():
    if not _CUPY_TO_FLOAT32:
        import cupy

        _CUPY_TO_FLOAT32.append(cupy.ElementwiseKernel(
            "float64 x", "float32 y", 'asm("cvt.rn.f32.f64 %0, %1;" : "=f"(y) : "d"(x));',
            "emulinalg_to_float32",
        ))  # fmt: skip
    return _CUPY_TO_FLOAT32[0]


@functools.cache
def _cupy_make_complex(part):
    import cupy

    c = {"float64": "complex128", "float32": "complex64"}[part]
    return cupy.ElementwiseKernel(
        f"{part} re, {part} im", f"{c} z",
        f"z = complex<{'double' if part == 'float64' else 'float'}>(re, im)",
        f"emulinalg_make_{c}",
    )


def frexp_exponent(xp, x):
    """Integer ``E`` with ``|x| = f * 2**E``, ``0.5 <= f < 1`` (0 for x == 0); x must be finite."""
    f = getattr(xp, "frexp", None)
    if f is not None:
        return f(x)[1]
    ax = xp.abs(x)
    e = xp.floor(xp.log2(xp.where(ax == 0, 1.0, ax)))
    # log2 may be off by one near powers of two: correct with an exact comparison.
    e = xp.where(ldexp(xp, xp.ones_like(ax), xp.astype(e, xp.int64)) > ax, e - 1, e)
    e = xp.where(ldexp(xp, xp.ones_like(ax), xp.astype(e + 1, xp.int64)) <= ax, e + 1, e)
    return xp.where(ax == 0, 0, xp.astype(e, xp.int64) + 1)


def clip(xp, x, lo, hi):
    """``x`` clipped to [lo, hi] (Python numbers), in x's dtype. array_api_compat's ``clip``
    turns the bounds into device arrays and assigns through boolean masks: on cupy each call
    copies from the host and synchronises with the device."""
    return xp.minimum(xp.maximum(x, lo), hi)


def floor_mod(xp, x, m):
    """``x mod m`` in [0, m) for integer-valued floats with |x| < 2**53 and an integer m > 0.

    Exact: the quotient estimate floor(x/m) may be off by one, but m*q and x - m*q are exact
    integers below 2**53, and one correction step each way fixes the remainder. (C fmod is exact
    too, but far slower on large arguments.)
    """
    r = x - m * xp.floor(x / m)
    r = xp.where(r < 0, r + m, r)
    return xp.where(r >= m, r - m, r)


def to_host(x):
    """A numpy array of ``x`` (any array library: a device array's ``get``; numpy arrays and
    sequences through ``np.asarray``)."""
    import numpy as np

    get = getattr(x, "get", None)
    return np.asarray(x if get is None or isinstance(x, np.ndarray) else get())


@functools.cache
def _host_module():
    try:
        from emulinalg import _amx
    except ImportError:
        return None
    return _amx if hasattr(_amx, "make_complex") else None


def _host_make_complex(xp, re, im, dtype):
    """``emulinalg._amx.make_complex`` (one OpenMP pass) for large 2-D float64 numpy parts of a
    complex128 result, else None."""
    if not (array_api_compat.is_numpy_namespace(xp) and re.ndim == 2 and re.shape == im.shape):
        return None
    import numpy as np

    if np.dtype(dtype) != np.complex128 or re.dtype != np.float64 or im.dtype != np.float64:
        return None
    if re.size < 1 << 16 or any(st % 8 for st in re.strides + im.strides):
        return None
    host = _host_module()
    return None if host is None else host.make_complex


def make_complex(xp, re, im, dtype):
    """Complex array from real and imaginary parts, keeping inf/nan parts as they are (re + 1j*im
    would turn an infinite imaginary part into a NaN real part). On cupy, parts of the dtype's
    own precision are interleaved in one pass (astype and an imaginary assignment are two)."""
    if array_api_compat.is_cupy_namespace(xp) and re.shape == im.shape:
        import numpy as np  # cupy's dtypes are numpy's (a type or an instance here)

        name = {"complex128": "float64", "complex64": "float32"}.get(np.dtype(dtype).name)
        if name is not None and re.dtype == im.dtype == getattr(xp, name):
            return _cupy_make_complex(name)(re, im)
    host = _host_make_complex(xp, re, im, dtype)
    if host is not None:
        return host(re, im)
    out = xp.astype(re, dtype)
    try:
        out.imag = im
        return out
    except (AttributeError, TypeError, ValueError):  # immutable arrays
        return out + 1j * xp.astype(im, dtype)


def two_sum(a, b):
    """Knuth's TwoSum: ``(s, e)`` with ``s = fl(a + b)`` and ``s + e == a + b`` exactly (finite
    values, no overflow)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def dd_add(xp, x, y):
    """The double-double sum of pairs ``x = (hi, lo)`` and ``y``, renormalized (QD's accurate
    addition: relative error about 2**-104 of |x| + |y|); where the sum is not finite (an
    overflow), the plain sum of the high parts with a zero low part."""
    s, e = two_sum(x[0], y[0])
    t, f = two_sum(x[1], y[1])
    s, e = two_sum(s, e + t)
    s, e = two_sum(s, e + f)
    ok = xp.isfinite(s) & xp.isfinite(e)
    return xp.where(ok, s, x[0] + y[0]), xp.where(ok, e, 0.0)


def dd_to_float32(xp, hi, lo):
    """The double-double ``hi + lo`` (|lo| <= half an ulp of hi) rounded once to float32: ``hi``
    rounded, except where ``hi`` lies halfway between two float32 values and ``lo`` breaks the
    tie (rounding ``hi`` alone would round the exact value twice)."""
    r = to_float32(xp, hi)
    back = xp.astype(r, xp.float64)
    d = hi - back  # exact
    toward = xp.where(d > 0, xp.inf, -xp.inf)
    other = xp.nextafter(r, xp.astype(toward, xp.float32))
    mid = (d != 0) & (2.0 * hi == back + xp.astype(other, xp.float64)) & (lo != 0)
    beyond = (lo > 0) == (d > 0)  # the exact value lies past hi, toward ``other``
    return xp.where(mid, xp.where(beyond, other, r), r)
