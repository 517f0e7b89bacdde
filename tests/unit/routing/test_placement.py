"""The one pin placement: where a batch goes first (the same choice in every process), its pin
placed or read through the store, the rendezvous choice without one, and its one move."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from gateway.errors import UpstreamUnavailable
from gateway.routing.batch_pin import BatchPin, PinStoreUnavailable, new_pin
from gateway.routing.deployment import Deployment
from gateway.routing.directives import Directives
from gateway.routing.pins import MemoryPinStore
from gateway.routing.placement import batch_key, batch_placement, move_batch, place_batch
from gateway.routing.policy import eligible_deployments, rendezvous_choice
from tests.unit.routing.catalog import CHAT, TABLE, principal

ALL_CHAT = tuple(TABLE.by_model["chat"])
NONE_OPEN: frozenset[str] = frozenset()


class DownStore(MemoryPinStore):
    """A pin store that cannot be reached."""

    def __init__(self) -> None:
        super().__init__(60)

    async def touch(
        self, team_id: str, batch_id: str, joined_at: float | None = None, *, recent: bool = True
    ) -> BatchPin | None:
        raise PinStoreUnavailable("down")

    async def move(self, pin: BatchPin, to: Deployment) -> BatchPin:
        raise PinStoreUnavailable("down")


def test_batch_placement_is_the_same_in_every_process() -> None:
    for i in range(100):
        key = f"team-1:batch-{i}"
        chosen = batch_placement(key, ALL_CHAT, Directives(batch=f"batch-{i}"), NONE_OPEN)
        assert chosen == rendezvous_choice(key, ALL_CHAT)


def test_batch_placement_spreads_by_weight_across_batches() -> None:
    chosen = Counter(
        batch_placement(f"team-1:b{i}", ALL_CHAT, Directives(batch=f"b{i}"), NONE_OPEN).provider.name
        for i in range(5_000)
    )
    assert 2_700 < chosen["vllm-eu"] < 3_300  # weight 3 of 5


def test_batch_placement_honours_provider_preference() -> None:
    directives = Directives(batch="b", providers=("claude-us", "openai-us"))
    eligible = eligible_deployments("chat", directives, principal(), TABLE)
    assert batch_placement("team-1:b", eligible, directives, NONE_OPEN).provider.name == "claude-us"
    skipped = batch_placement("team-1:b", eligible, directives, frozenset({CHAT["claude-us"].id}))
    assert skipped.provider.name == "openai-us"


def test_batch_placement_avoids_open_circuits() -> None:
    open_ = frozenset({CHAT["vllm-eu"].id, CHAT["claude-us"].id})
    for i in range(50):
        assert batch_placement(f"team-1:b{i}", ALL_CHAT, Directives(), open_) == CHAT["openai-us"]
    with pytest.raises(UpstreamUnavailable):
        batch_placement("team-1:b", ALL_CHAT, Directives(), frozenset(d.id for d in ALL_CHAT))


# --- place_batch, move_batch --------------------------------------------------------------------


async def test_a_new_batch_is_pinned_where_the_placement_puts_it() -> None:
    store = MemoryPinStore(60)
    arrived = time.time() - 1
    placed = await place_batch(store, "team-1", "b", ALL_CHAT, Directives(batch="b"), NONE_OPEN, arrived)
    expected = batch_placement(batch_key("team-1", "b"), ALL_CHAT, Directives(batch="b"), NONE_OPEN)
    assert placed.pin is not None and placed.deployment == placed.pin.deployment == expected.id
    assert placed.pin.created_at == arrived
    stored = await store.touch("team-1", "b")
    assert stored is not None and stored.deployment == expected.id


async def test_a_live_pin_is_kept_whatever_the_placement_would_say() -> None:
    store = MemoryPinStore(60)
    await store.place(new_pin("team-1", "b", CHAT["claude-us"], time.time()))
    only_claude_open = frozenset({CHAT["claude-us"].id})
    placed = await place_batch(store, "team-1", "b", ALL_CHAT, Directives(batch="b"), only_claude_open)
    assert placed.deployment == CHAT["claude-us"].id and placed.pin is not None


async def test_without_the_store_every_process_makes_the_rendezvous_choice_ignoring_circuits() -> None:
    open_ = frozenset({CHAT["vllm-eu"].id, CHAT["claude-us"].id})
    for i in range(20):
        placed = await place_batch(DownStore(), "team-1", f"b{i}", ALL_CHAT, Directives(), open_)
        assert placed.pin is None
        assert placed.deployment == rendezvous_choice(batch_key("team-1", f"b{i}"), ALL_CHAT).id


async def test_every_circuit_open_places_no_pin() -> None:
    store = MemoryPinStore(60)
    with pytest.raises(UpstreamUnavailable):
        await place_batch(store, "team-1", "b", ALL_CHAT, Directives(), frozenset(d.id for d in ALL_CHAT))
    assert await store.touch("team-1", "b") is None


async def test_a_pin_moves_once_to_where_its_batch_now_goes() -> None:
    store = MemoryPinStore(60)
    pin = await store.place(new_pin("team-1", "b", CHAT["vllm-eu"], time.time()))
    others = (CHAT["openai-us"], CHAT["claude-us"])
    moved = await move_batch(store, pin, others, Directives(), NONE_OPEN)
    expected = batch_placement(batch_key("team-1", "b"), others, Directives(), NONE_OPEN)
    assert moved is not None and (moved.deployment, moved.moves) == (expected.id, 1)


async def test_a_pin_stays_with_nowhere_healthy_or_no_store() -> None:
    store = MemoryPinStore(60)
    pin = await store.place(new_pin("team-1", "b", CHAT["vllm-eu"], time.time()))
    others = (CHAT["openai-us"],)
    assert await move_batch(store, pin, others, Directives(), frozenset({CHAT["openai-us"].id})) is None
    assert await move_batch(DownStore(), pin, others, Directives(), NONE_OPEN) is None
    current = await store.touch("team-1", "b")
    assert current is not None and (current.deployment, current.moves) == (CHAT["vllm-eu"].id, 0)
