"""The ``precision=`` argument: accepted forms, rejected forms, and the explicit scheme specs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import emulinalg
from emulinalg import OzakiI, OzakiII
from emulinalg.inputs import phi_matrix
from emulinalg.reference import accuracy

# ----------------------------------------------------------------------------------------------
# rejected values: the message must say what is accepted
# ----------------------------------------------------------------------------------------------

BAD_PRECISIONS = [
    ("fp64", ValueError),
    ("FLOAT64", ValueError),
    ("", ValueError),
    (-3, ValueError),
    (0, ValueError),
    (1000, ValueError),
    (3.5, TypeError),
    (53.0, TypeError),
    (True, TypeError),
    ([53], TypeError),
    (object(), TypeError),
]


def _names_accepted_forms(message):
    return all(word in message for word in ("float64", "float32", "native", "OzakiI", "OzakiII"))


@pytest.mark.parametrize(("bad", "exc"), BAD_PRECISIONS, ids=[repr(b) for b, _ in BAD_PRECISIONS])
@pytest.mark.parametrize("op", ["matmul", "tensordot", "vecdot"])
def test_bad_precision_values(bad, exc, op):
    a = np.ones((3, 3))
    fn = getattr(emulinalg, op)
    with pytest.raises(exc) as info:
        fn(a, a, precision=bad)
    assert _names_accepted_forms(str(info.value)), str(info.value)


@pytest.mark.parametrize(
    ("bad", "exc"), BAD_PRECISIONS[:7], ids=[repr(b) for b, _ in BAD_PRECISIONS[:7]]
)
def test_bad_precision_values_in_config_and_namespace(bad, exc):
    with pytest.raises(exc) as info, emulinalg.config(precision=bad):
        pass
    assert _names_accepted_forms(str(info.value))
    with pytest.raises(exc):
        emulinalg.namespace(np.ones(2), precision=bad)


def test_bad_precision_is_rejected_for_integer_inputs_too():
    a = np.ones((3, 3), dtype=np.int32)
    with pytest.raises(ValueError):
        emulinalg.matmul(a, a, precision="fp64")


@pytest.mark.parametrize(
    ("make", "exc", "words"),
    [
        (lambda: OzakiII(moduli=1), ValueError, ("moduli", "20")),
        (lambda: OzakiII(moduli=21), ValueError, ("moduli", "20")),
        (lambda: OzakiII(moduli=0), ValueError, ("moduli",)),
        (lambda: OzakiII(moduli=15.0), TypeError, ("moduli",)),
        (lambda: OzakiII(moduli="15"), TypeError, ("moduli",)),
        (lambda: OzakiII(moduli=15, mode="slow"), ValueError, ("accurate", "fast")),
        (lambda: OzakiII(moduli=15, mode=None), ValueError, ("accurate", "fast")),
        (lambda: OzakiI(slices=0), ValueError, ("slices",)),
        (lambda: OzakiI(slices=-2), ValueError, ("slices",)),
        (lambda: OzakiI(slices=14), ValueError, ("slices",)),
        (lambda: OzakiI(slices=2.5), TypeError, ("slices",)),
    ],
)
def test_bad_scheme_specs(make, exc, words):
    with pytest.raises(exc) as info:
        make()
    msg = str(info.value)
    assert all(w in msg for w in words), msg


# ----------------------------------------------------------------------------------------------
# the scheme specs themselves
# ----------------------------------------------------------------------------------------------


def test_scheme_specs_are_frozen_values():
    s = OzakiII(moduli=16)
    assert s == OzakiII(moduli=16, mode="accurate")
    assert hash(s) == hash(OzakiII(16))
    assert str(s) == "OzakiII(moduli=16, mode=accurate)"
    assert str(OzakiII(moduli=14, mode="fast")) == "OzakiII(moduli=14, mode=fast)"
    assert str(OzakiI(slices=7)) == "OzakiI(slices=7)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.moduli = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        OzakiI(slices=3).slices = 4


@pytest.mark.parametrize("n", [2, 20])
def test_scheme_spec_limits_are_accepted(n):
    OzakiII(moduli=n)
    OzakiII(moduli=np.int64(n), mode="fast")


# ----------------------------------------------------------------------------------------------
# accepted values work, and do what they say
# ----------------------------------------------------------------------------------------------

GOOD = [
    None,
    "float64",
    "float32",
    "native",
    24,
    40,
    53,
    OzakiI(slices=4),
    OzakiII(moduli=12),
    OzakiII(moduli=16, mode="fast"),
]


@pytest.mark.parametrize("precision", GOOD, ids=[str(p) for p in GOOD])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_accepted_precisions_keep_the_native_dtype(precision, dtype, eager):
    a = phi_matrix((5, 9), 1, dtype=dtype, seed=1)
    b = phi_matrix((9, 4), 1, dtype=dtype, seed=2)
    c = emulinalg.matmul(a, b, precision=precision)
    assert type(c) is np.ndarray and c.dtype == np.dtype(dtype) and c.shape == (5, 4)
    np.testing.assert_allclose(c, a @ b, rtol=1e-1, atol=1e-2)


@pytest.mark.parametrize("bits", [10, 24, 40, 53, 60])
def test_integer_precision_gives_that_many_componentwise_bits(bits, eager):
    """``precision=int``: at least that many correct bits relative to |A||B|, before the
    final rounding to float64 (which adds at most 2**-53 |C| <= 2**-53 |A||B|)."""
    a = phi_matrix((24, 300), 2, seed=3)
    b = phi_matrix((300, 24), 2, seed=4)
    c = emulinalg.matmul(a, b, precision=bits)
    acc = accuracy(c, a, b)
    assert acc["bits_cw"] >= -math.log2(2.0**-bits + 2.0**-53), acc


def test_float32_level_on_float64_inputs(eager):
    a = phi_matrix((16, 200), 1, seed=5)
    b = phi_matrix((200, 16), 1, seed=6)
    c = emulinalg.matmul(a, b, precision="float32")
    assert c.dtype == np.float64
    # the float32 level: 24 bits relative to |A||B| (before the final rounding)
    assert accuracy(c, a, b)["bits_cw"] >= -math.log2(2.0**-24 + 2.0**-53)


def test_native_precision_is_numpy(rng):
    a = rng.standard_normal((7, 9))
    b = rng.standard_normal((9, 3))
    np.testing.assert_array_equal(emulinalg.matmul(a, b, precision="native"), a @ b)


def test_levels_beyond_native_use_the_most_accurate_scheme_rather_than_native():
    """precision=80 on float64 cannot be certified on every entry with 20 moduli, but native
    (53 bits) is worse still: the plan takes the largest configuration and says so."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    c = emulinalg.matmul(a, b, precision=80)
    plan = emulinalg.last_plan()
    assert plan.scheme == "OzakiII(moduli=20, mode=accurate)", str(plan)
    assert "not certified" in plan.fallback and plan.native_entries == 0
    assert accuracy(c, a, b)["bits_cw"] >= accuracy(a @ b, a, b)["bits_cw"]
