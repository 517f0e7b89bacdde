"""Tasks started on the request path: one per request, one per Redis round trip, one per stream.

`loop.create_task(coro)` makes a task with no name, and CPython 3.11's `Task.__init__` then
formats one (`Task-<n>`, `PyUnicode_FromFormat`): ~1,500 instructions, a fifth of making the task.
These tasks get a fixed name instead. A task factory set on the loop still makes every task.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

_T = TypeVar("_T")

_Task: Final = asyncio.Task  # a static in the compiled build: no module-attribute lookup per call


def start_task(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, _T],
    name: str,
    context: contextvars.Context | None = None,
) -> asyncio.Task[_T]:
    """`loop.create_task(coro, name=name, context=context)`, without the number formatted first."""
    if loop.get_task_factory() is not None:
        return loop.create_task(coro, name=name, context=context)
    return _Task(coro, loop=loop, name=name, context=context)
