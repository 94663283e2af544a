"""The stage protocol: what a backend provides, resolved once into the stages the engine calls.

A backend moves data and runs kernels; it decides nothing (the decisions are ``_planner``'s,
the algorithm is ``emulinalg``'s). It is a module (or any object) with the members of
``Backend``; each optional stage it does not provide runs as the Array API reference
implementation of that stage. ``stages(backend)`` resolves the set of a backend (a few
attribute reads, once per product); the engine, the certificate and the BF16
schedule call only the resolved ``Stages``.

Optional stages (a backend's kernel for a step of the algorithm; each may return None for
inputs its kernels do not take, and the reference then runs):

==========================  ================================================================
member                      stage (reference implementation)
==========================  ================================================================
``as_float64(x)``           float64 copy of a part (``xp.astype``)
``all_finite(x)``           the NaN/Inf check of a part (one sum per part)
``line_scan(ar, ai, br,``   that check fused with the line exponents of the prescale:
``bi, prepare)``            ``(finite, exponents)``; its prescale then takes ``exponents=``
                            (reference: none, the check alone)
``ozaki2_prescale(ar, ai,`` scaling statistics, same contract as ``scaling.ozaki2_prescale``
``br, bi, mode[,``
``exponents])``
``ozaki2_certificate(ar,``  the moduli count per entry and the count, same contract as
``ai, br, bi, prescale,``   ``certificate.certify_moduli``: ``(count, beyond[, patch])``
``target)``
``magnitude_lower_matmul``  a lower bound of a product of line-normalized magnitudes
``(xa, xb)``                (float32 GEMM, rounding removed: ``certificate``); on operands of
                            either sign, an estimate (``certificate.signed_estimate``)
``ozaki2_product(ar, ai,``  a whole Scheme II product (residues, modular products, CRT), same
``br, bi, moduli, mode,``   result as ``products.product`` bit for bit
``out_dtype, prescale)``
``product_workspace(ar,``   the bytes ``ozaki2_product`` allocates besides its inputs and
``ai, br, bi, moduli)``     output, for the plan (none)
``refit_pick(parts,``       the refit's entries, same result as ``refit.cancelled_entries``
``prescale, exclude,``      (an index array, possibly empty), or left on the device as a
``everything)``             ``refit.Deferred`` (the refit then reads its validity once)
``balance_sides(re, im,``   the complex part check's operand sides, same result as
``e)``                      ``parts.balance_sides``
``balance_fine(t_lo, s,``   its test, same result as ``parts.balance_fine``
``terms, rows, cols)``
``balance_stage(ar, ai,``   the whole balance test with its GEMMs, same result as
``br, bi, ea, eb, terms)``  ``parts.balanced``
``bf16_product(ar, ai,``    the BF16 schedule's product (``algorithm.bf16``)
``br, bi, scheme, dt)``
``k_block(k, bound)``       the K-block of its integer GEMMs, for the plan (none)
``take_columns(x, cols)``   float64 ``x[:, cols]`` of a 2-D part, the line patch's columns of
                            a piece of B (``xp.take``, widened)
``line_products(x, y,``     float64 product of a few rows of 2-D x and columns of 2-D y (None:
``rows, cols, step)``       all), each entry summed over pieces of K of ``step``: the line
                            patch's thin products in one call (its pieces' GEMMs)
``chunk_residues(re, im,``  the dask shared graph's steps on one 2-D chunk, in the backend's
``shift, axis, moduli,``    own layout (all four, or none): a chunk's residue planes
``nearest)``                (``residues.int8_planes``; None declines for the whole graph),
``chunk_products(pa, pb,``  a block's modular products (``products.modular_products``), the
``moduli)``                 K-blocks' sum modulo each modulus, and an output block's CRT
``chunk_residue_sum(ws)``   (``crt.from_residues``): the same integers and bits as the generic
``chunk_crt(w, mu, nu,``    steps (``emulinalg/backends/dask/crt.py``)
``moduli, cplx, out, cols)``
==========================  ================================================================

Declared facts: ``block_entries`` (output entries per row block of the generic Scheme II
loop; None: ``_engine.BLOCK_ENTRIES``), ``narrow_statistics`` (its statistics stages take
float32 parts as they are), ``narrow_products`` (so do its ``ozaki2_product`` and
``refit_pick``: the engine then gives float32 inputs' parts to every stage as they are, and
widens them only for generic code, ``operands.wide``), ``native_error_rms`` /
``native_chain_k`` (its native GEMM's measured rounding error, ``certificate.native_error``;
``native_error_rms_complex`` its complex GEMM's per part where it differs, else None),
``dask_mode`` (the dask graph its chunks default to), ``gaussian_moduli`` (its certificate
and Scheme II product take complex products modulo the Gaussian moduli,
``moduli.GAUSSIAN_MODULI``: two INT8 GEMMs per modulus instead of 3M's three; the engine then
certifies and runs them so), ``line_pieces`` (its native GEMM of a few output lines sums all
of k in one chain, a GEMV for one line, so the line patch sums pieces of K:
``_engine._native_lines``; False where its GEMMs of few lines split k themselves), and
``plan_note()`` (a line for every plan, e.g. why another
backend is not running), and ``first_use(what)`` (a context manager around one call of the
kind ``what``, a tuple naming it and its dtypes, yielding an object whose ``idle()`` says the
call did none of the kind's work: a backend that compiles kernels at first use runs the first
call of each kind alone, ``emulinalg.backends.cuda.first_use``; default none).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

# The native GEMM's rounding error per entry, as a root mean square relative to
# u sqrt(k) ||a_i o b_j||_2 (``certificate.native_error``): one chain of FMAs over k gives about
# 1/sqrt(12); a GEMM that adds chains of kb and then their sums, sqrt(kb / k) of that. A backend
# declares its own (``native_error_rms``, ``native_chain_k``); this default is the single chain.
NATIVE_ERROR_RMS = 0.29


class _Ungated:
    """What a backend without ``first_use`` gives the gated call (nothing to mark)."""

    def idle(self):
        pass


UNGATED = _Ungated()


@runtime_checkable
class Backend(Protocol):
    """The required members of a backend (the optional stages: module docstring)."""

    name: str

    def int_matmul(self, a: Any, b: Any, term_bound: int) -> Any:
        """The exact integer GEMM of integer-valued arrays (..., m, k) @ (..., k, n) whose
        products are at most ``term_bound`` in magnitude: the exact sums (float64 holding
        integers)."""

    def native_matmul(self, a: Any, b: Any) -> Any:
        """The library's own product (fallbacks and references)."""

    def quiet(self) -> contextlib.AbstractContextManager:
        """A context silencing the expected floating-point warnings."""


_OPTIONAL = (
    "as_float64",
    "all_finite",
    "line_scan",
    "ozaki2_prescale",
    "ozaki2_certificate",
    "magnitude_lower_matmul",
    "ozaki2_product",
    "product_workspace",
    "refit_pick",
    "balance_sides",
    "balance_fine",
    "balance_stage",
    "bf16_product",
    "k_block",
    "take_columns",
    "line_products",
    "chunk_residues",
    "chunk_products",
    "chunk_residue_sum",
    "chunk_crt",
)


@dataclasses.dataclass(frozen=True)
class Stages:
    """A backend's stages, each its kernel or None (the reference runs), and its declared
    facts. Built by ``stages``; the engine and the algorithm read nothing else of a backend."""

    backend: Any
    name: str
    int_matmul: Callable
    native_matmul: Callable
    quiet: Callable
    as_float64: Callable | None = None
    all_finite: Callable | None = None
    line_scan: Callable | None = None
    ozaki2_prescale: Callable | None = None
    ozaki2_certificate: Callable | None = None
    magnitude_lower_matmul: Callable | None = None
    ozaki2_product: Callable | None = None
    product_workspace: Callable | None = None
    refit_pick: Callable | None = None
    balance_sides: Callable | None = None
    balance_fine: Callable | None = None
    balance_stage: Callable | None = None
    bf16_product: Callable | None = None
    k_block: Callable | None = None
    take_columns: Callable | None = None
    line_products: Callable | None = None
    chunk_residues: Callable | None = None
    chunk_products: Callable | None = None
    chunk_residue_sum: Callable | None = None
    chunk_crt: Callable | None = None
    block_entries: int | None = None
    narrow_statistics: bool = False
    narrow_products: bool = False
    native_error_rms: float = NATIVE_ERROR_RMS
    native_error_rms_complex: float | None = None
    native_chain_k: Any = None
    dask_mode: str = "shared"
    gaussian_moduli: bool = False
    line_pieces: bool = True
    plan_note: Callable[[], str] = lambda: ""
    first_use: Callable = lambda what: contextlib.nullcontext(UNGATED)


_FACTS = ("block_entries", "narrow_statistics", "narrow_products", "native_error_rms",
          "native_error_rms_complex", "native_chain_k", "dask_mode", "gaussian_moduli",
          "line_pieces", "plan_note")  # fmt: skip


def gaussian_keywords(gaussian):
    """The keywords of a hook call for a complex product modulo the Gaussian moduli: the hooks
    of a backend that declares ``gaussian_moduli`` take ``gaussian=True``; other backends' hooks
    lack the keyword (they are called for the moduli only)."""
    return {"gaussian": True} if gaussian else {}


def stages(backend) -> Stages:
    """The resolved ``Stages`` of a backend module (or object; a ``Stages`` is returned as it
    is). A required member that is missing raises TypeError when called (a partial backend
    serves the steps that do not call it, e.g. a test of one stage)."""
    if isinstance(backend, Stages):
        return backend
    declared = vars(backend) if hasattr(backend, "__dict__") else {}
    fields = {m: declared[m] for m in _OPTIONAL + _FACTS if m in declared}
    return Stages(
        backend=backend,
        name=getattr(backend, "name", type(backend).__name__),
        int_matmul=getattr(backend, "int_matmul", None) or _missing(backend, "int_matmul"),
        native_matmul=getattr(backend, "native_matmul", None) or _missing(backend, "native_matmul"),
        quiet=getattr(backend, "quiet", contextlib.nullcontext),
        first_use=getattr(backend, "first_use", None) or Stages.first_use,
        **fields,
    )


def _missing(backend, member):
    def call(*args, **kwargs):
        raise TypeError(f"backend {backend!r} lacks the required {member}")

    return call
