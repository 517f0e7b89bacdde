"""When every eligible circuit is open, the 503 says when to come back: the first half-open time."""

from __future__ import annotations

import random

import pytest

from gateway.errors import UpstreamUnavailable
from gateway.routing.directives import Directives
from gateway.routing.health import HealthBoard
from gateway.routing.placement import batch_placement
from gateway.routing.policy import plan_route
from gateway.settings import CircuitSettings
from tests.unit.routing.catalog import CHAT, TABLE

ALL_CHAT = tuple(TABLE.by_model["chat"])
SETTINGS = CircuitSettings(failure_threshold=1, cooldown_s=30.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_767_225_600.0

    def __call__(self) -> float:
        return self.now


async def board_with_every_chat_circuit_open(clock: Clock) -> HealthBoard:
    """Circuits opened 0, 5 and 9.5 seconds before `clock.now`: half-open in 30, 25 and 20.5 s."""
    board = HealthBoard([d.id for d in TABLE.all()], SETTINGS, clock)
    for name, ago in (("openai-us", 0.0), ("vllm-eu", 5.0), ("claude-us", 9.5)):
        clock.now -= ago
        await board.record_failure(CHAT[name].id)
        clock.now += ago
    return board


async def test_a_plan_with_every_circuit_open_retries_after_the_soonest_half_open() -> None:
    clock = Clock()
    board = await board_with_every_chat_circuit_open(clock)

    with pytest.raises(UpstreamUnavailable) as caught:
        plan_route(ALL_CHAT, Directives(), board.open_circuits(), None, random.Random(0))

    assert caught.value.status == 503
    assert caught.value.headers["retry-after"] == "21"  # claude-us, half-open in 20.5 s


async def test_only_the_eligible_deployments_decide_the_wait() -> None:
    clock = Clock()
    board = await board_with_every_chat_circuit_open(clock)
    eligible = (CHAT["openai-us"], CHAT["vllm-eu"])

    with pytest.raises(UpstreamUnavailable) as caught:
        batch_placement("team-1:b", eligible, Directives(), board.open_circuits())

    assert caught.value.headers["retry-after"] == "25"


async def test_the_wait_is_at_least_a_second() -> None:
    clock = Clock()
    board = await board_with_every_chat_circuit_open(clock)
    clock.now += 20.4  # claude-us turns half-open in 0.1 s

    with pytest.raises(UpstreamUnavailable) as caught:
        plan_route(ALL_CHAT, Directives(), board.open_circuits(), None, random.Random(0))

    assert caught.value.headers["retry-after"] == "1"


def test_a_set_of_names_alone_still_gives_a_retry_after() -> None:
    with pytest.raises(UpstreamUnavailable) as caught:
        plan_route(ALL_CHAT, Directives(), frozenset(d.id for d in ALL_CHAT), None, random.Random(0))

    assert caught.value.headers["retry-after"] == "1"
