"""The accuracy contract (docs/precision.md), measured against the exact reference.

* ``precision=None`` / ``"float64"`` on float64 inputs (and ``"float32"`` on float32 inputs):
  both effective-bits measures (max elementwise relative, max componentwise) are no worse than
  numpy's native product on the same inputs. No slack.
* Explicit schemes: accuracy does not decrease as moduli (Scheme II) or slices (Scheme I) are
  added, and Scheme II does not break down beyond 16 moduli.

Inputs are the field's φ-matrices, m = n = 32 and k from 1 to 4096, so that the exact
reference stays cheap. Products run with ``strategy="eager"``: the numpy backend never predicts
emulation to be faster than BLAS, so the default strategy would compare native with native.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import emulinalg
from emulinalg import OzakiI, OzakiII
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy, exact_matmul

PHIS = [0, 0.5, 1, 2, 4]
KS = [1, 7, 64, 1000, pytest.param(4096, marks=pytest.mark.slow)]
SEEDS = [0, pytest.param(1, marks=pytest.mark.slow)]
M = N = 48


@functools.cache
def case(dtype, phi, k, equal_parts=False, seed=0):
    """Operands, the exact reference and numpy's own accuracy (computed once per input)."""
    seed = int(1000 * phi) + k + 100_000 * seed
    a = phi_matrix((M, k), phi, dtype=dtype, seed=seed)
    b = phi_matrix((k, N), phi, dtype=dtype, seed=seed + 7)
    if equal_parts:  # complex with |Re| ~ |Im|: a single φ-matrix times (1 +- i)(1 + δ)
        a, b = (_equal_parts(x.real, seed + i).astype(dtype) for i, x in enumerate((a, b)))
    for x in (a, b):
        x.setflags(write=False)
    ref = exact_matmul(a, b)
    native = accuracy(np.matmul(a, b), a, b, ref=ref)
    return a, b, ref, native


def _equal_parts(x, seed):
    rng = np.random.default_rng(seed)
    sign = np.where(rng.random(x.shape) < 0.5, -1.0, 1.0)
    return x + 1j * sign * x * (1 + 1e-3 * rng.standard_normal(x.shape))


def emulated(a, b, precision=None, **cfg):
    with emulinalg.config(strategy="eager", **cfg):
        c = emulinalg.matmul(a, b, precision=precision)
        plan = emulinalg.last_plan()
    return c, plan


def assert_no_worse_than_native(c, a, b, ref, native, plan):
    acc = accuracy(c, a, b, ref=ref)
    info = f"emulated {acc}\nnative {native}\nplan {plan}"
    assert acc["nonfinite_mismatch"] == 0, info
    assert acc["bits_maxrel"] >= native["bits_maxrel"], info
    assert acc["bits_cw"] >= native["bits_cw"], info
    return acc


# ----------------------------------------------------------------------------------------------
# the levels: no worse than native
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scheme", ["auto", "ozaki1"])
@pytest.mark.parametrize("precision", [None, "float64"])
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("phi", PHIS)
def test_float64_level_no_worse_than_native(phi, k, precision, scheme, seed):
    a, b, ref, native = case("float64", phi, k, seed=seed)
    c, plan = emulated(a, b, precision, scheme=scheme)
    assert c.dtype == np.float64
    assert_no_worse_than_native(c, a, b, ref, native, plan)
    if phi <= 2:  # the emulation itself must have run (not a silent native product)
        assert "Ozaki" in plan.scheme, str(plan)
        assert ("OzakiI(" in plan.scheme) == (scheme == "ozaki1"), str(plan)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scheme", ["auto", "ozaki1"])
@pytest.mark.parametrize("precision", [None, "float32"])
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("phi", PHIS)
def test_float32_level_no_worse_than_native(phi, k, precision, scheme, seed):
    a, b, ref, native = case("float32", phi, k, seed=seed)
    c, plan = emulated(a, b, precision, scheme=scheme)
    assert c.dtype == np.float32
    assert_no_worse_than_native(c, a, b, ref, native, plan)
    if phi <= 2:
        assert "Ozaki" in plan.scheme, str(plan)


@pytest.mark.parametrize("scheme", ["auto", "ozaki1"])
@pytest.mark.parametrize("precision", [None, "float64"])
@pytest.mark.parametrize("k", [1, 7, 64, pytest.param(1000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("phi", [0, 1, 4])
def test_complex128_equal_parts_no_worse_than_native(phi, k, precision, scheme):
    a, b, ref, native = case("complex128", phi, k, equal_parts=True)
    c, plan = emulated(a, b, precision, scheme=scheme)
    assert c.dtype == np.complex128
    assert_no_worse_than_native(c, a, b, ref, native, plan)


@pytest.mark.parametrize("precision", [None, "float32"])
@pytest.mark.parametrize("k", [7, 1000])
@pytest.mark.parametrize("phi", [0, 2])
def test_complex64_no_worse_than_native(phi, k, precision):
    a, b, ref, native = case("complex64", phi, k)
    c, plan = emulated(a, b, precision)
    assert c.dtype == np.complex64
    assert_no_worse_than_native(c, a, b, ref, native, plan)


@given(
    dtype=st.sampled_from(["float64", "float32", "complex128", "complex64"]),
    m=st.integers(1, 12),
    k=st.integers(1, 300),
    n=st.integers(1, 12),
    phi=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 4.0]),
    scheme=st.sampled_from(["auto", "ozaki1"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_levels_no_worse_than_native_random_shapes(dtype, m, k, n, phi, scheme, seed):
    """The measured promise on random shapes: every input, both measures, no slack."""
    a = phi_matrix((m, k), phi, dtype=dtype, seed=seed)
    b = phi_matrix((k, n), phi, dtype=dtype, seed=seed + 1)
    ref = exact_matmul(a, b)
    native = accuracy(a @ b, a, b, ref=ref)
    c, plan = emulated(a, b, scheme=scheme)
    assert c.dtype == a.dtype
    assert_no_worse_than_native(c, a, b, ref, native, plan)


@pytest.mark.parametrize("phi", [0, 2])
def test_default_strategy_no_worse_than_native(phi):
    """Whatever the default strategy decides (emulate or not), the contract holds."""
    a, b, ref, native = case("float64", phi, 1000)
    c = emulinalg.matmul(a, b)
    assert_no_worse_than_native(c, a, b, ref, native, emulinalg.last_plan())


@pytest.mark.parametrize("phi", [0, 1])
def test_tensordot_and_vecdot_float64_level(phi, eager):
    """The other two products reduce to the same GEMM and keep the contract."""
    a, b, ref, native = case("float64", phi, 1000)
    c = emulinalg.tensordot(a, b, axes=1)
    assert_no_worse_than_native(c, a, b, ref, native, emulinalg.last_plan())
    # vecdot of rows of a with columns of b gives the diagonal of a @ b
    d = emulinalg.vecdot(a, b.T)
    assert d.shape == (M,)
    err = np.abs((d - np.diag(ref[0])) - np.diag(ref[1]))
    nat = np.abs((np.vecdot(a, b.T) - np.diag(ref[0])) - np.diag(ref[1]))
    bound = np.diag(np.abs(a) @ np.abs(b))
    assert (err / bound).max() <= max((nat / bound).max(), 2.0**-53)


# ----------------------------------------------------------------------------------------------
# explicit schemes: more moduli / slices never hurt
# ----------------------------------------------------------------------------------------------


def _ceiling(a, b, ref):
    """Bits of the correctly rounded exact product (the best any float64 result can do)."""
    return accuracy(ref[0], a, b, ref=ref)


GARBAGE_BITS = 8
NOISE_BITS = 0.5


def assert_non_decreasing(counts, accs, ceiling, what):
    """Bits never drop as the count grows, except by noise once within a bit of the
    correctly rounded result's.

    Until a result has a few correct bits its error is whatever the truncation leaves (at
    φ = 4, 2 slices give errors of ~250 |A||B|, within the a-priori bound, while 1 slice
    returns mostly zeros, error <= |A||B|): 2 vs 3 moduli or 1 vs 2 slices may then differ
    either way, so the requirement starts at GARBAGE_BITS.
    """
    for key in ("bits_maxrel", "bits_cw"):
        bits = [acc[key] for acc in accs]
        top = ceiling[key] - 1
        for i in range(1, len(bits)):
            if bits[i - 1] < GARBAGE_BITS:
                continue
            # at the ceiling only noise is left; below it, no drop beyond noise: Scheme II
            # rounds its operands to nearest, so the largest error is a random draw that each
            # modulus scales down ~16x on average, not at every entry
            ok = bits[i] >= top if bits[i - 1] >= top else bits[i] >= bits[i - 1] - NOISE_BITS
            assert ok, (
                f"{what}: {key} drops from {bits[i - 1]:.2f} at {counts[i - 1]} to {bits[i]:.2f} "
                f"at {counts[i]} (correctly rounded: {ceiling[key]:.2f})\n"
                + "\n".join(f"  {n}: {b:.2f}" for n, b in zip(counts, bits))
            )
        # and the largest count is far better than the smallest
        assert bits[-1] >= bits[0] + 20, (what, key, bits)


@pytest.mark.parametrize("mode", ["accurate", "fast"])
@pytest.mark.parametrize("k", [64, pytest.param(1000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("phi", [0, 1, 4])
def test_ozaki2_more_moduli_never_hurt(phi, k, mode):
    a, b, ref, native = case("float64", phi, k)
    counts = list(range(2, 21))
    accs = []
    for n in counts:
        c, plan = emulated(a, b, OzakiII(moduli=n, mode=mode))
        assert plan.scheme == str(OzakiII(moduli=n, mode=mode)), str(plan)
        acc = accuracy(c, a, b, ref=ref)
        assert acc["nonfinite_mismatch"] == 0, (n, acc)
        accs.append(acc)
    ceiling = _ceiling(a, b, ref)
    assert_non_decreasing(counts, accs, ceiling, f"OzakiII(mode={mode}) phi={phi} k={k}")
    # no reconstruction failure past 16 moduli (a float approximation of P breaks there and
    # gives errors far above |A||B|); the monotonicity above already requires 16..20 to improve
    for n, acc in zip(counts, accs):
        if n >= 16:
            assert acc["bits_cw"] >= 20, (n, acc)
    if phi <= 1 and mode == "accurate":
        assert accs[-1]["bits_cw"] >= native["bits_cw"]
        assert accs[-1]["bits_maxrel"] >= native["bits_maxrel"]


@pytest.mark.parametrize("k", [64, pytest.param(1000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("phi", [0, 1, 4])
def test_ozaki1_more_slices_never_hurt(phi, k):
    a, b, ref, native = case("float64", phi, k)
    counts = list(range(1, 13))
    accs = []
    for p in counts:
        c, plan = emulated(a, b, OzakiI(slices=p))
        assert plan.scheme == str(OzakiI(slices=p)), str(plan)
        acc = accuracy(c, a, b, ref=ref)
        assert acc["nonfinite_mismatch"] == 0, (p, acc)
        accs.append(acc)
    assert_non_decreasing(counts, accs, _ceiling(a, b, ref), f"OzakiI phi={phi} k={k}")
    if phi <= 1:
        assert accs[-1]["bits_cw"] >= native["bits_cw"]
        assert accs[-1]["bits_maxrel"] >= native["bits_maxrel"]


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_explicit_schemes_other_dtypes_converge(dtype):
    """float32 and complex inputs with the largest explicit schemes reach native accuracy."""
    a, b, ref, native = case(dtype, 1, 64)
    for scheme in (OzakiII(moduli=20), OzakiI(slices=12)):
        c, plan = emulated(a, b, scheme)
        assert c.dtype == np.dtype(dtype)
        assert_no_worse_than_native(c, a, b, ref, native, plan)
