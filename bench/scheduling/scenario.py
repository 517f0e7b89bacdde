"""What a scenario runs with: a work directory, the processes it starts (stopped when it ends,
whatever happens), one client connection pool, and background samplers of the simulator."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.scheduling.load import Target, pool
from bench.scheduling.processes import Gateway, PlainUpstream, Simulator


class Run:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.http = pool()
        self._stops: list[Callable[[], Awaitable[None]]] = []

    async def __aenter__(self) -> Run:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for stop in reversed(self._stops):
            with contextlib.suppress(Exception):
                await stop()
        await self.http.aclose()

    async def simulator(self, replicas: int = 1, **engine: float) -> Simulator:
        simulator = Simulator(self.workdir, engine, replicas)
        self._stops.append(simulator.stop)
        return await simulator.start()

    async def plain_upstream(self) -> PlainUpstream:
        upstream = PlainUpstream(self.workdir)
        self._stops.append(upstream.stop)
        return await upstream.start()

    async def gateway(self, name: str, document: dict[str, Any]) -> Gateway:
        gateway = Gateway(self.workdir, name, document)
        self._stops.append(gateway.stop)
        return await gateway.start()

    def target(self, base_url: str, api_key: str, model: str) -> Target:
        return Target(self.http, base_url, api_key, model)


class Sampler:
    """Reads a figure every `interval_s` in the background, keeping (time.monotonic(), value); a
    failed read is skipped (the figure is then simply not sampled at that moment)."""

    def __init__(self, read: Callable[[], Awaitable[float]], interval_s: float) -> None:
        self.read = read
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Sampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                self.samples.append((time.monotonic(), await self.read()))
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> list[tuple[float, float]]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return self.samples

    def values(self, since: float = 0.0, until: float = float("inf")) -> list[float]:
        return [value for at, value in self.samples if since <= at <= until]
