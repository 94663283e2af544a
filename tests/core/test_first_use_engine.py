"""The engine's product passes through its backend's ``first_use`` (issue #24, "first use"):
a product that went native compiled none of its kind's kernels and leaves the kind cold; the
first emulated product of the kind warms it. The numpy backend is given the cupy backend's
gate (``emulinalg.backends.cuda.first_use``) here."""

from __future__ import annotations

import numpy as np

import emulinalg
import emulinalg.backends
from emulinalg.backends import cuda


def test_a_native_product_leaves_the_kind_cold(monkeypatch):
    token, kinds = object(), []

    def first_use(what):
        kinds.append(what)
        return cuda.first_use(("engine test", token, *what))

    monkeypatch.setattr(emulinalg.backends.for_namespace(np), "first_use", first_use,
                        raising=False)  # fmt: skip
    a = np.random.default_rng(3).standard_normal((16, 16))
    with emulinalg.config(strategy="performant"):
        emulinalg.matmul(a, a)
    assert emulinalg.last_plan().scheme == "native"  # the cost model's verdict at this size
    (kind,) = kinds
    assert kind[:5] == ("matmul", "float64", "float64", False, False)
    assert ("engine test", token, *kind) not in cuda._warm
    with emulinalg.config(strategy="eager"):
        emulinalg.matmul(a, a)
    assert emulinalg.last_plan().scheme.startswith("OzakiII")
    assert kinds == [kind, kind]  # the same kind: dtypes, request and family, not the strategy
    assert ("engine test", token, *kind) in cuda._warm
    with emulinalg.config(strategy="eager"):  # another requested scheme: another kind
        emulinalg.matmul(a, a, precision=emulinalg.OzakiII(moduli=9))
    assert kinds[-1] != kind and ("engine test", token, *kinds[-1]) in cuda._warm
