"""Type hints of the public API (issue #28): every public function and method annotated, the
``Precision`` alias equal to what ``precision=`` accepts, and, where mypy is installed, the types
a caller's code gets (the products return the operands' array type, also for prepared ones)."""

from __future__ import annotations

import inspect
import textwrap
import typing
from pathlib import Path

import pytest

import emulinalg
from emulinalg import _api, _precision, _timing, inputs, reference

PUBLIC_MODULES = (emulinalg, reference, inputs, _timing)


def _public_callables():
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                members = [("__init__", obj.__dict__.get("__init__"))]
                members += [(n, m) for n, m in vars(obj).items() if not n.startswith("_")]
                for member, fn in members:
                    fn = fn.fget if isinstance(fn, property) else fn
                    if inspect.isfunction(fn):
                        yield f"{module.__name__}.{name}.{member}", fn
            elif inspect.isfunction(obj):
                yield f"{module.__name__}.{name}", obj


def test_every_public_function_is_annotated():
    missing = []
    for name, fn in _public_callables():
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.name != "self"]
        unannotated = [p.name for p in params if p.annotation is inspect.Parameter.empty]
        if sig.return_annotation is inspect.Signature.empty:
            unannotated.append("return")
        if unannotated:
            missing.append(f"{name}: {', '.join(unannotated)}")
    assert missing == []


def _flatten(alias):
    """The members of a nested Union / Literal alias."""
    args = typing.get_args(alias)
    return [x for arg in args for x in _flatten(arg)] if args else [alias]


def test_the_precision_alias_is_what_precision_accepts():
    assert _api.Precision is _precision.Precision  # one alias, where the levels are defined
    args = _flatten(_precision.Precision)
    names = {a for a in args if isinstance(a, str)}
    assert names == set(_precision.LEVELS) | {_precision.NATIVE}
    classes = {a for a in args if isinstance(a, type)}
    assert classes == set(_precision.SCHEMES) | {int, type(None)}
    for value in [*names, 24, None, emulinalg.OzakiII(moduli=14), emulinalg.BF16xN()]:
        _precision.parse(value)  # each kind the alias names is accepted


# What a caller's code gets, as mypy infers it (reveal_type lines, in order).
CLIENT = """
import numpy as np

import emulinalg
from emulinalg import reference

a = np.ones((2, 2))
reveal_type(emulinalg.matmul(a, a))
reveal_type(emulinalg.tensordot(a, a, axes=1, explain=True))
reveal_type(emulinalg.matmul(emulinalg.prepare(a), a))
reveal_type(emulinalg.last_plan())
reveal_type(emulinalg.get_cost_model("numpy"))
reveal_type(reference.exact_matmul(a, a)[0])
with emulinalg.config(strategy="eager") as cfg:
    reveal_type(cfg)
emulinalg.vecdot(a, a, precision="float16")
emulinalg.config(scheme="ozaki3")
"""
REVEALED = [
    "numpy.ndarray[tuple[int, int], numpy.dtype[numpy.float64]]",
    "tuple[numpy.ndarray[tuple[int, int], numpy.dtype[numpy.float64]], emulinalg._plan.Plan]",
    "numpy.ndarray[tuple[int, int], numpy.dtype[numpy.float64]]",
    "emulinalg._plan.Plan | None",
    "emulinalg._cost.CostModel | None",
    "numpy.ndarray[tuple[Any, ...], numpy.dtype[Any]]",
    "emulinalg._config.Config",
]


def test_callers_get_the_array_types(tmp_path, monkeypatch):
    api = pytest.importorskip("mypy.api", reason="mypy is not installed")
    (tmp_path / "client.py").write_text(textwrap.dedent(CLIENT))
    # this checkout's emulinalg (an editable install's import hook is invisible to mypy)
    monkeypatch.setenv("MYPYPATH", str(Path(emulinalg.__file__).resolve().parents[1]))
    argv = ["--cache-dir", str(tmp_path / "cache"), "--follow-imports=silent"]
    out, err, _ = api.run([*argv, "--ignore-missing-imports", str(tmp_path / "client.py")])
    lines = out.splitlines()
    revealed = [ln.split('Revealed type is "')[1][:-1] for ln in lines if "Revealed" in ln]
    numpy2 = "tuple[int, int]" in out  # numpy >= 2.2 types the shape; older: Any
    if not numpy2:
        pytest.skip("this numpy's stubs do not type shapes")
    assert revealed == REVEALED, out + err
    errors = [ln for ln in lines if ": error:" in ln]
    assert len(errors) == 2, out  # precision="float16", scheme="ozaki3"
    assert "vecdot" in errors[0] and '"config"' in errors[1]
