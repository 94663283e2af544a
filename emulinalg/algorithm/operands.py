"""The operands as the schemes take them: float64 real and imaginary parts, non-finite entries.

The schemes work on finite float64 parts (imaginary None for real operands). NaN and Inf
entries are found first (one sum per part, or the backend's own check); the rows of A and
columns of B that hold them are computed natively, and the emulation runs on the parts with
those entries set to zero, so the other entries keep their values.

An operand used in many products (``emulinalg.prepare``) keeps what a product computes from it
alone in a ``Side``: the steps that take one ask ``once`` for each one-sided piece.
"""

from __future__ import annotations

import threading

from .._stages import stages


def real_imag(xp, x):
    """Real and imaginary parts as they are (None when real)."""
    if xp.isdtype(x.dtype, "complex floating"):
        return xp.real(x), xp.imag(x)
    return x, None


def parts(xp, x, backend=None):
    """float64 real and imaginary parts (None when real); float64 operands are used as they are
    (nothing writes into them: a copy would cost a pass over each and its memory). A backend may
    convert in its own way (its ``as_float64`` stage, e.g. multithreaded)."""
    conv = None if backend is None else stages(backend).as_float64
    if conv is None:

        def conv(v):
            return xp.astype(v, xp.float64, copy=False)

    re, im = real_imag(xp, x)
    return conv(re), None if im is None else conv(im)


def wide(xp, *parts):
    """The parts as float64 (None stays None; float64 ones as they are): what generic code
    computes on, where a backend with ``narrow_products`` was handed float32 parts."""
    return tuple(None if x is None else xp.astype(x, xp.float64, copy=False) for x in parts)


def all_finite(xp, backend, re, im):
    """True when every entry is finite: the backend's own check (``backend.all_finite``, e.g.
    multithreaded) or one sum per part: NaN and Inf entries make the sum non-finite; a sum that
    overflows (finite entries) only sends the caller to the per-line check."""
    check = stages(backend).all_finite
    if check is not None:
        return check(re) and (im is None or check(im))
    ok = bool(xp.isfinite(xp.sum(re)))
    return ok and (im is None or bool(xp.isfinite(xp.sum(im))))


def finite_lines(xp, re, im, axis):
    """Per line along ``axis``, whether every entry is finite (both parts)."""
    ok = xp.isfinite(re) if im is None else xp.isfinite(re) & xp.isfinite(im)
    return xp.all(ok, axis=axis)


def zero_nonfinite(xp, re, im):
    """The parts with every entry that is not finite (either part) set to zero in both."""
    ok = xp.isfinite(re) if im is None else xp.isfinite(re) & xp.isfinite(im)
    re = xp.where(ok, re, 0.0)
    return re, (None if im is None else xp.where(ok, im, 0.0))


class Side:
    """The one-sided pieces of one operand in one layout (A (..., m, k) or B (..., k, n)): what
    a product computes from that operand alone, kept for the next product (``emulinalg.prepare``).

    Each piece is computed on its first use and kept under its key (a tuple whose first item
    names it); the operand's data is a read-only snapshot, so a kept piece never goes stale. A
    product reads the pieces through ``use()``, which records what it took and what it made.
    Kept numpy arrays are made read-only: a step writing into one fails instead of corrupting
    the next product."""

    def __init__(self):
        self._pieces = {}
        self._lock = threading.Lock()

    def use(self):
        """A view for one product, recording the names of the pieces it reused/computed."""
        return SideUse(self)

    def peek(self, key):
        with self._lock:
            return self._pieces.get(key)

    def put(self, key, value):
        _read_only(value)
        with self._lock:
            self._pieces[key] = value


class SideUse:
    """``Side.use()``: ``get`` a piece (computed where absent); ``reused``/``computed`` name the
    pieces in the order the product asked for them."""

    def __init__(self, side):
        self.side = side
        self.reused = []
        self.computed = []

    def get(self, key, compute):
        value = self.side.peek(key)
        if value is not None:
            _note(self.reused, key[0])
            return value
        value = compute()
        self.side.put(key, value)
        _note(self.computed, key[0])
        return value

    def record(self, name, reused):
        _note(self.reused if reused else self.computed, name)


def once(side, key, compute):
    """``compute()``, or the piece ``key`` of a prepared operand's ``side`` (a ``SideUse``;
    None: not prepared), computed there on its first use."""
    return compute() if side is None else side.get(key, compute)


def _note(names, name):
    if name not in names:
        names.append(name)


def _read_only(value):
    if isinstance(value, (tuple, list)):
        for v in value:
            _read_only(v)
    elif hasattr(value, "flags") and hasattr(value, "setflags"):  # numpy
        value.setflags(write=False)
