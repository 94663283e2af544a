"""What a newcomer meets first (issue #28's rough edges): plans in the ``emulinalg`` logger,
type information shipped with the package, and the matmul demo's progress lines without
warnings (``demo scf``: tests/harness/test_scf.py; ``demo dask``:
tests/backends/dask/test_dask_examples.py; the one-line hint for a missing extra:
tests/harness/test_missing_extras.py)."""

from __future__ import annotations

import logging
import pathlib
import sys
import typing

import numpy as np
import pytest
from _helpers import assert_quiet_demo

import emulinalg


def test_every_plan_is_logged_at_debug_level(caplog):
    a, b = np.arange(12.0).reshape(3, 4), np.ones((4, 2))
    with caplog.at_level(logging.DEBUG, logger="emulinalg"), emulinalg.config(strategy="eager"):
        c = emulinalg.matmul(a, b, precision="float64")
    assert np.array_equal(c, a @ b)  # small integers: exact either way
    logged = [r.getMessage() for r in caplog.records if r.name == "emulinalg"]
    assert logged == [str(emulinalg.last_plan())]
    assert "scheme=OzakiII(" in logged[0]


def test_no_log_records_unless_asked(caplog):
    with caplog.at_level(logging.INFO, logger="emulinalg"):
        emulinalg.matmul(np.ones((2, 2)), np.ones((2, 2)))
    assert not [r for r in caplog.records if r.name == "emulinalg"]


def test_the_package_ships_its_type_information():
    assert (pathlib.Path(emulinalg.__file__).parent / "py.typed").is_file()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="typing.get_overloads is 3.11+")
@pytest.mark.parametrize("name", ["matmul", "tensordot", "vecdot"])
def test_products_are_typed_for_both_explain_forms(name):
    fn = getattr(emulinalg, name)
    forms = typing.get_overloads(fn)
    assert len(forms) == 2
    returns = {f.__annotations__["explain"]: f.__annotations__["return"] for f in forms}
    assert returns == {"Literal[False]": "Array", "Literal[True]": "tuple[Array, Plan]"}
    b = np.ones((2, 3)) if name == "vecdot" else np.ones((3, 2))
    kw = {"axes": 1} if name == "tensordot" else {}
    out, plan = fn(np.ones((2, 3)), b, explain=True, **kw)
    assert plan is emulinalg.last_plan() and out.shape[0] == 2


# --------------------------------------------------------------------------------------------
# The demos: a line per step on stderr, and no warning from the libraries they drive (each
# demo's default run in full is marked slow; the quick variants run the same code smaller).
# --------------------------------------------------------------------------------------------


def test_matmul_demo_reports_each_row_without_warnings(recwarn, caplog, capfd):
    _, lines = assert_quiet_demo(["demo", "--size", "48", "--repeat", "1"], recwarn, caplog, capfd)
    # the exact reference and every emulated row announce themselves: 2 dtypes x (1 + 6 / 4)
    assert len(lines) == 1 + 6 + 1 + 4
    assert lines[0].startswith("float64 phi=1 N=48: exact reference")


def test_matmul_demo_rows_stop_timing_after_their_budget():
    from emulinalg.harness import demo

    calls = []
    assert demo._timed(lambda: calls.append(1) or "x", 3)[0] == "x" and len(calls) == 3
    calls.clear()
    demo._timed(lambda: calls.append(1), 3, budget=0.0)  # at least one run, then stop
    assert len(calls) == 1


@pytest.mark.slow
def test_matmul_demo_default_without_warnings(recwarn, caplog, capfd):
    _, lines = assert_quiet_demo(["demo"], recwarn, caplog, capfd)
    assert len(lines) == 12
