"""`record`: the immutable value class of the request path, built in C.

A request builds about ten such records (the parsed request, its directives, the route plan, the
upstream call, request and response, the admission, the result). As dataclasses, each `__init__`
was Python code generated at import, interpreted even in the compiled build (mypyc compiles the
class body, not what `dataclass` writes at run time): ~1,200 instructions a record, and more for a
frozen one, which calls `object.__setattr__` per field (docs/performance.md). A `record` is
declared as a dataclass and becomes a frozen `msgspec.Struct` with the same fields, defaults,
methods and value semantics (equality, hash, repr), whose `__init__` is msgspec's C code. The type
checker treats it as a frozen dataclass.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, TypeVar, cast, dataclass_transform

import msgspec

_Record = TypeVar("_Record")

# What `dataclass` writes into a class, and what a class body holds that a Struct sets itself.
_NOT_COPIED = frozenset(
    {
        "__init__", "__repr__", "__eq__", "__hash__", "__match_args__", "__dataclass_fields__",
        "__dataclass_params__", "__dict__", "__weakref__", "__annotations__", "__slots__",
        "__module__", "__qualname__",
    }
)  # fmt: skip


@dataclass_transform(frozen_default=True)
def record(cls: type[_Record]) -> type[_Record]:
    as_dataclass: Any = dataclass(cls)
    declared = fields(as_dataclass)  # the fields, their order and defaults, as a dataclass reads them
    shape: list[Any] = []
    for field in declared:
        if field.default is not MISSING:
            shape.append((field.name, field.type, field.default))
        elif field.default_factory is not MISSING:
            shape.append((field.name, field.type, msgspec.field(default_factory=field.default_factory)))
        else:
            shape.append((field.name, field.type))
    names = {field.name for field in declared}
    namespace = {
        name: value for name, value in vars(cls).items() if name not in _NOT_COPIED and name not in names
    }
    namespace["__qualname__"] = cls.__qualname__
    built = msgspec.defstruct(cls.__name__, shape, module=cls.__module__, namespace=namespace, frozen=True)
    return cast(type[_Record], built)
