"""Helpers shared by the tests (comparison against numpy, non-finite patterns)."""

from __future__ import annotations

import numpy as np

from emulinalg._suite import nonfinite_codes

# Tolerances relative to |A||B| for comparing values with numpy's own product. numpy's error is
# at most about k*u*|A||B| and the emulated one no larger, so these only catch real mistakes.
RTOL = {
    "float64": 1e-12,
    "complex128": 1e-12,
    "float32": 2e-5,
    "complex64": 2e-5,
    "float16": 3e-2,
}


def nonfinite_mask(x):
    """True where any real component is NaN or infinite."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return ~(np.isfinite(x.real) & np.isfinite(x.imag))
    return ~np.isfinite(x)


def assert_same_nonfinite_pattern(got, want, *, complex_positions_only=True):
    """Same positions of NaN, +inf and -inf as ``want`` (numpy's own result).

    For complex results only the positions of non-finite entries are compared by default: which
    component becomes NaN rather than inf depends on the BLAS kernel (OpenBLAS's zgemm, for
    instance, turns ``inf + 0j`` into ``inf + nan j`` when it applies alpha).
    """
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind == "c" and complex_positions_only:
        g, w = nonfinite_mask(got), nonfinite_mask(want)
    else:
        g, w = nonfinite_codes(got), nonfinite_codes(want)
    bad = np.argwhere(g != w)
    assert bad.size == 0, (
        f"{len(bad)} entries differ in their non-finite pattern, first at {tuple(bad[0])}: "
        f"got {got[tuple(bad[0])]}, numpy {want[tuple(bad[0])]}"
    )


def assert_close_to(got, want, bound, rtol):
    """``|got - want| <= rtol * bound`` entrywise, where both are finite."""
    got = np.asarray(got).astype(np.complex128 if np.asarray(got).dtype.kind == "c" else np.float64)
    want = np.asarray(want).astype(got.dtype)
    bound = np.asarray(bound, dtype=np.float64)
    both = ~nonfinite_mask(got) & ~nonfinite_mask(want)
    err = np.abs(got - want)
    # an absolute floor for results in the subnormal range of the result dtype
    tiny = np.finfo(np.float64).tiny
    ok = ~both | (err <= rtol * bound + tiny)
    if not ok.all():
        idx = tuple(np.argwhere(~ok)[0])
        raise AssertionError(
            f"{(~ok).sum()} entries off: first at {idx}: got {got[idx]!r}, want {want[idx]!r}, "
            f"|A||B| = {bound[idx]!r}, rtol = {rtol}"
        )


def plain_numpy(x):
    """True for a numpy ndarray or numpy scalar (what numpy's matmul itself returns)."""
    return type(x) is np.ndarray or isinstance(x, np.generic)
