"""The compiled build's module list (setup.py's HOT_PATH): compilable, and compiled where expected.

mypyc compiles neither async generators, nor msgspec Structs (their class options), nor Litestar
handlers (Litestar reads their signatures), and a compiled coroutine must not suspend inside an
except handler or a finally block (mypyc keeps no exception state per coroutine); a hot-path
module that gains one would break only the slow compiled build, so this plain check fails first. With GATEWAY_EXPECT_COMPILED=1
(`make test-compiled`) every listed module must have been imported from its C extension, and
from its source otherwise.
"""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.machinery
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hot_path() -> list[str]:
    setup = ast.parse((ROOT / "setup.py").read_text())
    for node in setup.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "HOT_PATH":
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py defines no HOT_PATH")


HOT_PATH = _hot_path()
COMPILED = os.environ.get("GATEWAY_EXPECT_COMPILED") == "1"


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _suspends(nodes: list[ast.stmt]) -> bool:
    return any(
        isinstance(inner, ast.Await | ast.AsyncFor | ast.AsyncWith)
        for node in nodes
        for inner in ast.walk(node)
    )


def _uncompilable(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        # A compiled coroutine that suspends while it handles an exception leaves that exception
        # as the thread's current one for every other task (sys.exc_info(), a bare raise), and
        # a request was seen failing with another task's ConnectionRefusedError.
        if isinstance(node, ast.ExceptHandler) and _suspends(node.body):
            found.append(f"await in an except handler, line {node.lineno}")
        if isinstance(node, ast.Try | ast.TryStar) and _suspends(node.finalbody):
            found.append(f"await in a finally block, line {node.finalbody[0].lineno}")
        if isinstance(node, ast.AsyncFunctionDef) and any(
            isinstance(inner, ast.Yield | ast.YieldFrom) for inner in ast.walk(node)
        ):
            found.append(f"async generator {node.name}")
        if isinstance(node, ast.ClassDef) and any("Struct" in ast.unparse(base) for base in node.bases):
            found.append(f"msgspec Struct {node.name}")
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            names = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
            if names & {"get", "post", "put", "patch", "delete", "route"}:
                found.append(f"Litestar handler {node.name}")
    return found


@pytest.mark.parametrize("path", HOT_PATH)
def test_hot_path_module_is_compilable(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text())
    assert _uncompilable(tree) == []


def test_no_interpreted_module_subclasses_a_compiled_class() -> None:
    """A compiled class refuses interpreted subclasses at run time ("interpreted classes cannot
    inherit from compiled"): the subclass must be on the hot path too."""
    hot = {_module_name(path) for path in HOT_PATH}
    subclasses = []
    for source in sorted((ROOT / "gateway").rglob("*.py")):
        path = source.relative_to(ROOT).as_posix()
        if path in HOT_PATH:
            continue
        tree = ast.parse(source.read_text())
        compiled_names = {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module in hot
            for alias in node.names
        }
        subclasses += [
            f"{path}: {node.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and {ast.unparse(b) for b in node.bases} & compiled_names
        ]
    assert subclasses == []


def test_the_check_finds_what_mypyc_refuses() -> None:
    source = """
import msgspec
from litestar import get

class Usage(msgspec.Struct):
    tokens: int

async def frames():
    yield b""

@get("/x")
async def handler() -> None: ...

async def cleanup(reply):
    try:
        await reply.read()
    except OSError:
        await reply.aclose()
    finally:
        await reply.aclose()
"""
    assert _uncompilable(ast.parse(source)) == [
        "msgspec Struct Usage",
        "async generator frames",
        "Litestar handler handler",
        "await in a finally block, line 20",
        "await in an except handler, line 17",
    ]


@pytest.mark.parametrize("path", HOT_PATH)
def test_hot_path_module_is_what_the_run_expects(path: str) -> None:
    """Compiled in `make test-compiled`, the checkout's own source in `make test-pure`."""
    module = importlib.import_module(_module_name(path))
    origin = Path(module.__file__ or "")
    if COMPILED:
        assert origin.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), origin
    else:
        assert origin == ROOT / path


def _nodes_in_functions(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node inside a function (or method) of the module: what runs per call."""
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from ast.walk(function)


def _enum_reads_in_functions(module: object, tree: ast.Module) -> list[str]:
    """`Kind.MEMBER` read inside a function, where `Kind` is an Enum: on CPython 3.11 that read
    goes through EnumType's `__getattr__` hook every time (~1,400 instructions from compiled
    code), where a module-level constant is read once."""
    found = []
    for node in _nodes_in_functions(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = getattr(module, node.value.id, None)
            if isinstance(owner, enum.EnumType) and node.attr in owner.__members__:
                found.append(f"{ast.unparse(node)}, line {node.lineno}")
    return found


@pytest.mark.parametrize("path", HOT_PATH)
def test_hot_path_functions_read_no_enum_member_through_its_class(path: str) -> None:
    module = importlib.import_module(_module_name(path))
    assert _enum_reads_in_functions(module, ast.parse((ROOT / path).read_text())) == []


def test_the_enum_check_finds_a_member_read_in_a_function() -> None:
    source = """
KIND = ProviderKind.MOCK

def is_mock(provider):
    return provider.kind is ProviderKind.MOCK
"""
    module = importlib.import_module("gateway.settings")
    assert _enum_reads_in_functions(module, ast.parse(source)) == ["ProviderKind.MOCK, line 5"]


_STATIC_MODULES = ("time", "hashlib", "msgspec")  # their functions are called on the request path


def _module_calls_in_functions(tree: ast.Module) -> list[str]:
    """`time.perf_counter()` or `msgspec.json.encode(...)` called inside a function: the compiled
    build looks each module attribute up on every call (~250 instructions a level), where a `Final`
    module-level name bound to the function is a static read."""
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name in _STATIC_MODULES
    }
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or function.name == "__init__":
            continue  # an object's set-up runs once, not per request
        raised = {id(node.exc) for node in ast.walk(function) if isinstance(node, ast.Raise)}
        for node in ast.walk(function):
            if (
                not isinstance(node, ast.Call)
                or not isinstance(node.func, ast.Attribute)
                or id(node) in raised
            ):
                continue  # an exception built to be raised is off the request's way
            root = node.func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported:
                found.append(f"{ast.unparse(node.func)}, line {node.lineno}")
    return found


@pytest.mark.parametrize("path", HOT_PATH)
def test_hot_path_functions_call_no_function_through_its_module(path: str) -> None:
    assert _module_calls_in_functions(ast.parse((ROOT / path).read_text())) == []


def test_the_module_call_check_finds_a_call_through_a_module() -> None:
    source = """
import time
import msgspec

def elapsed(started):
    return time.perf_counter() - started

def encode(body):
    return msgspec.json.encode(body)
"""
    assert _module_calls_in_functions(ast.parse(source)) == [
        "time.perf_counter, line 6",
        "msgspec.json.encode, line 9",
    ]


_CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.ListComp, ast.SetComp)


def _bytes_membership_in_functions(tree: ast.Module) -> list[str]:
    """`b"\\r" in buffer` inside a function: on CPython 3.11 `bytes in bytes` first tries the
    needle as an integer, and formats and drops a TypeError (~2,000 instructions a test). One
    byte is sought as an integer (`13 in buffer`, a `memchr`), several with `find`."""
    return [
        f"{ast.unparse(node)}, line {node.lineno}"
        for node in _nodes_in_functions(tree)
        if isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, bytes)
        and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
        and not isinstance(node.comparators[0], _CONTAINERS)  # sought in a list, not in bytes
    ]


@pytest.mark.parametrize("path", HOT_PATH)
def test_hot_path_functions_test_no_bytes_literal_for_membership(path: str) -> None:
    assert _bytes_membership_in_functions(ast.parse((ROOT / path).read_text())) == []


def test_the_membership_check_finds_a_bytes_literal_sought_with_in() -> None:
    source = """
def plain(url, options):
    return b"?" not in url and "gzip" in options and 13 in url and b"x" in [b"x"]
"""
    assert _bytes_membership_in_functions(ast.parse(source)) == ["b'?' not in url, line 3"]
