"""Replica choice: a key keeps its replica until that one is loaded past the bound; without a key,
the prompt's leading blocks do; a conversation keeps its replica; a failing replica is passed over."""

from __future__ import annotations

from collections import Counter

import msgspec

from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request
from gateway.routing.prefix import PromptPrefix, prompt_prefix
from gateway.scheduling.replicas import PrefixIndex, choose_replica

URLS = [f"http://10.0.0.{i}:8000/v1" for i in range(4)]


def test_a_key_always_meets_the_same_replica_when_loads_are_even() -> None:
    picks = {choose_replica("prefix-7", URLS, [3, 3, 3, 3], 1.25) for _ in range(10)}
    assert len(picks) == 1


def test_an_overloaded_replica_sends_the_key_to_its_next_choice() -> None:
    home = choose_replica("prefix-7", URLS, [0, 0, 0, 0], 1.25)
    loads = [2, 2, 2, 2]
    loads[home] = 10
    spill = choose_replica("prefix-7", URLS, loads, 1.25)
    assert spill != home
    assert choose_replica("prefix-7", URLS, loads, 1.25) == spill  # the overflow goes one place


def test_bounded_load_keeps_replicas_balanced_under_skewed_keys() -> None:
    loads = [0, 0, 0, 0]
    for i in range(2000):
        key = f"hot-{i % 3}"  # three keys for four replicas: pure hashing would idle one or more
        loads[choose_replica(key, URLS, loads, 1.25)] += 1
    assert max(loads) <= 1.25 * (sum(loads) / 4) + 1


def test_without_a_key_the_least_loaded_replica_and_ties_rotate() -> None:
    assert choose_replica(None, URLS, [5, 1, 3, 2], 1.25) == 1
    picks = Counter(choose_replica(None, URLS, [0, 0, 0, 0], 1.25, rotation=r) for r in range(8))
    assert set(picks) == {0, 1, 2, 3}


def test_keys_spread_over_replicas() -> None:
    homes = Counter(choose_replica(f"prefix-{i}", URLS, [0, 0, 0, 0], 1.25) for i in range(200))
    assert len(homes) == 4 and min(homes.values()) > 20


# --- without a key: the prompt's leading blocks -------------------------------------------------

HANDBOOKS = [f"Handbook {n}. " + "Extract every field of the invoice. " * 150 for n in range(12)]


def leading(system: str, question: str, team: str = "team-a") -> PromptPrefix:
    body = {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }
    parsed = parse_request(msgspec.json.encode(body), Endpoint.CHAT, 100)
    return prompt_prefix(team, parsed.typed, 8192)


def keyless(index: PrefixIndex, prefix: PromptPrefix, loads: list[int], rotation: int = 0) -> int:
    """What the scheduler does for a request without a key: score, choose, record."""
    chosen = choose_replica(None, URLS, loads, 1.5, rotation, prefix=prefix, matched=index.matched(prefix))
    index.record(prefix, chosen)
    return chosen


def test_keyless_requests_sharing_a_prefix_meet_on_one_replica() -> None:
    index = PrefixIndex(len(URLS))
    seen: dict[int, set[int]] = {n: set() for n in range(len(HANDBOOKS))}
    for i in range(600):
        n = (i * 7) % len(HANDBOOKS)
        seen[n].add(keyless(index, leading(HANDBOOKS[n], f"Invoice {i}"), [2, 2, 2, 2], rotation=i))
    assert all(len(replicas) == 1 for replicas in seen.values()), seen
    assert len(set().union(*seen.values())) >= 3  # and the prefixes spread over the replicas
    # Without the prompt's blocks (no prefix affinity), the same requests go round.
    spread = {choose_replica(None, URLS, [2, 2, 2, 2], 1.5, rotation=i) for i in range(4)}
    assert len(spread) == 4


def test_without_the_index_every_process_places_a_prefix_alike() -> None:
    prefix = leading(HANDBOOKS[0], "Invoice 1")
    fresh = [keyless(PrefixIndex(len(URLS)), prefix, [0, 0, 0, 0], rotation=r) for r in range(4)]
    assert len(set(fresh)) == 1


def test_two_teams_with_one_prompt_are_placed_apart_in_the_index() -> None:
    index = PrefixIndex(len(URLS))
    ours = leading(HANDBOOKS[0], "Invoice 1", "team-a")
    index.record(ours, 2)
    assert index.matched(ours)[2] == len(ours.blocks)
    assert index.matched(leading(HANDBOOKS[0], "Invoice 1", "team-b")) == [0, 0, 0, 0]


def test_the_replica_holding_a_prefix_wins_over_its_hash_while_within_the_bound() -> None:
    prefix = leading(HANDBOOKS[0], "Invoice 1")
    home = choose_replica(None, URLS, [0, 0, 0, 0], 1.5, prefix=prefix, matched=[0, 0, 0, 0])
    holder = (home + 1) % 4
    matched = [0, 0, 0, 0]
    matched[holder] = len(prefix.blocks)
    assert choose_replica(None, URLS, [1, 1, 1, 1], 1.5, prefix=prefix, matched=matched) == holder
    loads = [1, 1, 1, 1]
    loads[holder] = 9  # past the bound: the prefix goes home instead
    assert choose_replica(None, URLS, loads, 1.5, prefix=prefix, matched=matched) == home


def test_a_common_opening_alone_does_not_pull_a_prompt() -> None:
    prefix = leading(HANDBOOKS[0], "Invoice 1")
    home = choose_replica(None, URLS, [0, 0, 0, 0], 1.5, prefix=prefix, matched=[0, 0, 0, 0])
    matched = [0, 0, 0, 0]
    matched[(home + 1) % 4] = 1  # one block in common: less than half of the shared part
    assert choose_replica(None, URLS, [0, 0, 0, 0], 1.5, prefix=prefix, matched=matched) == home


def test_the_index_forgets_the_least_recently_sent_blocks() -> None:
    index = PrefixIndex(len(URLS), size=6)  # one prompt's 5 blocks and a little more
    old, new = leading(HANDBOOKS[0], "q"), leading(HANDBOOKS[1], "q")
    index.record(old, 0)
    index.record(new, 1)
    assert index.matched(old) == [0, 0, 0, 0]
    assert index.matched(new)[1] == len(new.blocks)


# --- a conversation's replica, and failing replicas --------------------------------------------


def test_a_conversation_keeps_its_replica_while_within_the_bound() -> None:
    home = choose_replica("prefix-7", URLS, [0, 0, 0, 0], 1.5)
    other = (home + 2) % 4
    assert choose_replica("prefix-7", URLS, [1, 1, 1, 1], 1.5, preferred=other) == other
    loads = [1, 1, 1, 1]
    loads[other] = 9
    assert choose_replica("prefix-7", URLS, loads, 1.5, preferred=other) == home


def test_a_failing_replica_is_passed_over_by_a_key_and_a_conversation() -> None:
    home = choose_replica("prefix-7", URLS, [0, 0, 0, 0], 1.5)
    spill = choose_replica("prefix-7", URLS, [0, 0, 0, 0], 1.5, failing=[home])
    assert spill != home
    assert choose_replica("prefix-7", URLS, [0, 0, 0, 0], 1.5, preferred=home, failing=[home]) == spill
    assert choose_replica(None, URLS, [0, 0, 0, 0], 1.5, failing=[0, 1, 2]) == 3
    assert choose_replica("prefix-7", URLS, [0, 0, 0, 0], 1.5, failing=[0, 1, 2, 3]) == home  # none better
