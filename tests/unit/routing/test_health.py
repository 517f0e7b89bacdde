"""Circuit breakers: threshold, cool-down to half-open, reopening, and sharing through Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import fakeredis
import pytest
from redis.asyncio import Redis

from gateway.routing.health import CircuitState, HealthBoard, RedisHealthBoard
from gateway.settings import CircuitSettings
from tests.support.stores import redis_url

SETTINGS = CircuitSettings(failure_threshold=3, cooldown_s=30.0)
REAL_REDIS = redis_url("routing")
A, B = "prov-a/m", "prov-b/m"


class Clock:
    def __init__(self) -> None:
        self.now = 1_767_225_600.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["local", "fakeredis", "redis"])
async def board_factory(request: pytest.FixtureRequest) -> AsyncIterator[object]:
    """Builds boards on one shared store (each board is one gateway process)."""
    if request.param == "local":
        yield lambda clock: HealthBoard([A, B], SETTINGS, clock)
        return
    redis = fakeredis.FakeAsyncRedis() if request.param == "fakeredis" else Redis.from_url(REAL_REDIS)
    await redis.flushdb()
    yield lambda clock: RedisHealthBoard(redis, [A, B], SETTINGS, clock)
    await redis.flushdb()
    await redis.aclose()


async def fail(board: HealthBoard, times: int, deployment: str = A) -> None:
    for _ in range(times):
        await board.record_failure(deployment)


async def test_opens_at_the_threshold(board_factory: object) -> None:
    board: HealthBoard = board_factory(Clock())  # type: ignore[operator]
    await fail(board, 2)
    assert board.open_circuits() == frozenset()
    assert board.state_of(A) == (CircuitState.CLOSED, 2)
    await fail(board, 1)
    assert board.open_circuits() == {A}
    assert board.state_of(A)[0] is CircuitState.OPEN
    assert board.state_of(B) == (CircuitState.CLOSED, 0)


async def test_a_success_resets_the_count(board_factory: object) -> None:
    board: HealthBoard = board_factory(Clock())  # type: ignore[operator]
    await fail(board, 2)
    await board.record_success(A)
    await fail(board, 2)
    assert board.open_circuits() == frozenset()


async def test_cooldown_leads_to_half_open_then_success_closes(board_factory: object) -> None:
    clock = Clock()
    board: HealthBoard = board_factory(clock)  # type: ignore[operator]
    await fail(board, 3)
    clock.now += 29
    assert board.open_circuits() == {A}
    clock.now += 2
    assert board.state_of(A)[0] is CircuitState.HALF_OPEN
    assert board.open_circuits() == frozenset()  # traffic may probe again
    await board.record_success(A)
    assert board.state_of(A) == (CircuitState.CLOSED, 0)


async def test_a_failed_probe_reopens(board_factory: object) -> None:
    clock = Clock()
    board: HealthBoard = board_factory(clock)  # type: ignore[operator]
    await fail(board, 3)
    clock.now += 31
    await fail(board, 1)
    assert board.state_of(A)[0] is CircuitState.OPEN
    clock.now += 29
    assert board.open_circuits() == {A}  # the cool-down restarted at the failed probe


async def test_more_failures_while_open_do_not_extend_the_cooldown(board_factory: object) -> None:
    clock = Clock()
    board: HealthBoard = board_factory(clock)  # type: ignore[operator]
    await fail(board, 3)
    clock.now += 20
    await fail(board, 5)
    clock.now += 11
    assert board.state_of(A)[0] is CircuitState.HALF_OPEN


async def test_two_redis_boards_share_one_circuit() -> None:
    redis = fakeredis.FakeAsyncRedis()
    await redis.flushdb()
    clock = Clock()
    one = RedisHealthBoard(redis, [A, B], SETTINGS, clock)
    two = RedisHealthBoard(redis, [A, B], SETTINGS, clock)
    await fail(one, 2)
    await fail(two, 1)  # the third consecutive failure, counted across processes
    assert two.open_circuits() == {A}
    assert one.open_circuits() == frozenset()  # until its snapshot is refreshed
    await one.refresh()
    assert one.open_circuits() == {A}
    clock.now += 31
    await one.refresh()
    await one.record_success(A)  # the half-open probe succeeded in process one
    await two.refresh()
    assert two.state_of(A) == (CircuitState.CLOSED, 0)
    await redis.aclose()


async def test_two_boards_on_a_real_redis() -> None:
    redis = Redis.from_url(REAL_REDIS)
    await redis.flushdb()
    one = RedisHealthBoard(redis, [A, B], SETTINGS)
    two = RedisHealthBoard(redis, [A, B], SETTINGS)
    await fail(one, 3, B)
    await two.refresh()
    assert two.open_circuits() == {B}
    assert not one.degraded and not two.degraded
    await redis.flushdb()
    await redis.aclose()


async def test_unreachable_redis_degrades_to_the_local_board() -> None:
    redis = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    board = RedisHealthBoard(redis, [A, B], SETTINGS, Clock())
    await fail(board, 3)
    assert board.degraded
    assert board.open_circuits() == {A}
    await board.refresh()  # keeps the local view
    assert board.open_circuits() == {A}
    await redis.aclose()


async def test_open_circuits_say_how_long_until_each_turns_half_open(board_factory: object) -> None:
    clock = Clock()
    board: HealthBoard = board_factory(clock)  # type: ignore[operator]
    await fail(board, 3, A)
    clock.now += 10.5
    await fail(board, 3, B)
    clock.now += 2
    circuits = board.open_circuits()
    assert circuits.half_open_in == pytest.approx({A: 17.5, B: 28.0})
    assert circuits.retry_after_s([A, B]) == 18  # the soonest, rounded up
    assert circuits.retry_after_s([B]) == 28
    clock.now += 17.4
    assert board.open_circuits().retry_after_s([A, B]) == 1  # 0.1 s: never less than a second
    clock.now += 0.2
    assert board.open_circuits() == {B}  # A is half-open: only B's wait is left
    assert board.open_circuits().retry_after_s([A, B]) == 11
