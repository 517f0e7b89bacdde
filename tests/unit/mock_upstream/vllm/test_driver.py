"""The simulated vLLM's driver: a step's sleep is what is left of its duration after its own work."""

from __future__ import annotations

import asyncio

import pytest

from mock_upstream.vllm.driver import EngineDriver
from mock_upstream.vllm.engine import Engine, EngineConfig, StepOutcome
from mock_upstream.vllm.tokens import prompt_blocks


class SlowEngine(Engine):
    """An engine whose every step takes `cost` seconds of its (fake) clock to schedule."""

    def __init__(self, config: EngineConfig, cost: float) -> None:
        self.now = 0.0
        super().__init__(config, clock=lambda: self.now)
        self.cost = cost

    def step(self) -> StepOutcome | None:
        self.now += self.cost
        return super().step()


async def test_a_steps_own_work_counts_toward_its_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    config = EngineConfig(decode_step_s=0.01, decode_growth=0.0, prefill_s_per_token=0.0)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def record(delay: float) -> None:
        slept.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", record)
    for cost, left in ((0.004, 0.006), (0.03, 0.0)):  # a step costlier than its duration: no sleep
        slept.clear()
        driver = EngineDriver(SlowEngine(config, cost))
        sequence = driver.submit("r", prompt_blocks("m", "x" * 40, 16), 3)
        assert [event.index async for event in driver.tokens(sequence)] == [0, 1, 2]
        await driver.close()
        assert slept == pytest.approx([left] * 3)
