"""The package's modules import each other without a cycle.

Components find their collaborators as constructor arguments and hear each
other through signals, so no module needs to import one that imports it back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import scrapy_polite

PACKAGE = Path(scrapy_polite.__file__).parent


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def run_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports the module can run: its body's, inside ``try`` and ``if`` blocks, classes and
    functions too (an import deferred to a function still ties the two modules together), but not
    under ``if TYPE_CHECKING:`` (never run)."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _type_checking(node):
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))


def imported(name: str, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> set[str]:
    """The package's modules *node* (in module *name*) imports.

    ``from package import submodule`` imports the submodule; any other name is the
    package's own. A package's ``__init__`` that Python runs on the way to a submodule is
    not counted: it is in ``sys.modules`` before it runs, so it cannot be half-loaded by it.
    """
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = name if known[name].name == "__init__.py" else name.rpartition(".")[0]
            anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def module_imports(name: str, source: str, known: dict[str, Path]) -> set[str]:
    """The package's modules that module *name*, of *source*, imports."""
    return {target for node in run_imports(ast.parse(source)) for target in imported(name, node, known)}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: module_imports(name, path.read_text(encoding="utf-8"), known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of *graph* with more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next((e for e in edges if e not in index or e in on_stack), None)
            if nxt is not None and nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
                continue
            if nxt is not None:
                low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_every_import_but_those_for_type_checking() -> None:
    known = {name: Path(*name.split(".")).with_suffix(".py") for name in ("pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.e")}
    known["pkg"] = Path("pkg/__init__.py")
    source = """
from typing import TYPE_CHECKING
from pkg import b, VERSION
from . import c as see
try:
    import pkg.d.x
except ImportError:
    pass
if TYPE_CHECKING:
    from pkg.e import E
def later():
    from pkg import e
"""
    assert module_imports("pkg.a", source, known) == {"pkg", "pkg.b", "pkg.c", "pkg.d", "pkg.e"}
    graph = import_graph()
    assert {"scrapy_polite.downloader.attempts", "scrapy_polite.downloader.pace"} <= graph[
        "scrapy_polite.downloader.middleware"]


def test_no_import_cycle_between_the_package_modules() -> None:
    """Imports inside functions count too: the package defers some (Redis, Prometheus, the
    report, the lab) so that what a crawl does not use is not loaded, never to hide a cycle."""
    assert cycles(import_graph()) == []
