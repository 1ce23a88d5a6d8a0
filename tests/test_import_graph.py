"""The package's import graph has no cycles, points down the layers only, and no module imports another
module's private name.

Layers: the order written in CONTRIBUTING.md's "Code layout" section (:data:`LAYER_LINE`), bottom first; a
module of a layer imports only modules of its own or a lower layer (the package's ``__init__`` and
``__main__`` sit above every layer).

Every ``.py`` file under ``zerounlearn_editor/`` is parsed with :mod:`ast` (nothing is imported).
Edges, for cycles: every ``import`` / ``from ... import`` statement anywhere in a module (at module
level AND inside functions, methods, ``if``/``try`` blocks: a lazy import still couples the two
modules) that names a module of the package:

* ``import zerounlearn_editor.a.b`` and ``from zerounlearn_editor.a import b`` / ``from .a import b``
  give an edge to ``a.b`` when ``a/b.py`` (or ``a/b/__init__.py``) exists, else to ``a`` (its
  ``__init__``), the module the imported name is read from;
* relative imports are resolved against the importing module's package;
* the parent packages whose ``__init__`` Python runs implicitly before a submodule are NOT edges
  (otherwise every ``__init__`` that re-exports a submodule would close a cycle with it).

Private names: ``from x import _name`` where ``x`` is another module of the package and ``_name``
is not a submodule (dunder names such as ``__version__`` are allowed) fails; share such a helper
by making it public or moving it to the module that owns it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

PACKAGE = "zerounlearn_editor"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
LAYOUT_DOC = ROOT.parent / "CONTRIBUTING.md"
LAYER_LINE = re.compile(r"^Layers, bottom to top: (.+)$", re.MULTILINE)
"""The layout doc's line ``Layers, bottom to top: `support` < `data` < ...``: the layer order tested here."""

Edges = Dict[str, Set[str]]
PrivateImport = Tuple[str, int, str, str]  # (importing module, line, imported-from module, name)


def package_modules(root: Path, package: str) -> Dict[str, Path]:
    """``{dotted module name: file}`` of every ``.py`` file under ``root`` (``a/__init__.py`` -> ``a``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> Optional[str]:
    """The absolute module a ``from ... import`` statement reads from (``None``: outside relative imports)."""
    if not node.level:
        return node.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if node.level - 1 > len(package):
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: Path, package: str) -> Tuple[Edges, List[PrivateImport]]:
    """The package's import edges (module-level and function-level) and its cross-module private imports."""
    modules = package_modules(root, package)
    edges: Edges = {name: set() for name in modules}
    private: List[PrivateImport] = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, path, node)
                if source is None or source not in modules:
                    continue
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in modules:
                        targets.append(submodule)
                        continue
                    targets.append(source)
                    dunder = alias.name.startswith("__") and alias.name.endswith("__")
                    if alias.name.startswith("_") and not dunder and source != name:
                        private.append((name, node.lineno, source, alias.name))
            edges[name].update(t for t in targets if t in modules and t != name)
    return edges, private


def find_cycle(edges: Edges) -> Optional[List[str]]:
    """One cycle ``[a, b, ..., a]`` of the directed graph ``edges``, or ``None`` when it is acyclic."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    stack: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def _write(root: Path, files: Dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_checker_finds_a_lazy_cycle_and_a_private_import(tmp_path):
    root = _write(tmp_path / "pkg", {
        "__init__.py": "from .a import f\n",
        "a.py": "from .sub import b\n\ndef f():\n    return b.g()\n",
        "sub/__init__.py": "",
        "sub/b.py": "def g():\n    from ..a import _helper\n    return _helper\n",
        "c.py": "import pkg.sub.b\nfrom . import a\n",
    })
    edges, private = import_graph(root, "pkg")
    assert edges["pkg.a"] == {"pkg.sub.b"} and edges["pkg.sub.b"] == {"pkg.a"}
    assert edges["pkg.c"] == {"pkg.sub.b", "pkg.a"} and edges["pkg"] == {"pkg.a"}
    assert find_cycle(edges) in (["pkg.a", "pkg.sub.b", "pkg.a"], ["pkg.sub.b", "pkg.a", "pkg.sub.b"])
    assert private == [("pkg.sub.b", 2, "pkg.a", "_helper")]


def test_checker_accepts_an_acyclic_package(tmp_path):
    root = _write(tmp_path / "pkg", {
        "__init__.py": "from .a import f\n__all__ = ['f']\n",
        "a.py": "from ._impl import g\nfrom .b import __doc__ as doc\n\ndef f():\n    return g()\n",
        "_impl.py": "def g():\n    return 1\n",
        "b.py": "def _own():\n    return 2\n",
    })
    edges, private = import_graph(root, "pkg")
    assert find_cycle(edges) is None and private == []
    assert edges["pkg.a"] == {"pkg._impl", "pkg.b"}


def test_the_package_has_no_import_cycle():
    edges, _ = import_graph(ROOT, PACKAGE)
    assert len(edges) > 40, "the walk found too few modules"
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle (module- or function-level imports): " + " -> ".join(cycle)


def test_no_module_imports_another_modules_private_name():
    _, private = import_graph(ROOT, PACKAGE)
    assert not private, "private names imported across modules: " + "; ".join(
        f"{m}:{line} imports {name} from {source}" for m, line, source, name in private)


APPLICATIONS = ("harness", "cli")
"""Subpackages that are applications of the library: they may import it, the library never imports them."""


def test_the_library_never_imports_its_applications():
    """Every module outside ``harness/`` and ``cli/`` (the engine, the methods, data, evaluation, integrations,
    support) imports nothing from ``harness/`` or ``cli/``, at module level or inside a function."""
    edges, _ = import_graph(ROOT, PACKAGE)

    def is_app(module: str) -> bool:
        return any(module == f"{PACKAGE}.{a}" or module.startswith(f"{PACKAGE}.{a}.") for a in APPLICATIONS)

    library = [m for m in edges if not is_app(m) and m != f"{PACKAGE}.__main__"]
    assert len(library) > 40
    wrong = sorted(f"{m} -> {t}" for m in library for t in edges[m] if is_app(t))
    assert not wrong, "the library imports an application module: " + "; ".join(wrong)


def test_layout_has_no_loose_modules():
    """The package root holds only ``__init__``/``__main__``; everything else lives in a subpackage."""
    loose = sorted(p.name for p in ROOT.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not loose, loose


def documented_layers(text: str) -> List[str]:
    """The subpackages of the doc's layer line, bottom first (``ValueError`` when the line is missing)."""
    match = LAYER_LINE.search(text)
    if match is None:
        raise ValueError(f"no line matching {LAYER_LINE.pattern!r} in the layout doc")
    return [part.strip().strip("`") for part in match.group(1).rstrip(".").split("<")]


def upward_imports(edges: Edges, package: str, layers: List[str]) -> List[str]:
    """``"a -> b"`` for each import of a module ``b`` in a higher layer than ``a``'s (the package's own
    ``__init__``/``__main__`` rank above every layer); a module in no listed layer is an error."""
    top = len(layers)

    def rank(module: str) -> int:
        parts = module.split(".")
        if len(parts) == 1 or parts[1] == "__main__":
            return top
        if parts[1] not in layers:
            raise ValueError(f"{module}: subpackage {parts[1]!r} is in no layer {layers}")
        return layers.index(parts[1])

    return sorted(f"{m} -> {t}" for m, targets in edges.items() for t in targets if rank(t) > rank(m))


def test_checker_finds_an_upward_import(tmp_path):
    root = _write(tmp_path / "pkg", {
        "__init__.py": "from .high import mod\n",
        "low/__init__.py": "", "low/base.py": "def f():\n    from ..high.mod import g\n",
        "high/__init__.py": "", "high/mod.py": "from ..low.base import f\ng = 1\n",
    })
    edges, _ = import_graph(root, "pkg")
    assert upward_imports(edges, "pkg", ["low", "high"]) == ["pkg.low.base -> pkg.high.mod"]
    assert upward_imports(edges, "pkg", ["high", "low"]) == ["pkg.high.mod -> pkg.low.base"]
    assert documented_layers("x\nLayers, bottom to top: `low` < `high`.\n") == ["low", "high"]


def test_imports_point_down_the_documented_layers():
    layers = documented_layers(LAYOUT_DOC.read_text(encoding="utf-8"))
    subpackages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert sorted(layers) == subpackages, f"the layer line must name every subpackage once: {subpackages}"
    edges, _ = import_graph(ROOT, PACKAGE)
    wrong = upward_imports(edges, PACKAGE, layers)
    assert not wrong, "imports against the layer order " + " < ".join(layers) + ": " + "; ".join(wrong)
