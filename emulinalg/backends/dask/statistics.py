"""The shared graph's statistics tasks (run on the workers, on numpy or cupy chunks): per chunk
the lines' max magnitude and NaN/Inf flag, the accurate mode's int8 bound operand and line
terms (``scaling.bound_operand``), the fast mode's sums of squares, the certificate's
normalized magnitudes; per block triple the bound GEMM and the magnitude lower bound; per line
the shifts of the count of moduli (``scaling.ozaki2_shifts``).
"""

from __future__ import annotations

from emulinalg.algorithm import certificate
from emulinalg.algorithm.moduli import crt_constants
from emulinalg.algorithm.scaling import (
    BOUND_MAX,
    bound_operand,
    bound_upper,
    line_shift,
    magnitude,
    mixed_lines,
    sqnorm_sums,
)
from emulinalg.algorithm.xputil import ldexp

from .blocks import (
    _chunk_quiet,
    _finite_parts,
    _gemm_operand,
    _line_exponent,
    _prescale_shift,
    _xp_backend,
    idle,
    task,
)


@task
def _line_stats(x, axis):
    """[max magnitude, has NaN/Inf] per line of one chunk (A: axis -1, B: axis -2), with a
    size-1 K axis: (..., m, 1, 2) for A, (..., 1, n, 2) for B."""
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, ok = _finite_parts(xp, x)
        mx = xp.max(magnitude(xp, re, im), axis=axis)
        bad = xp.astype(~xp.all(ok, axis=axis), xp.float64)
        return xp.expand_dims(xp.stack([mx, bad], axis=-1), axis=-2 if axis == -1 else -3)


@task
def _bound_chunk(x, lines, axis, cplx):
    """int8 ``Ā = floor(2**(s+1) |x|)`` (entries <= 127, ``scaling.bound_operand``) with the
    whole lines' prescale shifts."""
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, x)
        s = _prescale_shift(xp, lines, cplx)
        return xp.astype(bound_operand(xp, re, im, s, axis)[0], xp.int8)


@task
def _line_terms(x, lines, axis, cplx, norm):
    """Partial line terms of one chunk, (..., m, 1, 2 to 4) for A, (..., 1, n, .) for B: the
    sum of Ā and the count of nonzero parts (``scaling.bound_operand``'s, exact integers, so
    their K-sums are the whole lines'), and with ``norm`` ("l1" or "l2", the certificate's)
    the partial sum of ``certificate.line_norm`` on the normalized line (of |Re| + |Im|, or of
    its squares; finished by ``_line_norms``) and, complex, ``scaling.mixed_lines``."""
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, x)
        s = _prescale_shift(xp, lines, cplx)
        _, sums, nz = bound_operand(xp, re, im, s, axis)
        terms = [sums, nz]
        if norm is not None:
            if im is not None:  # entries with both parts nonzero: certificate.bound_lower
                mixed = xp.astype(mixed_lines(xp, re, im, axis), sums.dtype)
            re, im = _normalized(xp, re, im, lines, axis)
            terms.append(certificate.line_norm_sums(xp, re, im, axis, norm))
            if im is not None:
                terms.append(mixed)
        return xp.expand_dims(xp.stack(terms, axis=-1), axis=-2 if axis == -1 else -3)


@task
def _sq_chunk(x, lines, axis, cplx):
    """The fast mode's partial sums of squares at the whole lines' shifts
    (``scaling.sqnorm_sums``; its ``sqnorm_factor`` is applied to the total)."""
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, x)
        return sqnorm_sums(xp, re, im, _prescale_shift(xp, lines, cplx), axis, keepdims=True)


def _normalized(xp, re, im, lines, axis):
    ea = xp.expand_dims(_line_exponent(xp, lines), axis=axis)
    return ldexp(xp, re, -ea), None if im is None else ldexp(xp, im, -ea)


@task
def _normmag_chunk(x, lines, fallback, axis):
    """Magnitudes normalized by the global line exponents, truncated to float32 (what
    ``certificate.magnitude_lower`` multiplies): 4 bytes per entry; None when the bound GEMM's
    certificate left no entry beyond (``fallback`` False)."""
    if not fallback:
        return idle(None)
    xp, backend = _xp_backend(x)
    with _chunk_quiet(xp, backend):
        re, im, _ = _finite_parts(xp, x)
        re, im = _normalized(xp, re, im, lines, axis)
        return certificate.down_to_float32(xp, magnitude(xp, re, im))


@task
def _bound_block(xa, xb):
    """One block of the accurate-mode bound GEMM F = Ā B̄ (exact integers), (..., m, 1, n)."""
    xp, backend = _xp_backend(xa)
    c = backend.int_matmul(
        _gemm_operand(xp, backend, xa), _gemm_operand(xp, backend, xb), BOUND_MAX * BOUND_MAX
    )
    return xp.expand_dims(xp.astype(c, xp.float64), axis=-2)


@task
def _upper_block(F, aterms, bterms, cplx):
    """U = ``scaling.bound_upper`` of one output block from the K-summed F and line terms
    (exact integers: the engine's U, so max U / 4 gives its e and f)."""
    xp, _ = _xp_backend(F)
    return bound_upper(xp, F, aterms[..., 0], aterms[..., 1], bterms[..., 0], bterms[..., 1], cplx)


@task
def _lower_block(ma, mb):
    """``{"lam": certificate.magnitude_lower of one block triple's normalized magnitudes (a lower
    bound of |A_k||B_k|), (..., m, n)}``, the K axis implied; lam None when not needed."""
    if ma is None:
        return {"lam": None}
    xp, backend = _xp_backend(ma)
    with _chunk_quiet(xp, backend):
        lam = certificate.magnitude_lower(
            xp, backend, xp.astype(ma, xp.float64), xp.astype(mb, xp.float64)
        )
    return {"lam": lam}


@task
def _shift_task(lines, bound, cfg, cplx):
    """mu (or nu) of ``scaling.ozaki2_shifts`` (``scaling.line_shift``) for the count."""
    xp, _ = _xp_backend(lines)
    s = _prescale_shift(xp, lines, cplx)
    if not cfg["count"]:
        return s
    c = crt_constants(cfg["count"])
    return line_shift(xp, s, bound, c.L, c.Q_down)
