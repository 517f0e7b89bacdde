"""The capacity learned from a server's own numbers, on scripted readings: its KV size, whether it
shares a prefix's blocks, the prompt estimate's correction, preemptions, a sequence limit."""

from __future__ import annotations

import math

import pytest

from gateway.routing.directives import Priority
from gateway.scheduling.capacity import BACKOFF, SLOT_LIMIT_READS, LearnedCapacity, LoadReading
from gateway.scheduling.in_flight import InFlight
from gateway.scheduling.ticket import Ticket

BLOCK = 16
KV_TOKENS = 65 * 2176  # 65 requests of 2,112 prompt tokens and 64 of output, at their peak
PROMPT, OUTPUT, PREFIX = 2112, 64, 2048


def request(prefix: str | None = "system") -> Ticket:
    return Ticket("t", 1.0, Priority.BATCH, PROMPT, PROMPT + OUTPUT, prefix, PREFIX if prefix else 0)


def reading(
    running: float = 0,
    waiting: float = 0,
    kv_usage: float | None = 0.0,
    preemptions: float | None = 0,
    kv_tokens: int | None = KV_TOKENS,
) -> LoadReading:
    return LoadReading(waiting, running, kv_usage, 0.0, kv_tokens, BLOCK, preemptions)


def fill(capacity: LearnedCapacity, held: InFlight, most: int = 1000) -> int:
    """Hold requests while the capacity admits them: how many it took."""
    taken = 0
    while taken < most and capacity.admits(request(), held):
        held.hold(request())
        taken += 1
    return taken


def used_without_sharing(count: int) -> float:
    return count * (PROMPT + OUTPUT / 2) / KV_TOKENS


def used_with_sharing(count: int) -> float:
    return (PREFIX + count * (PROMPT - PREFIX + OUTPUT / 2)) / KV_TOKENS


def test_without_the_servers_size_nothing_is_held() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(kv_tokens=None), held)
    assert fill(capacity, held, most=500) == 500


def test_it_fills_toward_kv_cache_high_counting_each_request_at_its_peak() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    assert capacity.kv_tokens == KV_TOKENS and capacity.budget == pytest.approx(0.98 * KV_TOKENS)
    taken = fill(capacity, held)
    assert taken == int(0.98 * KV_TOKENS / (PROMPT + OUTPUT + BLOCK / 2))
    assert taken == 63  # of the 65 that fit: each one's peak, and 2% left for the estimates' errors


def test_batch_work_leaves_its_share_of_the_budget() -> None:
    capacity = LearnedCapacity(1.0, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    while capacity.admits(request(), held, share=0.9):
        held.hold(request())
    assert held.count == int(0.9 * KV_TOKENS / (PROMPT + OUTPUT + BLOCK / 2))
    assert capacity.admits(request(), held)  # interactive work may use the rest


def test_a_server_that_does_not_share_keeps_each_prefix_counted() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    fill(capacity, held)
    count = held.count
    for _ in range(5):
        capacity.observe(reading(running=count, kv_usage=used_without_sharing(count)), held)
    assert not capacity.shares_prefix
    assert fill(capacity, held) == 0


def test_a_server_that_shares_a_prefix_is_learned_and_filled_much_further() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    fill(capacity, held)
    count = held.count
    capacity.observe(reading(running=count, kv_usage=used_with_sharing(count)), held)
    assert not capacity.shares_prefix  # one read is not enough
    capacity.observe(reading(running=count, kv_usage=used_with_sharing(count)), held)
    assert capacity.shares_prefix
    # The server's numbers change their mind: one read that sharing cannot explain is enough
    capacity.observe(reading(running=count, kv_usage=used_without_sharing(count)), held)
    assert not capacity.shares_prefix
    for _ in range(2):
        capacity.observe(reading(running=count, kv_usage=used_with_sharing(count)), held)
    more = fill(capacity, held)
    first, per_request = PROMPT + OUTPUT + BLOCK / 2, PROMPT - PREFIX + OUTPUT + BLOCK / 2
    assert held.count == 1 + int((0.98 * KV_TOKENS - first) / per_request)  # about 1,000
    assert more > 10 * count


def test_no_vote_while_requests_wait_or_are_not_all_there() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    fill(capacity, held)
    count = held.count
    for _ in range(3):  # requests still waiting there hold no blocks yet: it proves nothing
        capacity.observe(reading(running=count // 2, waiting=count - count // 2, kv_usage=0.1), held)
    for _ in range(3):  # half of them still on their way
        capacity.observe(reading(running=count // 2, kv_usage=0.1), held)
    assert not capacity.shares_prefix


def test_the_enable_prefix_caching_label_alone_is_not_trusted() -> None:
    capacity = LearnedCapacity(0.98, 0)
    assert not capacity.shares_prefix  # until the server's usage shows it


def test_preemptions_back_off_at_once_then_recover() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(preemptions=3), held)
    before = fill(capacity, held)
    capacity.observe(reading(running=before, preemptions=5), held)  # it preempted since
    assert capacity.fill == pytest.approx(BACKOFF)
    assert not capacity.admits(request(), held)
    held.drop(request())
    assert not capacity.admits(request(), held)  # below where it preempted, not one less
    reads = 0
    while capacity.fill < 1.0:
        capacity.observe(reading(running=held.count, preemptions=5), held)
        reads += 1
    assert 5 <= reads < 100  # a second or more at the default interval, not at once
    assert capacity.admits(request(), held)


def test_preemptions_stop_believing_in_sharing() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    fill(capacity, held)
    for _ in range(2):
        capacity.observe(reading(running=held.count, kv_usage=used_with_sharing(held.count)), held)
    assert capacity.shares_prefix
    capacity.observe(reading(running=held.count, preemptions=1), held)
    assert not capacity.shares_prefix


def test_the_prompt_estimate_is_corrected_from_real_counts() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    capacity.learn_prompt(estimated=40, real=8)  # a short request's estimate is mostly JSON
    assert capacity.prompt_ratio > 0.99
    for _ in range(200):  # the server counts 20% more than the estimate
        capacity.learn_prompt(estimated=PROMPT, real=int(PROMPT * 1.2))
    assert capacity.prompt_ratio == pytest.approx(1.2, rel=0.01)
    taken = fill(capacity, held)
    assert taken == int(0.98 * KV_TOKENS / (1.2 * PROMPT + OUTPUT + BLOCK / 2))
    capacity.learn_prompt(estimated=10, real=10_000)  # bounded
    assert capacity.prompt_ratio <= 4.0


def test_other_clients_requests_take_their_room() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(running=30, kv_usage=used_without_sharing(30)), held)
    assert capacity.others == 30
    assert fill(capacity, held) == int(
        (0.98 * KV_TOKENS - 30 * (PROMPT + OUTPUT / 2)) / (PROMPT + OUTPUT + BLOCK / 2)
    )


def test_a_server_held_by_its_sequence_limit_is_fed_without_a_deep_queue() -> None:
    capacity = LearnedCapacity(0.98, target_waiting=0)
    held = InFlight()
    capacity.observe(reading(), held)
    for _ in range(20):
        held.hold(request(prefix=None))
    for _ in range(SLOT_LIMIT_READS):
        assert capacity.slot_limit is None
        capacity.observe(reading(running=16, waiting=4, kv_usage=used_without_sharing(16)), held)
    assert capacity.slot_limit == 16
    assert not capacity.admits(request(), held)  # 16 running and 4 waiting there: enough
    for _ in range(4):
        held.drop(request(prefix=None))
    assert capacity.admits(request(), held)  # a 17th: one waits there for the next free sequence
    held.hold(request(prefix=None))
    assert not capacity.admits(request(), held)
    capacity.observe(reading(running=17, kv_usage=used_without_sharing(17)), held)
    assert capacity.slot_limit is None  # it runs more after all


def test_a_prefill_bound_server_is_not_taken_for_a_sequence_limit() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    for _ in range(40):
        held.hold(request(prefix=None))
    for running in (30, 33, 33, 31, 35, 34, 36, 36, 38):  # running moves as requests finish
        capacity.observe(reading(running=running, waiting=40 - running), held)
    assert capacity.slot_limit is None


def test_another_clients_preemptions_on_an_idle_replica_do_not_back_off() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(preemptions=3), held)
    capacity.observe(reading(running=80, preemptions=9), held)  # a client straight at the server
    assert capacity.fill == 1.0


def test_a_server_that_says_its_cache_is_full_holds_dispatch_whatever_the_prediction() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    held.hold(request())
    capacity.observe(reading(running=1, kv_usage=0.985), held)  # the estimate was far too short
    assert not capacity.admits(request(), held)
    capacity.observe(reading(running=1, kv_usage=0.5), held)
    assert capacity.admits(request(), held)


def test_long_prompts_part_way_through_their_prefill_are_not_taken_for_sharing() -> None:
    capacity = LearnedCapacity(0.98, 0)
    held = InFlight()
    capacity.observe(reading(), held)
    fill(capacity, held)
    count = held.count
    whole, shared = used_without_sharing(count), used_with_sharing(count)
    partway = 0.7 * math.sqrt(whole * shared)  # below the boundary, well above the shared use
    assert partway > 2 * shared
    for _ in range(4):
        capacity.observe(reading(running=count, kv_usage=partway), held)
    assert not capacity.shares_prefix
