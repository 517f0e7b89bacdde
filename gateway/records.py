"""`record`: the immutable value class of the request path, without frozen's cost at run time.

A frozen dataclass cannot assign its fields in `__init__`: it calls `object.__setattr__` for each
one (the dataclasses documentation calls it a tiny penalty). A request builds about ten such
records (the parsed request, its directives, the route plan, the upstream call, request and
response, the admission, the result), 37 fields in all; in a worker that serves thousands of
requests a second, building them took ~1.6 us each against ~0.4 us for the same class unfrozen
(docs/performance.md). A `record` is a slotted, hashable dataclass that the type checker holds
frozen: assigning to a field is a mypy error, not a run-time one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

_Record = TypeVar("_Record")


@dataclass_transform(frozen_default=True)
def record(cls: type[_Record]) -> type[_Record]:
    return dataclass(slots=True, unsafe_hash=True)(cls)
