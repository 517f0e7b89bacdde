"""Runs a simulated engine on the event loop: one step, a sleep of what is left of its time-scaled
duration, then its tokens handed to the requests that wait for them.

A step lasts its duration from the moment it is scheduled, its own bookkeeping included: a real
engine's step takes the GPU's time whatever the scheduler's Python costs, and the simulator's cost
grows with the requests it holds (thousands of waiting sequences), which would otherwise slow a
crowded simulator more than the engine it simulates."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from mock_upstream.vllm.engine import Engine, Sequence, TokenEvent
from mock_upstream.vllm.tokens import PromptBlocks


@dataclass(slots=True)
class EngineDriver:
    engine: Engine
    _queues: dict[Sequence, asyncio.Queue[TokenEvent]] = field(default_factory=dict)
    _wake: asyncio.Event | None = None
    _task: asyncio.Task[None] | None = None

    def submit(self, request_id: str, prompt: PromptBlocks, max_tokens: int) -> Sequence:
        """Queue a request (raises EngineError when it can never fit); read it with `tokens`."""
        sequence = self.engine.add(request_id, prompt, max_tokens)
        self._queues[sequence] = asyncio.Queue()
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run())
        assert self._wake is not None
        self._wake.set()
        return sequence

    async def tokens(self, sequence: Sequence) -> AsyncGenerator[TokenEvent, None]:
        """The sequence's tokens as the engine samples them; closing early aborts the sequence."""
        queue = self._queues[sequence]
        finished = False
        try:
            while not finished:
                event = await queue.get()
                finished = event.finished
                yield event
        finally:
            del self._queues[sequence]
            if not finished:
                self.engine.abort(sequence)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            scheduled_at = self.engine.clock()
            outcome = self.engine.step()
            if outcome is None:
                if self.engine.has_work():  # a step that only preempted: admit on the next one
                    await asyncio.sleep(0)
                else:
                    self._wake.clear()
                    await self._wake.wait()
                continue
            await asyncio.sleep(max(0.0, outcome.duration - (self.engine.clock() - scheduled_at)))
            for event in outcome.events:
                queue = self._queues.get(event.sequence)
                if queue is not None:  # None: aborted while the step ran
                    queue.put_nowait(event)
