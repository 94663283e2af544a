"""The tooling stays out of the library: no module of the library imports ``emulinalg.harness``
(only ``python -m emulinalg``'s ``__main__`` and the examples do), and the harness's modules
import one another without a circle. Read from the sources' import statements, function-level
imports included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "emulinalg"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "backends":  # the source layout: installed as emulinalg.backends
        parts.insert(0, "emulinalg")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module a file imports (``from . import x`` counts as the module ``pkg.x``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _library_files():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).parts
        if rel[0] in ("harness", "examples") or rel == ("__main__.py",):
            continue
        yield path
    backends = ROOT / "backends"
    if backends.is_dir():
        yield from sorted(backends.rglob("*.py"))


def test_the_library_never_imports_the_harness():
    offenders = {
        _module_name(path): sorted(m for m in _imports(path) if m.startswith("emulinalg.harness"))
        for path in _library_files()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_harness_imports_form_no_circle():
    files = sorted((PKG / "harness").glob("*.py")) + [PKG / "__main__.py"]
    names = {_module_name(p): p for p in files}
    graph = {name: sorted(_imports(p) & set(names) - {name}) for name, p in names.items()}
    assert "emulinalg.harness.cli" in graph["emulinalg.__main__"]

    done: set[str] = set()

    def visit(name, path):
        if name in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(name) :] + [name]))
        if name in done:
            return
        for dep in graph[name]:
            visit(dep, path + [name])
        done.add(name)

    for name in graph:
        visit(name, [])
