"""The cupy backend's Scheme II kernels: their CUDA C++ sources and host-side tables.

The ``.cu`` files of ``src_cuda/`` (:func:`source_dir`) are compiled at run time with NVRTC
(``cupy.RawModule``) and also build standalone with ``nvcc -arch=sm_90a`` (the explicit
instantiations under ``#ifndef __CUDACC_RTC__`` exist for that check). This module needs no
cupy: the tables and the source text are plain Python, so the CPU tests (``tests/kernels/``)
check them too.

Stages (named as in ``emulinalg.algorithm.products``):

- ``ozaki2_residues.cu`` / ``ozaki2_residues_mma.cu`` (INT8 tensor cores): float64 (or float32)
  operand -> int8 residues for every modulus, in the INT8 GEMM's layout (planes of (rows, kp)
  with kp a multiple of 16), one pass, the same planes from either (``backends.cupy.products``
  picks);
- the INT8 GEMMs are the fused CUTLASS kernel's (``fused``) where it runs, else cuBLAS
  (``emulinalg/backends/cupy/gemm.py``);
- ``ozaki2_crt.cu``: INT32 products -> exact CRT integer -> correctly rounded float;
- ``bf16_lower.cu``: float64 -> bfloat16 truncated toward zero (certificate lower bounds);
- ``ozaki2_stats.cu``: the statistics that choose the number of moduli, as
  ``emulinalg.algorithm.scaling.ozaki2_prescale`` ("accurate") and
  ``emulinalg.algorithm.certificate.ozaki2_moduli_needed`` compute them: line exponents, the int8
  bound operand of the prescale GEMM with the line norms' sums, the certificate's bf16 operands,
  its passes over the bound (and bf16) GEMM's sums (counts, the exact step) and the suspect
  refinement's steps (``emulinalg.algorithm.refinement``).

Their constants (moduli, CRT word counts, table sizes) are in ``ozaki2_tables.h``, generated
from the Python tables by :func:`tables_header`.
"""

from __future__ import annotations

import contextlib
import re
import threading
from functools import cache
from pathlib import Path

import numpy as np

from emulinalg.algorithm.moduli import GAUSSIAN_MODULI, MODULI, crt_constants
from emulinalg.algorithm.scaling import BOUND_MAX

_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_]+\.(?:cuh|cu|h))"\s*$', re.MULTILINE)

WORD_BITS = 32  # word width of the CRT kernel's exact accumulator (balanced digits, int64 sums)
MAX_WORDS = 6  # size of the __constant__ digit tables (n = 20 needs 5)
# ozaki2_crt_s8.cu accumulates X in float64 FMAs: balanced radix-2**42 digits, every partial sum
# an integer below 2**53 (crt_f64_words checks it for each n)
F64_DIGIT_BITS = 42
MAX_F64_WORDS = 4  # size of its __constant__ digit tables (n = 20 needs 4)


# The kernels of ozaki2_stats.cu, one NVRTC module (emulinalg/backends/cupy/kernels.py).
STATS_KERNELS = (
    tuple(
        f"{k}<{t}, {c}>"
        for k in ("line_max_exponent", "bound_operand")
        for t in ("double", "float")
        for c in ("false", "true")
    )
    + tuple(f"cert_operand<{c}>" for c in ("false", "true"))
    + tuple(
        name
        for T in ("int", "long long")
        for name in (
            f"bound_max<{T}>",
            f"cert_entries<{T}, false>",
            f"cert_entries<{T}, true>",
            f"refine_test<{T}, false>",
            f"refine_test<{T}, true>",
        )
    )
    + tuple(f"refine_suspects<{c}, {t}>" for c in ("false", "true") for t in ("double", "float"))
)


@cache
def source_dir() -> Path:
    """The folder of the CUDA sources: ``emulinalg/src_cuda/`` in an installed wheel (pyproject's
    ``wheel.packages`` puts the repository's ``src_cuda/`` there), ``src_cuda/`` beside the
    package in a source checkout."""
    package = Path(__file__).resolve().parents[2]  # emulinalg/
    installed = package / "src_cuda"
    return installed if installed.is_dir() else package.parent / "src_cuda"


_locks: dict = {}
_locks_guard = threading.Lock()


def compile_lock(key):
    """The lock held while the NVRTC module ``key`` is compiled: threads that need the same
    module at once (dask's workers on a cold kernel cache) wait for one compile instead of each
    running its own; different modules still compile side by side."""
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


_first_locks: dict = {}
_warm: set = set()
_held = threading.local()  # per thread: the cold keys it runs alone, outermost first


class FirstUse:
    """What ``first_use`` yields: ``idle()`` says the body did none of its kind's work (an
    early return, a native verdict), so the kind stays cold for the next caller."""

    def __init__(self):
        self.worked = True

    def idle(self):
        self.worked = False


@contextlib.contextmanager
def first_use(key):
    """Run the body alone among the calls of its kind (``key``: a product's or a dask task's,
    with its dtypes and device) while that kind is cold, then let every later call of it run at
    once; calls of other kinds are not held up. Yields a ``FirstUse``.

    The first call of a kind compiles its kernels: the project's (NVRTC, under
    ``compile_lock``) and cupy's own elementwise and reduction kernels, which cupy compiles in
    every thread that misses its cache. Threads that start the same kind at once (dask's
    workers on a fresh machine) would each compile the same kernels side by side, on the same
    cores; here they wait for the first one and find the kernels compiled. The kind turns warm
    when its outermost first call returns having worked (not ``idle()``); a body that raises
    leaves it cold. Reentrant within a thread."""
    gate = FirstUse()
    if key not in _warm:
        with _locks_guard:
            lock = _first_locks.setdefault(key, threading.RLock())
        with lock:
            held = _held.__dict__.setdefault("keys", [])
            if key not in _warm:
                outermost = key not in held
                held.append(key)
                try:
                    yield gate
                finally:
                    held.pop()
                if outermost and gate.worked:
                    _warm.add(key)
                return
    yield gate


@cache
def source(name: str) -> str:
    """Text of ``name`` (a ``.cu`` file of :func:`source_dir`) with its local ``#include "x.cuh"``
    lines inlined, and theirs, each file once (as their ``#pragma once``).

    Inlining keeps the whole program in the text NVRTC compiles, so cupy's compile cache (keyed
    by the source text) can never pair an edited header with a stale binary.
    """
    folder, seen = source_dir(), {name}

    def inline(match: re.Match) -> str:
        if match.group(1) in seen:
            return ""
        seen.add(match.group(1))
        return _INCLUDE.sub(inline, (folder / match.group(1)).read_text())

    return _INCLUDE.sub(inline, (folder / name).read_text())


def _balanced_digits(x: int, nw: int, bits: int = WORD_BITS, top=False) -> tuple[int, ...]:
    """``x = sum_i d_i 2**(bits i)`` with every ``d_i`` in [-2**(bits-1), 2**(bits-1)) (with
    ``top``, the last one of any size): for 32 bits int32 digits, so the kernel's
    ``mul.wide.s32`` of a residue by a digit is one instruction."""
    out = []
    half, mask = 1 << (bits - 1), (1 << bits) - 1
    for _ in range(nw - 1):
        d = x & mask
        if d >= half:
            d -= 1 << bits
        out.append(d)
        x = (x - d) >> bits
    if not (top or -half <= x < half):
        raise ValueError("internal: CRT constant does not fit the digit table")
    out.append(x)
    return tuple(out)


@cache
def crt_words(n: int) -> int:
    """Words of the exact accumulator for ``n`` moduli: the weights (< P), P and the result
    (|X| <= P/4) are all below 2**(32 nw - 1), so nw balanced int32 digits hold them. The
    Gaussian moduli's P is smaller at every count (each of them is below its rank's modulus),
    so their tables take the same count (``crt_tables`` checks)."""
    return (crt_constants(n).P.bit_length() + 1 + WORD_BITS - 1) // WORD_BITS


@cache
def crt_tables(n: int, gaussian: bool = False) -> dict:
    """The ``__constant__`` tables of ``ozaki2_crt.cu`` for ``n`` moduli (of
    ``GAUSSIAN_MODULI`` with ``gaussian``; row-major, padded to 20 moduli x MAX_WORDS digits):
    weight digits, P digits, the float64 weight ratios."""
    c = crt_constants(n, gaussian)
    nw = crt_words(n)
    wdig = [[0] * MAX_WORDS for _ in range(len(MODULI))]
    for ell, w in enumerate(c.weights):
        wdig[ell][:nw] = _balanced_digits(w, nw)
    pdig = [0] * MAX_WORDS
    pdig[:nw] = _balanced_digits(c.P, nw)
    ratios = list(c.weight_ratios) + [0.0] * (len(MODULI) - n)
    return {"nw": nw, "wdig": wdig, "pdig": pdig, "ratios": ratios}


def _f64_digits_exact(n: int, nw: int, gaussian: bool = False) -> bool:
    """Whether ``nw`` radix-2**F64_DIGIT_BITS digits keep every float64 sum of
    ``ozaki2_crt_s8.cu`` exact for ``n`` moduli: per digit position, sum_l |w_l d_l| + |q d_P| <
    2**53 for any int8 residues (|w| <= 128) and the quotient they give (|q| <= sum_l 128
    ratio_l, plus one for the rounding); the last digit may exceed the radix."""
    c = crt_constants(n, gaussian)
    wd = [_balanced_digits(w, nw, F64_DIGIT_BITS, top=True) for w in c.weights]
    pd = _balanced_digits(c.P, nw, F64_DIGIT_BITS, top=True)
    qmax = int(sum(128 * r for r in c.weight_ratios)) + 2
    return all(128 * sum(abs(d[i]) for d in wd) + qmax * abs(pd[i]) < 2**53 for i in range(nw))


@cache
def crt_f64_words(n: int) -> int:
    """Radix-2**F64_DIGIT_BITS float64 digits of ``ozaki2_crt_s8.cu``'s accumulators for ``n``
    moduli: the fewest that keep every sum exact (``_f64_digits_exact``)."""
    for nw in range(1, MAX_F64_WORDS + 1):
        if _f64_digits_exact(max(n, 2), nw):
            return nw
    raise ValueError("internal: CRT constants do not fit the float64 digit table")


def crt_f64_table_arrays(n: int, gaussian: bool = False) -> dict:
    """``ozaki2_crt_s8.cu``'s own ``__constant__`` tables for ``n`` moduli (of
    ``GAUSSIAN_MODULI`` with ``gaussian``), by symbol: ``emu_wdig_f64`` (float64, 20 x
    MAX_F64_WORDS, row-major: the weights' balanced radix-2**F64_DIGIT_BITS digits) and
    ``emu_pdig_f64`` (P's); fresh copies. The kernel's digit count is the moduli's
    (``crt_f64_words``), checked here to hold the Gaussian constants too."""
    c = crt_constants(n, gaussian)
    nw = crt_f64_words(n)
    if gaussian and not _f64_digits_exact(max(n, 2), nw, True):
        raise ValueError("internal: Gaussian CRT constants do not fit the float64 digit table")
    wdig = np.zeros((len(MODULI), MAX_F64_WORDS), dtype=np.float64)
    for ell, w in enumerate(c.weights):
        wdig[ell, :nw] = _balanced_digits(w, nw, F64_DIGIT_BITS, top=True)  # < 2**53: exact
    pdig = np.zeros(MAX_F64_WORDS, dtype=np.float64)
    pdig[:nw] = _balanced_digits(c.P, nw, F64_DIGIT_BITS, top=True)
    return {"emu_wdig_f64": wdig.ravel(), "emu_pdig_f64": pdig}


# ozaki2_crt.cu's `kind` argument for each output type ("dd": double-double hi, lo).
OUT_KIND = {"float64": 0, "float32": 1, "dd": 2}


def out_pointers(outs, out_dtype, cplx):
    """The CRT kernels' four output arguments (out0..out3: hi, lo per part, in part order) from
    the output arrays ``outs`` (hi[, lo] per part): unused ones repeat the first (never
    written)."""
    if out_dtype != "dd" and cplx:
        return [outs[0], outs[0], outs[1], outs[1]]
    return list(outs) + [outs[0]] * (4 - len(outs))


def crt_table_arrays(n: int, gaussian: bool = False) -> dict:
    """``crt_tables(n, gaussian)`` as the kernels' arrays, by symbol: ``emu_wdig`` (int32, 20 x
    MAX_WORDS, row-major), ``emu_pdig`` (int32) and ``emu_ratio`` (float64); fresh copies (the
    cupy backend uploads them, the CPU stages of src_amx copy them in)."""
    t = crt_tables(n, gaussian)
    return {
        "emu_wdig": np.array(t["wdig"], dtype=np.int32).ravel(),
        "emu_pdig": np.array(t["pdig"], dtype=np.int32),
        "emu_ratio": np.array(t["ratios"], dtype=np.float64),
    }


def tables_header() -> str:
    """The text of ``src_cuda/ozaki2_tables.h``: the constants that the kernels (NVRTC, nvcc and
    src_amx's host builds) share with the Python code, written from the Python tables, their one
    source. ``python -m emulinalg.backends.cuda > src_cuda/ozaki2_tables.h`` writes it; a test
    checks that the checked-in file equals this text."""

    def array(decl, values, per_line):  # "decl = {...};", continuation lines aligned
        rows = [
            ", ".join(map(str, values[i : i + per_line])) for i in range(0, len(values), per_line)
        ]
        return f"{decl} = {{" + (",\n" + " " * (len(decl) + 4)).join(rows) + "};"

    n = len(MODULI)
    words = [1, 1] + [crt_words(i) for i in range(2, n + 1)]
    f64_words = [crt_f64_words(i) for i in range(n + 1)]
    gauss_iota = list(crt_constants(n, True).iota)
    return f"""\
// Generated by `python -m emulinalg.backends.cuda > src_cuda/ozaki2_tables.h` from the Python
// tables (emulinalg.algorithm.moduli and .scaling, emulinalg.backends.cuda): do not edit.
// tests/kernels/test_gpu_kernel_model_products.py checks that this file is the generator's output.
//
// Constants of the Scheme II kernels, shared by their CUDA sources (NVRTC and nvcc), src_amx's
// host builds of them and the Python code. No host headers: NVRTC compiles the same text.
#pragma once

// MODULI: pairwise coprime, each at most 256, so every residue fits INT8.
constexpr int kMaxModuli = {n};
{array("constexpr int kModuli[kMaxModuli]", MODULI, 10)}
// GAUSSIAN_MODULI (complex products, two GEMMs per modulus): odd, every prime factor 1 mod 4,
// and per modulus iota, the smallest square root of -1 (moduli.sqrt_minus_one).
{array("constexpr int kGaussianModuli[kMaxModuli]", GAUSSIAN_MODULI, 10)}
{array("constexpr int kGaussianIota[kMaxModuli]", gauss_iota, 10)}

// crt_words(n): 32-bit words of the exact CRT accumulator for n moduli (0 and 1 moduli are
// refused at run time; 1 keeps their template instances valid), and the most of them.
{array("constexpr int kCrtWords[kMaxModuli + 1]", words, 11)}
constexpr int kMaxCrtWords = {max(words)};
// MAX_WORDS: digits per modulus in the CRT kernels' __constant__ tables (crt_tables).
constexpr int kDigitStride = {MAX_WORDS};
// ozaki2_crt_s8.cu: bits of its float64 digits, crt_f64_words(n) (digits per weight) and the
// size of its digit tables (MAX_F64_WORDS).
constexpr int kCrtF64Bits = {F64_DIGIT_BITS};
{array("constexpr int kCrtF64Words[kMaxModuli + 1]", f64_words, 11)}
constexpr int kF64DigitStride = {MAX_F64_WORDS};

// scaling.BOUND_MAX: the largest entry of the accurate-mode bound operand (it fits INT8).
constexpr long long kBoundMax = {BOUND_MAX};
"""
