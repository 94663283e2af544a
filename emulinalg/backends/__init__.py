"""Backends move data and call kernels; the algorithms live in ``emulinalg``.

Each backend module provides the same small surface:

- ``name``: short string used in plans and benchmark records.
- ``int_matmul(a, b, term_bound)``: the exact integer GEMM of integer-valued arrays
  (..., m, k) @ (..., k, n) whose products are bounded by ``term_bound`` in magnitude; returns
  the exact sums (float64 holding integers).
- ``native_matmul(a, b)``: the library's own product, for fallbacks and references.
- ``quiet()``: a context manager silencing expected floating-point warnings.
- optional ``ozaki2_product(...)``: a whole Scheme II product in the backend's own kernels
  (``emulinalg._stages`` says the contract); ``magnitude_lower_matmul(xa, xb)``: a cheap
  lower bound of a product of magnitudes for the certificate (``emulinalg.algorithm.certificate``);
  ``ozaki2_prescale(ar, ai, br, bi, mode)`` and ``ozaki2_certificate(...)``: the statistics in
  the backend's kernels (same contracts as ``emulinalg.algorithm.scaling.ozaki2_prescale`` and
  ``emulinalg.algorithm.certificate.ozaki2_moduli_needed``; None declines); ``all_finite(x)``: the
  engine's NaN/Inf check; ``line_scan(ar, ai, br, bi)``: that check fused with the prescale's line
  exponents, ``(finite, exponents)`` (the backend's prescale then takes ``exponents=``;
  ``exponents`` is a pair of integer arrays (B, m) and (B, n), B the operands' batch, holding
  floor(log2 max(|re|, |im|)) of A's rows and B's columns, INT32_MIN for a zero line: the
  complex part check reads them too);
  ``narrow_statistics = True``: those three hooks also take float32 operands (float32 and
  complex64 inputs, read as they are: half the bytes of their float64 copies), with the results
  they give for the float64 copies; ``narrow_products = True``: so do ``ozaki2_product`` and
  ``refit_pick`` (real float32 inputs then reach every stage as they are, no float64 copy);
  ``dask_mode = "dd"``: dask graphs over this backend's
  chunks default to the double-double graph (``backends.dask._mode``).

Whether emulation beats native here (``strategy="performant"``) is decided by the cost model of
``emulinalg._cost``, fitted from this backend's benchmark records.
"""

from __future__ import annotations

from emulinalg import get_config


def for_namespace(xp):
    """The backend module for an array namespace, or None when there is none (yet)."""
    import array_api_compat

    if array_api_compat.is_numpy_namespace(xp):
        if amx_wanted():
            from . import amx

            if amx.usable():
                return amx
        from . import numpy as backend

        return backend
    if array_api_compat.is_cupy_namespace(xp):
        from . import cupy as backend

        return backend
    if array_api_compat.is_dask_namespace(xp):  # a graph of block products on the chunks' backend
        from . import dask as backend

        return backend
    return None


def amx_wanted():
    """Whether numpy products may take the amx backend: ``EMULINALG_AMX`` unset (or "1") means
    yes where AMX is usable, "0" keeps them on the numpy backend."""
    return get_config().amx != "0"
