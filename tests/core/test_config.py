"""``emulinalg.config`` scoping (nesting, threads, asyncio tasks) and ``last_plan()``."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import emulinalg
import emulinalg.backends
from emulinalg import OzakiI, OzakiII
from emulinalg.inputs import phi_matrix

A = phi_matrix((6, 10), 1, seed=1)
B = phi_matrix((10, 4), 1, seed=2)


def scheme_of_product(precision=None, a=A, b=B):
    emulinalg.matmul(a, b, precision=precision)
    return emulinalg.last_plan().scheme


# ----------------------------------------------------------------------------------------------
# last_plan
# ----------------------------------------------------------------------------------------------


def test_plan_attributes_and_one_line_str(eager):
    emulinalg.matmul(A, B, precision=OzakiII(moduli=12))
    plan = emulinalg.last_plan()
    assert isinstance(plan, emulinalg.Plan)
    assert plan.backend == emulinalg.backends.for_namespace(np).name  # numpy, or amx on AMX
    assert isinstance(plan.precision, str)
    assert plan.scheme == "OzakiII(moduli=12, mode=accurate)"
    assert isinstance(plan.gemms, int) and plan.gemms >= 12
    assert plan.k_block is None or isinstance(plan.k_block, int)
    assert plan.fallback is None
    assert isinstance(plan.notes, (tuple, list)) and all(isinstance(n, str) for n in plan.notes)
    text = str(plan)
    assert "\n" not in text and "OzakiII(moduli=12" in text


def test_plan_for_default_float64_product_under_eager(eager):
    assert "OzakiII" in scheme_of_product()
    assert "OzakiII" in scheme_of_product("float64")
    assert emulinalg.last_plan().precision == "float64"


def test_plan_for_default_float64_product():
    """The default (``strategy="performant"``) either emulates with Scheme II or says why not."""
    scheme = scheme_of_product()
    plan = emulinalg.last_plan()
    assert "OzakiII" in scheme or (scheme == "native" and plan.fallback), str(plan)


def test_plan_for_float32_product(eager):
    emulinalg.matmul(A.astype(np.float32), B.astype(np.float32))
    plan = emulinalg.last_plan()
    assert plan.precision == "float32" and "Ozaki" in plan.scheme


def test_plan_native(eager):
    assert scheme_of_product("native") == "native"
    assert emulinalg.last_plan().gemms == 0


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "bool"])
def test_plan_integer_inputs_are_native(dtype, eager):
    a = (A > 0).astype(dtype)
    b = (B > 0).astype(dtype)
    for precision in (None, "float64", OzakiII(moduli=16)):
        c = emulinalg.matmul(a, b, precision=precision)
        assert c.dtype == (a @ b).dtype
        assert emulinalg.last_plan().scheme == "native"


def test_plan_reflects_each_product(eager):
    emulinalg.matmul(A, B, precision=OzakiI(slices=5))
    assert emulinalg.last_plan().scheme == "OzakiI(slices=5)"
    emulinalg.tensordot(A, B, axes=1, precision=OzakiII(moduli=9, mode="fast"))
    assert emulinalg.last_plan().scheme == "OzakiII(moduli=9, mode=fast)"
    emulinalg.vecdot(A, A, precision="native")
    assert emulinalg.last_plan().scheme == "native"


def test_plan_reports_nonfinite_fallback(eager):
    a = A.copy()
    a[0, 0] = np.nan
    emulinalg.matmul(a, B)
    plan = emulinalg.last_plan()
    assert plan.fallback, str(plan)


# ----------------------------------------------------------------------------------------------
# config: scoping
# ----------------------------------------------------------------------------------------------


def test_nested_contexts(eager):
    outer = OzakiII(moduli=8)
    inner = OzakiI(slices=3)
    with emulinalg.config(precision=outer):
        assert scheme_of_product() == str(outer)
        with emulinalg.config(precision=inner):
            assert scheme_of_product() == str(inner)
            with emulinalg.config(precision="native"):
                assert scheme_of_product() == "native"
            assert scheme_of_product() == str(inner)
        assert scheme_of_product() == str(outer)
        # an explicit argument beats the context
        assert scheme_of_product(OzakiII(moduli=11)) == "OzakiII(moduli=11, mode=accurate)"
    assert "OzakiII" in scheme_of_product()


def test_nested_contexts_only_override_what_they_set():
    with emulinalg.config(strategy="eager"):
        with emulinalg.config(scheme="ozaki1"):
            assert emulinalg.get_config().strategy == "eager"
            assert "OzakiI(" in scheme_of_product()
        with emulinalg.config(precision=OzakiII(moduli=7)):
            assert emulinalg.get_config().strategy == "eager"
    assert emulinalg.get_config().strategy == "performant"


def test_context_is_restored_after_an_exception(eager):
    with pytest.raises(RuntimeError), emulinalg.config(precision="native"):
        raise RuntimeError
    assert "OzakiII" in scheme_of_product()


def test_scheme_family_for_levels(eager):
    with emulinalg.config(scheme="ozaki1"):
        assert scheme_of_product().startswith("OzakiI(")
        assert scheme_of_product("float64").startswith("OzakiI(")
        # an explicit scheme is not affected by the family
        assert scheme_of_product(OzakiII(moduli=10)).startswith("OzakiII(")
    with emulinalg.config(scheme="ozaki2"):
        assert scheme_of_product().startswith("OzakiII(")


@pytest.mark.parametrize(
    "kwargs", [{"strategy": "fast"}, {"scheme": "ozaki3"}, {"scheme": None}, {"precision": "fp32"}]
)
def test_bad_config_values(kwargs):
    with pytest.raises((ValueError, TypeError)), emulinalg.config(**kwargs):
        pass


def test_threads_see_their_own_config(eager):
    """Two threads with different precision contexts, interleaved, each see their own."""
    specs = {"t1": OzakiII(moduli=6), "t2": OzakiI(slices=2)}
    barrier = threading.Barrier(2)
    seen: dict[str, list[str]] = {name: [] for name in specs}
    errors = []

    def work(name):
        try:
            with emulinalg.config(strategy="eager", precision=specs[name]):
                for _ in range(20):
                    barrier.wait(timeout=30)
                    seen[name].append(scheme_of_product())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(name,)) for name in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for name, spec in specs.items():
        assert seen[name] == [str(spec)] * 20
    # and the main thread's context was never touched
    assert "OzakiII" in scheme_of_product()
    assert emulinalg.get_config().precision is None


def test_new_threads_start_from_the_defaults():
    result = {}
    with emulinalg.config(precision="native"):
        t = threading.Thread(
            target=lambda: result.setdefault("p", emulinalg.get_config().precision)
        )
        t.start()
        t.join()
    assert result["p"] is None


def test_asyncio_tasks_see_their_own_config(eager):
    async def task(spec, n):
        out = []
        with emulinalg.config(precision=spec):
            for _ in range(n):
                await asyncio.sleep(0)
                out.append(scheme_of_product())
        return out

    async def main():
        return await asyncio.gather(
            task(OzakiII(moduli=5), 10), task("native", 10), task(OzakiI(slices=4), 10)
        )

    r1, r2, r3 = asyncio.run(main())
    assert r1 == ["OzakiII(moduli=5, mode=accurate)"] * 10
    assert r2 == ["native"] * 10
    assert r3 == ["OzakiI(slices=4)"] * 10


# ----------------------------------------------------------------------------------------------
# config: the environment
# ----------------------------------------------------------------------------------------------


def test_environment_variables_give_the_config_defaults():
    from emulinalg._config import from_environ

    unset = {"amx": None, "cupy_kernels": True, "fused": True, "dask_mode": None}
    assert from_environ({}) == unset
    off = {"EMULINALG_AMX": "0", "EMULINALG_CUPY_KERNELS": "0", "EMULINALG_FUSED": "0"}
    assert from_environ({**off, "EMULINALG_DASK_MODE": " DD "}) == {
        "amx": "0", "cupy_kernels": False, "fused": False, "dask_mode": "dd",
    }  # fmt: skip
    on = {"EMULINALG_AMX": "1", "EMULINALG_CUPY_KERNELS": "1", "EMULINALG_FUSED": ""}
    assert from_environ({**on, "EMULINALG_DASK_MODE": " "}) == {**unset, "amx": "1"}


def test_environment_is_read_when_the_config_is_asked_for(monkeypatch):
    """A variable set after import counts for the next call: inside a ``config()`` block too,
    and in a new thread (which starts from the environment's defaults, not from the block)."""
    monkeypatch.delenv("EMULINALG_DASK_MODE", raising=False)
    assert emulinalg.get_config().dask_mode is None
    with emulinalg.config(strategy="eager"):
        monkeypatch.setenv("EMULINALG_DASK_MODE", "shared")
        cfg = emulinalg.get_config()
        assert (cfg.strategy, cfg.dask_mode) == ("eager", "shared")
        seen = {}
        t = threading.Thread(target=lambda: seen.setdefault("cfg", emulinalg.get_config()))
        t.start()
        t.join()
        assert (seen["cfg"].strategy, seen["cfg"].dask_mode) == ("performant", "shared")
    monkeypatch.setenv("EMULINALG_AMX", "0")
    assert emulinalg.get_config().amx == "0"
    assert emulinalg.backends.for_namespace(np).name == "numpy"


def test_a_call_reads_the_config_once(monkeypatch):
    """The steps of one product call see the values the call started with (the config is read
    once per call, ``_config.one_reading``), a ``config()`` block entered inside the call
    counts there, and the next call reads the environment again."""
    from emulinalg import _config

    monkeypatch.delenv("EMULINALG_DASK_MODE", raising=False)
    seen = []

    @_config.one_reading
    def call(inner=False):
        seen.append(emulinalg.get_config().dask_mode)
        monkeypatch.setenv("EMULINALG_DASK_MODE", "dd")  # changed during the call
        seen.append(emulinalg.get_config().dask_mode)
        with emulinalg.config(strategy="eager"):
            cfg = emulinalg.get_config()
            seen.append((cfg.strategy, cfg.dask_mode))
        if not inner:
            call(inner=True)  # an inner call: the outer one's reading
        return emulinalg.get_config().strategy

    assert call() == "performant"
    assert seen == [None, None, ("eager", "dd"), None, None, ("eager", "dd")]
    assert emulinalg.get_config().dask_mode == "dd"  # after the call: read again
    # the product calls take one reading: a variable set before the call counts for it
    monkeypatch.setenv("EMULINALG_AMX", "0")
    assert np.array_equal(emulinalg.matmul(A, B), np.matmul(A, B))
    assert emulinalg.last_plan().backend == "numpy"


@pytest.mark.parametrize(
    "call",
    [
        lambda: emulinalg.matmul(A, B),
        lambda: emulinalg.tensordot(A, B, axes=1),
        lambda: emulinalg.vecdot(A, A),
        lambda: emulinalg.einsum("ij,jk,kl->il", A, B, B.T),
        lambda: emulinalg.dot(A, B),
    ],
    ids=["matmul", "tensordot", "vecdot", "einsum", "dot"],
)
def test_each_product_call_reads_the_environment_once(call, monkeypatch):
    from emulinalg import _config

    reads = []
    real = _config.from_environ
    monkeypatch.setattr(_config, "from_environ", lambda *a: reads.append(1) or real(*a))
    call()
    assert len(reads) == 1


def test_only_the_config_reads_the_environment():
    """The library's modules read ``emulinalg.get_config()``, not ``os.environ``."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = [p for p in (root / "emulinalg").rglob("*.py") if "harness" not in p.parts]
    files += list((root / "backends").rglob("*.py")) if (root / "backends").is_dir() else []
    readers = [
        str(p.relative_to(root))
        for p in files
        if p.name != "_config.py" and any(w in p.read_text() for w in ("os.environ", "getenv"))
    ]
    assert readers == []


def test_last_plan_is_per_thread(eager):
    emulinalg.matmul(A, B, precision=OzakiII(moduli=13))
    other = {}

    def work():
        other["before"] = emulinalg.last_plan()
        emulinalg.matmul(A, B, precision="native")
        other["after"] = emulinalg.last_plan().scheme

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert other["after"] == "native"
    assert emulinalg.last_plan().scheme == "OzakiII(moduli=13, mode=accurate)"


def test_fallback_counts_is_a_mapping():
    counts = emulinalg.fallback_counts()
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in counts.items())
