"""The library's layout tells the book's story (issue 22 item 5).

* lib/tpp's top level holds only the packages of the book's parts, the layers across them, and
  the few modules every part shares (:data:`ALLOWED`);
* each part of ``_toc.yml`` (but the appendix) has its package (:data:`PART_PACKAGES`);
* no import cycle inside ``tpp`` (a static graph of module-level imports, from ``ast``);
* every ``tpp`` import in the chapters, solutions and exercises resolves (module and names).
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "tpp"

PART_PACKAGES = {
    "Tensor parallelism": ("collectives", "tensor_parallel"),
    "Pipeline parallelism": ("pipeline",),
    "Data parallelism and composition": ("data_parallel", "planner"),
    "Long context and mixture of experts": ("context_parallel", "expert_parallel"),
    "Serving": ("serving",),
    "On a real engine": ("distributed",),
}
"""Each part of the book -> the packages that hold its chapters' library code."""

ACROSS = {"costs", "symbolic", "grading", "site"}
"""Layers every part uses: closed forms, SymPy derivations, the grader, the pages' explorers."""

SHARED_MODULES = {"__init__.py", "cli.py", "hardware.py", "models.py"}
"""Top-level modules: the package, the ``tpp`` command, the hardware and model presets."""

ALLOWED = {p for pkgs in PART_PACKAGES.values() for p in pkgs} | ACROSS | SHARED_MODULES


def _toc_parts() -> list[str]:
    captions = []
    for line in (ROOT / "_toc.yml").read_text().splitlines():
        s = line.strip()
        if s.startswith("- caption:"):
            captions.append(s.split(":", 1)[1].strip())
    return captions


def test_top_level_holds_only_the_allowed_packages_and_modules():
    here = {p.name for p in LIB.iterdir()
            if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    assert here - ALLOWED == set(), (
        f"lib/tpp has {sorted(here - ALLOWED)} at its top level: put each module in the package "
        "of its part of the book (tests/test_layout.py lists them)")
    assert ALLOWED - here == set(), f"missing from lib/tpp: {sorted(ALLOWED - here)}"


def test_every_part_of_the_book_has_its_package():
    parts = [c for c in _toc_parts() if c != "Appendix"]
    assert parts, "no parts found in _toc.yml"
    assert set(parts) == set(PART_PACKAGES), (
        f"_toc.yml parts {parts} and tests/test_layout.py's PART_PACKAGES "
        f"{list(PART_PACKAGES)} differ: give the new part its package")
    for part in parts:
        for pkg in PART_PACKAGES[part]:
            init = LIB / pkg / "__init__.py"
            assert init.exists(), f"part {part!r}: lib/tpp/{pkg}/ is not a package"
            doc = ast.get_docstring(ast.parse(init.read_text()))
            assert doc, f"lib/tpp/{pkg}/__init__.py has no docstring saying what it holds"


# ------------------------------------------------------------------------- import cycles
def _module_name(path: Path) -> str:
    rel = path.relative_to(LIB.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(LIB.rglob("*.py"))}


def _resolve(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(tree: ast.Module, deferred: bool):
    """The import statements of ``tree``: at module level, or (``deferred``) anywhere, inside
    functions too; never under ``if TYPE_CHECKING``."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif deferred or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def import_graph(deferred: bool = False) -> dict[str, set[str]]:
    """Module -> the tpp modules it imports: at module level (and in module-level ``if``/``try``
    blocks), or with ``deferred`` also the imports inside functions — an import moved into a
    function to dodge a cycle still makes one, it only runs later. ``from pkg import name``
    counts ``pkg.name`` when that is a module, else ``pkg``; importing ``a.b.c`` also runs ``a``
    and ``a.b``, which count too (but not a module's own parent packages)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in _imports(tree, deferred):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(mod, node, is_pkg)
                for a in node.names:
                    full = f"{src}.{a.name}"
                    targets.append(full if full in mods else src)
            for t in targets:
                if not t.startswith("tpp"):
                    continue
                parts = t.split(".")
                for i in range(1, len(parts) + 1):
                    dep = ".".join(parts[:i])
                    if dep in mods and dep != mod and not mod.startswith(dep + "."):
                        deps.add(dep)
        graph[mod] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_find_cycle_finds_a_cycle_and_none_where_there_is_none():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_relative_and_from_imports():
    g = import_graph()
    assert "tpp.collectives.group" in g["tpp.collectives"]          # from .group import ...
    assert "tpp.pipeline.simulate" in g["tpp.pipeline"]
    assert "tpp.collectives" in g["tpp.context_parallel.attention"]  # from tpp.collectives import


def test_the_graph_sees_deferred_imports_only_when_asked():
    lazy = {m: d for m, d in import_graph(deferred=True).items()}
    eager = import_graph()
    assert "tpp.serving.demo" in lazy["tpp.cli"]       # `tpp demo` imports it when it runs
    assert "tpp.serving.demo" not in eager["tpp.cli"]


def test_no_import_cycle_inside_tpp():
    cycle = find_cycle(import_graph())
    assert cycle is None, ("import cycle: " + " -> ".join(cycle or [])
                           + ": move the shared code to a module both can import")


def test_no_import_cycle_even_through_deferred_imports():
    cycle = find_cycle(import_graph(deferred=True))
    assert cycle is None, ("import cycle through a deferred import: " + " -> ".join(cycle or [])
                           + ": move the shared code to a module both can import")


# ------------------------------------------------------------------ the notebooks' imports
def _notebooks() -> list[Path]:
    return sorted(p for d in ("chapters", "solutions", "exercises")
                  for p in (ROOT / d).glob("*.ipynb"))


def _tpp_imports(nb: Path) -> list[ast.ImportFrom | ast.Import]:
    out = []
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue  # an exercise's blank (`...` left for the learner) may not parse
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tpp"):
                out.append(node)
            elif isinstance(node, ast.Import) and any(a.name.startswith("tpp")
                                                      for a in node.names):
                out.append(node)
    return out


@pytest.mark.parametrize("nb", _notebooks(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_tpp_import_of_a_notebook_resolves(nb):
    for node in _tpp_imports(nb):
        if isinstance(node, ast.Import):
            for a in node.names:
                importlib.import_module(a.name)
            continue
        mod = importlib.import_module(node.module)
        for a in node.names:
            if a.name == "*":
                continue
            if not hasattr(mod, a.name):
                importlib.import_module(f"{node.module}.{a.name}")  # a submodule
