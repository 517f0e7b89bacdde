"""`start_task`: a named task as `loop.create_task` makes it, on asyncio's loop and on uvloop's."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import uvloop

from gateway.loop_tasks import start_task

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


@pytest.fixture(params=LOOPS.values(), ids=LOOPS.keys())
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop]:
    new_loop: Callable[[], asyncio.AbstractEventLoop] = request.param
    loop = new_loop()
    yield loop
    loop.close()


async def _seen() -> str:
    await asyncio.sleep(0)
    return request_id.get()


def test_the_task_runs_under_its_name_in_the_current_context(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[str, str, bool]:
        request_id.set("r-1")
        task = start_task(asyncio.get_running_loop(), _seen(), "http-request")
        registered = task in asyncio.all_tasks()  # what a graceful stop and a debugger look through
        return task.get_name(), await task, registered

    assert loop.run_until_complete(main()) == ("http-request", "r-1", True)


def test_a_given_context_is_the_one_the_task_runs_in(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> str:
        request_id.set("lifespan")
        return await start_task(asyncio.get_running_loop(), _seen(), "http-request", contextvars.Context())

    assert loop.run_until_complete(main()) == "none"


def test_the_loops_task_factory_still_makes_the_task(loop: asyncio.AbstractEventLoop) -> None:
    made: list[str] = []

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        made.append(coro.__name__)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)

    async def main() -> tuple[str, str]:
        task = start_task(asyncio.get_running_loop(), _seen(), "redis-round-trip")
        return task.get_name(), await task

    assert loop.run_until_complete(main()) == ("redis-round-trip", "none")
    assert made == ["main", "_seen"]
