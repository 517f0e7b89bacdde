"""Replica choice: a key keeps its replica until that one is loaded past the bound."""

from __future__ import annotations

from collections import Counter

from gateway.scheduling.replicas import choose_replica

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
