"""The in-process store: a slot is claimed once; it holds the answer for the window, or frees itself
when the claim's lease ends unless its owner renews it; only the claim's owner stores, releases or
renews; the oldest slots go first
past the memory budget."""

from __future__ import annotations

from gateway.idempotency.records import Claim, StoredAnswer
from gateway.idempotency.store import MemoryIdempotencyStore

FIRST, SECOND = Claim("fp", "req_1"), Claim("fp", "req_2")
ANSWER = StoredAnswer("fp", 200, {"x-request-id": "req_1"}, body=b"{}")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_slot_is_claimed_once_and_then_holds_the_answer() -> None:
    store = MemoryIdempotencyStore()

    assert await store.claim("s", FIRST, lease_s=10) is None
    assert await store.claim("s", SECOND, lease_s=10) == FIRST
    await store.keep("s", FIRST, ANSWER, window_s=60)
    assert await store.claim("s", SECOND, lease_s=10) == ANSWER


async def test_an_answer_expires_with_the_window() -> None:
    clock = Clock()
    store = MemoryIdempotencyStore(clock=clock)
    await store.claim("s", FIRST, lease_s=10)
    await store.keep("s", FIRST, ANSWER, window_s=60)

    clock.now += 59
    assert await store.claim("s", SECOND, lease_s=10) == ANSWER
    clock.now += 2
    assert await store.claim("s", SECOND, lease_s=10) is None  # free again: claimed by the second


async def test_a_claim_whose_lease_ran_out_is_taken_over_and_its_owner_stores_nothing() -> None:
    clock = Clock()
    store = MemoryIdempotencyStore(clock=clock)
    await store.claim("s", FIRST, lease_s=10)
    clock.now += 11

    assert await store.claim("s", SECOND, lease_s=10) is None
    await store.keep("s", FIRST, ANSWER, window_s=60)  # too late: the second holds the slot
    assert await store.claim("s", Claim("fp", "req_3"), lease_s=10) == SECOND


async def test_only_the_owner_renews_a_claim_and_a_renewal_holds_it_past_its_first_lease() -> None:
    clock = Clock()
    store = MemoryIdempotencyStore(clock=clock)
    await store.claim("s", FIRST, lease_s=10)

    clock.now += 8
    await store.renew("s", SECOND, lease_s=10)  # not its claim: nothing changes
    await store.renew("s", FIRST, lease_s=10)
    clock.now += 8  # 16 s after the claim, 8 after its renewal
    assert await store.claim("s", SECOND, lease_s=10) == FIRST
    clock.now += 3
    assert await store.claim("s", SECOND, lease_s=10) is None  # not renewed again: free


async def test_only_the_owner_releases_a_claim() -> None:
    store = MemoryIdempotencyStore()
    await store.claim("s", FIRST, lease_s=10)

    await store.release("s", SECOND)
    assert await store.claim("s", SECOND, lease_s=10) == FIRST
    await store.release("s", FIRST)
    assert await store.claim("s", SECOND, lease_s=10) is None


async def test_the_oldest_slots_go_first_past_the_budget() -> None:
    big = StoredAnswer("fp", 200, {}, body=b"x" * 400)
    store = MemoryIdempotencyStore(budget_bytes=1000)
    for slot in ("a", "b", "c"):
        claim = Claim("fp", slot)
        await store.claim(slot, claim, lease_s=10)
        await store.keep(slot, claim, big, window_s=60)

    assert await store.claim("a", FIRST, lease_s=10) is None  # evicted: free
    assert await store.claim("c", FIRST, lease_s=10) == big
