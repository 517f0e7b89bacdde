"""Route choice as pure functions: eligibility, ordering, pins, circuits, rendezvous hashing."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.errors import ModelNotFound, NoRoute, PermissionDenied, UpstreamUnavailable
from gateway.routing.directives import Directives, Fallback
from gateway.routing.policy import (
    eligible_deployments,
    plan_route,
    rendezvous_choice,
    rendezvous_order,
    weighted_order,
)
from tests.unit.routing.catalog import CHAT, TABLE, principal

ALL_CHAT = tuple(TABLE.by_model["chat"])
NONE_OPEN: frozenset[str] = frozenset()


def names(deployments: object) -> list[str]:
    return [d.provider.name for d in deployments]  # type: ignore[attr-defined]


# --- eligible_deployments ---------------------------------------------------------------------


def test_no_directives_keep_configured_order() -> None:
    assert eligible_deployments("chat", Directives(), principal(), TABLE) == ALL_CHAT


def test_region_filter() -> None:
    chosen = eligible_deployments("chat", Directives(region="us-east"), principal(), TABLE)
    assert names(chosen) == ["openai-us", "claude-us"]


def test_provider_list_is_a_preference_order() -> None:
    directives = Directives(providers=("claude-us", "vllm-eu"))
    assert names(eligible_deployments("chat", directives, principal(), TABLE)) == ["claude-us", "vllm-eu"]


def test_region_and_provider_combine() -> None:
    directives = Directives(region="us-east", providers=("vllm-eu", "openai-us"))
    assert names(eligible_deployments("chat", directives, principal(), TABLE)) == ["openai-us"]


def test_unknown_model_is_404() -> None:
    with pytest.raises(ModelNotFound):
        eligible_deployments("nope", Directives(), principal(), TABLE)


def test_model_outside_the_key_is_403() -> None:
    with pytest.raises(PermissionDenied) as caught:
        eligible_deployments("chat", Directives(), principal(allowed_models=frozenset({"embed"})), TABLE)
    assert caught.value.param == "model"


def test_unknown_region_lists_the_regions() -> None:
    with pytest.raises(NoRoute) as caught:
        eligible_deployments("chat", Directives(region="mars"), principal(), TABLE)
    assert caught.value.code == "no_route"
    assert caught.value.param == "X-Gateway-Region"
    assert "ap-south, eu-west, us-east" in caught.value.message


def test_unknown_provider_lists_the_providers() -> None:
    with pytest.raises(NoRoute) as caught:
        eligible_deployments("chat", Directives(providers=("openai-us", "ghost")), principal(), TABLE)
    assert "ghost" in caught.value.message
    assert "claude-us, openai-us, vllm-ap, vllm-eu" in caught.value.message


def test_directives_leaving_nothing_list_what_serves_the_model() -> None:
    with pytest.raises(NoRoute) as caught:
        eligible_deployments("embed", Directives(region="eu-west"), principal(), TABLE)
    assert caught.value.param == "model"
    assert "openai-us (us-east)" in caught.value.message
    with pytest.raises(NoRoute):
        eligible_deployments("chat", Directives(providers=("vllm-ap",)), principal(), TABLE)


def test_residency_bounds_unpinned_routing() -> None:
    eu_only = principal(allowed_regions=frozenset({"eu-west"}))
    assert names(eligible_deployments("chat", Directives(), eu_only, TABLE)) == ["vllm-eu"]


def test_region_directive_outside_residency_is_403() -> None:
    with pytest.raises(PermissionDenied) as caught:
        eligible_deployments(
            "chat", Directives(region="us-east"), principal(allowed_regions=frozenset({"eu-west"})), TABLE
        )
    assert (caught.value.status, caught.value.code) == (403, "region_not_allowed")
    assert "eu-west" in caught.value.message


def test_provider_directive_outside_residency_is_403() -> None:
    with pytest.raises(PermissionDenied) as caught:
        eligible_deployments(
            "chat",
            Directives(providers=("openai-us",)),
            principal(allowed_regions=frozenset({"eu-west"})),
            TABLE,
        )
    assert caught.value.param == "X-Gateway-Provider"


def test_model_served_only_outside_residency_is_403() -> None:
    with pytest.raises(PermissionDenied) as caught:
        eligible_deployments("embed", Directives(), principal(allowed_regions=frozenset({"eu-west"})), TABLE)
    assert caught.value.param == "model"


# --- plan_route -------------------------------------------------------------------------------


def test_unbatched_plan_lists_every_healthy_deployment() -> None:
    plan = plan_route(ALL_CHAT, Directives(), NONE_OPEN, None, random.Random(1))
    assert sorted(names(plan.deployments)) == ["claude-us", "openai-us", "vllm-eu"]
    assert not plan.pinned


def test_plans_are_deterministic_for_a_seed() -> None:
    first = plan_route(ALL_CHAT, Directives(), NONE_OPEN, None, random.Random(5))
    again = plan_route(ALL_CHAT, Directives(), NONE_OPEN, None, random.Random(5))
    assert first == again


def test_weighted_choice_follows_the_weights() -> None:
    rng = random.Random(20260101)
    firsts = Counter(
        plan_route(ALL_CHAT, Directives(), NONE_OPEN, None, rng).first.provider.name for _ in range(10_000)
    )
    # weights 1 : 3 : 1 -> 20% : 60% : 20%
    assert 5_700 < firsts["vllm-eu"] < 6_300
    assert 1_700 < firsts["openai-us"] < 2_300
    assert 1_700 < firsts["claude-us"] < 2_300


def test_weighted_order_is_a_permutation() -> None:
    order = weighted_order(ALL_CHAT, random.Random(3))
    assert sorted(d.id for d in order) == sorted(d.id for d in ALL_CHAT)


def test_provider_preference_is_kept_not_shuffled() -> None:
    directives = Directives(providers=("claude-us", "openai-us", "vllm-eu"))
    eligible = eligible_deployments("chat", directives, principal(), TABLE)
    for seed in range(20):
        plan = plan_route(eligible, directives, NONE_OPEN, None, random.Random(seed))
        assert names(plan.deployments) == ["claude-us", "openai-us", "vllm-eu"]


def test_open_circuits_are_skipped() -> None:
    open_ = frozenset({CHAT["vllm-eu"].id, CHAT["openai-us"].id})
    for seed in range(20):
        plan = plan_route(ALL_CHAT, Directives(), open_, None, random.Random(seed))
        assert names(plan.deployments) == ["claude-us"]


def test_every_circuit_open_is_503() -> None:
    with pytest.raises(UpstreamUnavailable) as caught:
        plan_route(ALL_CHAT, Directives(), frozenset(d.id for d in ALL_CHAT), None, random.Random(0))
    assert caught.value.status == 503


def test_a_new_batch_is_bound_to_one_healthy_deployment() -> None:
    directives = Directives(batch="b1")
    open_ = frozenset({CHAT["vllm-eu"].id})
    for seed in range(20):
        plan = plan_route(ALL_CHAT, directives, open_, None, random.Random(seed))
        assert plan.pinned and plan.batch == "b1"
        assert len(plan.deployments) == 1
        assert plan.first.provider.name != "vllm-eu"


def test_fallback_never_binds_an_unbatched_request() -> None:
    plan = plan_route(ALL_CHAT, Directives(fallback=Fallback.NEVER), NONE_OPEN, None, random.Random(0))
    assert plan.pinned and len(plan.deployments) == 1 and plan.batch is None


def test_a_pin_wins_even_over_an_open_circuit() -> None:
    pinned = CHAT["openai-us"]
    plan = plan_route(ALL_CHAT, Directives(batch="b"), frozenset({pinned.id}), pinned.id, random.Random(0))
    assert plan.deployments == (pinned,) and plan.pinned


def test_a_pin_the_directives_exclude_is_a_conflict() -> None:
    eligible = eligible_deployments("chat", Directives(region="eu-west"), principal(), TABLE)
    with pytest.raises(NoRoute) as caught:
        plan_route(
            eligible,
            Directives(batch="b", region="eu-west"),
            NONE_OPEN,
            CHAT["openai-us"].id,
            random.Random(0),
        )
    assert caught.value.code == "batch_pin_conflict"
    assert CHAT["openai-us"].id in caught.value.message


# --- rendezvous hashing -------------------------------------------------------------------------


def test_rendezvous_agrees_whatever_the_order() -> None:
    for batch in (f"team-1:batch-{i}" for i in range(200)):
        assert rendezvous_choice(batch, ALL_CHAT) == rendezvous_choice(batch, tuple(reversed(ALL_CHAT)))


def test_rendezvous_spreads_batches_by_weight() -> None:
    chosen = Counter(rendezvous_choice(f"team-1:batch-{i}", ALL_CHAT).provider.name for i in range(5_000))
    assert set(chosen) == {"openai-us", "vllm-eu", "claude-us"}
    assert chosen["vllm-eu"] > chosen["openai-us"] + chosen["claude-us"] - 500  # weight 3 of 5


def test_rendezvous_remaps_only_what_the_lost_deployment_held() -> None:
    keys = [f"team-1:batch-{i}" for i in range(2_000)]
    before = {k: rendezvous_choice(k, ALL_CHAT).id for k in keys}
    survivors = tuple(d for d in ALL_CHAT if d.provider.name != "claude-us")
    after = {k: rendezvous_choice(k, survivors).id for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved, "some batches were on the lost deployment"
    assert all(before[k] == CHAT["claude-us"].id for k in moved)


def test_rendezvous_order_over_replica_urls() -> None:
    urls = ["http://r1", "http://r2", "http://r3"]
    keys = [f"prefix-{i}" for i in range(1_000)]
    before = {k: urls[rendezvous_order(k, urls)[0]] for k in keys}
    assert set(before.values()) == set(urls)
    survivors = ["http://r1", "http://r3"]
    after = {k: survivors[rendezvous_order(k, survivors)[0]] for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != "http://r2")
    # A key whose replica went goes where its own order overflowed to.
    assert all(after[k] == urls[rendezvous_order(k, urls)[1]] for k in keys if before[k] == "http://r2")


# --- a conversation's preferred deployment ----------------------------------------------------


def test_a_conversation_prefers_its_last_deployment_while_healthy() -> None:
    last = ALL_CHAT[-1].id
    for seed in range(20):
        plan = plan_route(ALL_CHAT, Directives(), NONE_OPEN, None, random.Random(seed), preferred=last)
        assert plan.first.id == last and len(plan.deployments) == len(ALL_CHAT)
    unhealthy = plan_route(ALL_CHAT, Directives(), frozenset({last}), None, random.Random(0), preferred=last)
    assert last not in [d.id for d in unhealthy.deployments]


def test_a_batch_pin_and_the_clients_order_come_before_a_conversation() -> None:
    first, last = ALL_CHAT[0], ALL_CHAT[-1]
    pinned = plan_route(
        ALL_CHAT, Directives(batch="b"), NONE_OPEN, first.id, random.Random(0), preferred=last.id
    )
    assert pinned.deployments == (first,)
    ordered = Directives(providers=(first.provider.name, last.provider.name))
    chosen = [d for d in ALL_CHAT if d.provider.name in ordered.providers]
    plan = plan_route(chosen, ordered, NONE_OPEN, None, random.Random(0), preferred=last.id)
    assert plan.first == first
    never = plan_route(
        ALL_CHAT, Directives(fallback=Fallback.NEVER), NONE_OPEN, None, random.Random(3), last.id
    )
    assert never.deployments == (last,)
