"""Failed key attempts: a slot is taken before a key is checked, so simultaneous attempts cannot all
pass the limit; a good key gives its slot back; the admin key's budget is apart from team keys'.
In this process, through fakeredis, and through a real Redis (two clients: two processes)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import fakeredis
import pytest
from redis.asyncio import Redis

from gateway.auth.attempts import KEY_PREFIX, KeyAttempts, TooManyAttempts, budget_of
from gateway.auth.secrets import new_key_secret
from tests.support.stores import redis_url

LIMIT = 10
ADMIN_KEY = "the-admin-key"


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Checker:
    """A key check that takes a moment (a database lookup), counting the keys it was given."""

    good: str = ADMIN_KEY
    checked: int = 0

    async def __call__(self, key: str) -> str | None:
        self.checked += 1
        await asyncio.sleep(0.01)
        return "admin" if key == self.good else None


async def attempt(attempts: KeyAttempts, address: str, key: str, checker: Checker) -> str:
    try:
        return await attempts.check(address, key, lambda: checker(key)) or "refused"
    except TooManyAttempts:
        return "throttled"


Factory = Callable[[], KeyAttempts]


@pytest.fixture(params=["memory", "fakeredis", "redis"])
async def attempts_factory(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    """KeyAttempts as separate processes would each have them, sharing the kind of store asked for."""
    if request.param == "memory":
        shared = KeyAttempts(None, LIMIT)  # one process: one instance
        yield lambda: shared
        return
    client: Redis = (
        fakeredis.FakeAsyncRedis() if request.param == "fakeredis" else Redis.from_url(redis_url("auth"))
    )
    yield lambda: KeyAttempts(client, LIMIT)
    await client.aclose()


@pytest.fixture
async def address() -> AsyncIterator[str]:
    """An address of this test's own, its counters removed afterwards (the Redis db is shared)."""
    address = f"198.51.100.{uuid.uuid4().hex}"
    yield address
    client = Redis.from_url(redis_url("auth"))
    await client.delete(*(KEY_PREFIX + budget_of(address, key) for key in (ADMIN_KEY, new_key_secret())))
    await client.aclose()


async def test_fifty_simultaneous_bad_keys_check_exactly_the_limit(
    attempts_factory: Factory, address: str
) -> None:
    checker = Checker()
    processes = [attempts_factory(), attempts_factory()]
    answers = await asyncio.gather(
        *(attempt(processes[i % 2], address, f"wrong-{i}", checker) for i in range(50))
    )
    print(
        f"\n50 simultaneous bad keys: {checker.checked} checked, {answers.count('throttled')} refused unchecked"
    )
    assert checker.checked == LIMIT
    assert answers.count("refused") == LIMIT and answers.count("throttled") == 50 - LIMIT


async def test_a_good_key_gives_its_slot_back(attempts_factory: Factory, address: str) -> None:
    attempts, checker = attempts_factory(), Checker()
    for _ in range(LIMIT - 1):
        assert await attempt(attempts, address, "wrong", checker) == "refused"
    for _ in range(3 * LIMIT):
        assert await attempt(attempts, address, ADMIN_KEY, checker) == "admin"
    assert await attempt(attempts, address, "wrong", checker) == "refused"  # the last one left
    assert await attempt(attempts, address, ADMIN_KEY, checker) == "throttled"


async def test_failed_team_keys_never_lock_the_admin_key_out(attempts_factory: Factory, address: str) -> None:
    attempts, checker = attempts_factory(), Checker()
    team_keys = [new_key_secret() for _ in range(3 * LIMIT)]
    answers = await asyncio.gather(*(attempt(attempts, address, key, checker) for key in team_keys))
    assert answers.count("refused") == LIMIT and answers.count("throttled") == 2 * LIMIT
    assert await attempt(attempts, address, ADMIN_KEY, checker) == "admin"


async def test_guesses_at_the_admin_key_are_bounded_per_address(
    attempts_factory: Factory, address: str
) -> None:
    attempts, checker = attempts_factory(), Checker()
    for n in range(LIMIT):
        assert await attempt(attempts, address, f"guess-{n}", checker) == "refused"
    with pytest.raises(TooManyAttempts) as refused:
        await attempts.check(address, ADMIN_KEY, lambda: checker(ADMIN_KEY))
    assert 290 <= refused.value.retry_after_s <= 300
    assert await attempt(attempts, address + "-elsewhere", ADMIN_KEY, checker) == "admin"


async def test_a_strong_admin_key_is_never_locked_out(address: str) -> None:
    """A long admin key is compared before any budget: guessing it is hopeless anyway, so a spent
    budget would only stall the operator. Wrong guesses stay bounded."""
    strong = "0123456789abcdef" * 4
    attempts, checker = KeyAttempts(None, LIMIT, admin_key=strong), Checker(good=strong)
    answers = [await attempt(attempts, address, f"guess-{n}", checker) for n in range(LIMIT + 5)]
    assert answers.count("refused") == LIMIT and answers.count("throttled") == 5
    assert await attempt(attempts, address, strong, checker) == "admin"
    assert await attempt(attempts, address, strong[:-1] + "x", checker) == "throttled"


async def test_a_short_admin_key_is_not_exempt(address: str) -> None:
    attempts, checker = KeyAttempts(None, LIMIT, admin_key=ADMIN_KEY), Checker()
    for n in range(LIMIT):
        await attempt(attempts, address, f"guess-{n}", checker)
    assert await attempt(attempts, address, ADMIN_KEY, checker) == "throttled"


async def test_an_error_while_checking_gives_the_slot_back(attempts_factory: Factory, address: str) -> None:
    attempts = attempts_factory()

    async def database_down() -> str | None:
        raise OSError("down")

    for _ in range(2 * LIMIT):
        with pytest.raises(OSError, match="down"):
            await attempts.check(address, "wrong", database_down)
    assert await attempt(attempts, address, "wrong", Checker()) == "refused"


async def test_a_new_window_brings_a_new_budget() -> None:
    clock = Clock()
    attempts, checker = KeyAttempts(None, LIMIT, window_s=60, clock=clock), Checker()
    for _ in range(LIMIT):
        await attempt(attempts, "10.0.0.1", "wrong", checker)
    assert await attempt(attempts, "10.0.0.1", "wrong", checker) == "throttled"
    clock.now += 60
    assert await attempt(attempts, "10.0.0.1", "wrong", checker) == "refused"


async def test_an_unreachable_redis_counts_in_the_process() -> None:
    server = fakeredis.FakeServer()
    server.connected = False
    unreachable = fakeredis.FakeAsyncRedis(server=server)
    attempts, checker = KeyAttempts(unreachable, LIMIT), Checker()
    answers = [await attempt(attempts, "10.0.0.1", f"wrong-{n}", checker) for n in range(LIMIT + 2)]
    assert answers == ["refused"] * LIMIT + ["throttled"] * 2
    await unreachable.aclose()
