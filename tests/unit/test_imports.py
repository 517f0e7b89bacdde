"""The package's import graph: no cycles between modules or between packages, the mock upstream
wired in only where services are built, and no other project's private modules.

Imports are read from the sources (every `import` statement, those under `TYPE_CHECKING` and
inside functions too), so a cycle hidden behind a deferred import still counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gateway"
# The modules that may import the mock upstream: the CLI's command and the wiring of services.
MOCK_IMPORTERS = {"gateway.cli", "gateway.services"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[name] |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module in modules and node.level == 0:
                submodules = {f"{node.module}.{alias.name}" for alias in node.names}
                found = submodules & modules.keys()
                # `from package import submodule` imports the submodule, not the package's names
                graph[name] |= found if found == submodules else found | {node.module}
    return graph


def package_of(module: str) -> str:
    """`gateway.routing` for `gateway.routing.pins`; a top-level module is its own package."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {package_of(name): set() for name in graph}
    for name, imported in graph.items():
        packages[package_of(name)] |= {package_of(other) for other in imported} - {package_of(name)}
    return packages


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


def test_no_package_imports_itself_through_others() -> None:
    assert cycles(package_graph(import_graph())) == []


def test_the_mock_upstream_is_wired_in_where_services_are_built() -> None:
    importers = {
        name
        for name, imported in import_graph().items()
        if package_of(name) != "mock_upstream" and any(package_of(m) == "mock_upstream" for m in imported)
    }
    assert importers <= MOCK_IMPORTERS


def private_imports(source: str) -> list[str]:
    """The modules `source` imports whose dotted path has a private part (`redis._parsers`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [
            name for name in names if name != "__future__" and any(p.startswith("_") for p in name.split("."))
        ]
    return found


def test_no_private_module_of_a_library_is_imported() -> None:
    used = {
        str(path.relative_to(PACKAGE)): private_imports(path.read_text()) for path in PACKAGE.rglob("*.py")
    }
    assert {path: names for path, names in used.items() if names} == {}


def test_private_imports_are_found() -> None:
    source = "from __future__ import annotations\nimport redis._parsers\nfrom uvicorn._types import Scope\n"
    assert private_imports(source) == ["redis._parsers", "uvicorn._types"]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_cycles_are_found(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected


def test_package_cycles_are_found_through_their_modules() -> None:
    graph = {
        "gateway.auth.cache": {"gateway.db.keys"},
        "gateway.db.keys": {"gateway.auth.secrets"},
        "gateway.auth.secrets": set(),
    }
    assert cycles(package_graph(graph)) == [["gateway.auth", "gateway.db"]]
