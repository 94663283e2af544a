"""A missing extra, as a user meets it (issue #28): every command that needs one prints one line
naming the ``pip install ".[extra]"`` to run and exits with status 2, before any other output
and without a traceback; library functions raise ModuleNotFoundError with that line.

In process, ``sys.modules[name] = None`` makes a module unimportable; the subprocess runs put a
directory first on PYTHONPATH whose packages of those names raise ModuleNotFoundError, as an
absent package does, and run the real entry points (``python -m emulinalg``, pytest, Sphinx).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import emulinalg
from emulinalg.harness import bench_cli, suite
from emulinalg.harness.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
SCF = 'demo scf needs pyscf (not installed): pip install ".[scf]"'
PLOT = 'bench --plot needs matplotlib (not installed): pip install ".[bench]"'
DASK = 'demo dask needs dask.array (not installed): pip install ".[dask]"'


def _block(monkeypatch, *names):
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)  # import name -> ModuleNotFoundError


def _only_line(capsys, line):
    out, err = capsys.readouterr()
    assert (out, err) == ("", line + "\n")


# --------------------------------------------------------------------------------------------
# commands, in process
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("blocked", "line"),
    [
        (("dask", "dask.array"), DASK),
        (("distributed",), 'demo dask needs distributed (not installed): pip install ".[dask]"'),
    ],
    ids=["dask", "distributed"],
)
def test_demo_dask(monkeypatch, capsys, blocked, line):
    _block(monkeypatch, *blocked)
    assert cli(["demo", "dask"]) == 2
    _only_line(capsys, line)


def test_demo_scf_says_so_before_any_progress_line(monkeypatch, capsys):
    _block(monkeypatch, "pyscf")
    assert cli(["demo", "scf", "--molecule", "water"]) == 2
    _only_line(capsys, SCF)


def test_bench_plot_checks_matplotlib_before_measuring(monkeypatch, capsys, tmp_path):
    _block(monkeypatch, "matplotlib")

    def measure(*args, **kw):
        raise AssertionError("bench measured before checking for matplotlib")

    monkeypatch.setattr(bench_cli, "run", measure)
    assert cli(["bench", "--quick", "--plot", str(tmp_path / "p.png")]) == 2
    _only_line(capsys, PLOT)
    records = tmp_path / "r.jsonl"
    records.write_text("")  # --records reads nothing before the check either
    assert cli(["bench", "--records", str(records), "--plot", str(tmp_path / "p.png")]) == 2
    _only_line(capsys, PLOT)


def test_calibrate_and_grade_name_the_cuda_extra(monkeypatch, capsys):
    _block(monkeypatch, "cupy")
    assert cli(["calibrate", "--backend", "cupy"]) == 2
    _only_line(capsys, 'calibrate needs cupy (not installed): pip install ".[cuda]"')
    # without a backend named: the GPU's, unless an AMX host is here to measure instead
    from emulinalg import _calibration

    monkeypatch.setattr(_calibration, "device_name", lambda b: None)
    assert cli(["calibrate"]) == 2
    _only_line(capsys, 'calibrate needs cupy (not installed): pip install ".[cuda]"')
    assert cli(["grade", "--backend", "cupy"]) == 2
    _only_line(capsys, 'grade: --backend cupy needs cupy (not installed): pip install ".[cuda]"')


@pytest.mark.parametrize(
    ("family", "module", "extra"), [("cupy", "cupy", "cuda"), ("dask", "dask.array", "dask")]
)
def test_bench_skips_a_family_naming_its_extra(monkeypatch, capsys, family, module, extra):
    _block(monkeypatch, *{module, module.split(".")[0]})
    assert cli(["bench", "--backend", family, "--sizes", "16", "-q"]) == 1
    hint = f'--backend {family} needs {module} (not installed): pip install ".[{extra}]"'
    assert f"bench: skipping backend {family}: {hint}\n" in capsys.readouterr().err


def test_out_of_core_names_each_extra_it_needs(monkeypatch, capsys):
    pytest.importorskip("dask.array")
    from emulinalg.examples import out_of_core

    prog = "python -m emulinalg.examples.out_of_core"
    _block(monkeypatch, "distributed", "cupy")
    assert out_of_core.main([]) == 2
    _only_line(capsys, f'{prog} needs distributed (not installed): pip install ".[dask]"')
    # dask's threaded scheduler needs no distributed; --cupy needs cupy
    assert out_of_core.main(["--threads", "1", "--cupy"]) == 2
    _only_line(capsys, f'{prog} --cupy needs cupy (not installed): pip install ".[cuda]"')


# --------------------------------------------------------------------------------------------
# library functions and modules
# --------------------------------------------------------------------------------------------


def test_scf_functions_raise_the_hint(monkeypatch):
    from emulinalg.examples import molecules, scf_demo

    _block(monkeypatch, "pyscf")
    said = []
    with pytest.raises(ModuleNotFoundError, match=r"^demo scf needs pyscf \(not installed\)"):
        scf_demo.run(progress=said.append)
    assert said == []  # before the first progress line
    with pytest.raises(ModuleNotFoundError) as info:
        molecules.integrals("water")
    assert str(info.value) == (
        'emulinalg.examples.molecules needs pyscf (not installed): pip install ".[scf]"'
    )


def test_grade_run_raises_the_hint(monkeypatch):
    _block(monkeypatch, "cupy")
    with pytest.raises(ModuleNotFoundError) as info:
        suite.run_suite(backend="cupy")
    assert str(info.value) == (
        "emulinalg.harness.suite.run_suite(backend='cupy') needs cupy (not installed): "
        'pip install ".[cuda]"'
    )


@pytest.mark.parametrize(
    ("module", "blocked", "line"),
    [
        ("emulinalg.harness.plots", ("matplotlib",),
         'emulinalg.harness.plots needs matplotlib (not installed): pip install ".[bench]"'),
        ("emulinalg.dask", ("dask", "dask.array"),
         'emulinalg.dask needs dask.array (not installed): pip install ".[dask]"'),
    ],
    ids=["plots", "dask"],
)  # fmt: skip
def test_modules_of_an_extra_raise_the_hint_on_import(monkeypatch, module, blocked, line):
    monkeypatch.delitem(sys.modules, module, raising=False)  # restored afterwards
    _block(monkeypatch, *blocked)
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module(module)
    assert str(info.value) == line


# --------------------------------------------------------------------------------------------
# the real entry points, in a subprocess: exactly one line on stderr, no traceback
# --------------------------------------------------------------------------------------------


def _absent(tmp_path, *names) -> dict:
    """An environment in which ``names`` (top-level packages) import as if not installed."""
    shim = tmp_path / "absent"
    for name in names:
        (shim / name).mkdir(parents=True)
        (shim / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {name!r}'!r}, name={name!r})\n"
        )
    # the shim first, then this emulinalg's checkout (the one under test), then the rest
    paths = [str(shim), str(Path(emulinalg.__file__).parents[1]), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _run(args, env, cwd=ROOT):
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("argv", "absent", "line"),
    [
        (["demo", "dask"], ("dask", "distributed"), DASK),
        (["demo", "scf"], ("pyscf",), SCF),
        (["bench", "--plot", "p.png"], ("matplotlib",), PLOT),
    ],
    ids=["demo dask", "demo scf", "bench --plot"],
)
def test_python_m_emulinalg(tmp_path, argv, absent, line):
    done = _run(["-m", "emulinalg", *argv], _absent(tmp_path, *absent), cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
    assert not (tmp_path / "p.png").exists()


def test_pytest_without_hypothesis(tmp_path):
    env = _absent(tmp_path, "hypothesis")
    argv = ["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--co", "-q"]
    done = _run([*argv, str(ROOT / "tests" / "core" / "test_extras.py")], env)
    line = 'tests/conftest.py needs hypothesis (not installed): pip install ".[test]"'
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"Exit: {line}\n")  # pytest's


def test_sphinx_without_the_docs_extra(tmp_path):
    pytest.importorskip("sphinx")
    env = _absent(tmp_path, "myst_parser")
    done = _run(["-m", "sphinx", "-q", "-b", "html", str(ROOT / "docs"), str(tmp_path / "html")],
                env)  # fmt: skip
    line = 'docs/conf.py needs myst_parser (not installed): pip install ".[docs]"'
    assert (done.returncode, done.stderr) == (2, line + "\n")
