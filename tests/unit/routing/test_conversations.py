"""Conversation affinity's memory (gateway.routing.conversations): names scoped by team, a TTL."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request
from gateway.routing.conversations import Conversations, Placement, conversation_key, next_turn_key


def key_of(body: dict[str, Any], endpoint: Endpoint, team: str = "team-a") -> str | None:
    parsed = parse_request(msgspec.json.encode({"model": "m", **body}), endpoint, 100)
    return conversation_key(team, parsed.typed)


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def test_a_conversation_is_named_by_the_client_and_scoped_by_team() -> None:
    keyed = key_of({**CHAT, "prompt_cache_key": "thread-1"}, Endpoint.CHAT)
    assert keyed is not None
    assert keyed == key_of(
        {"messages": [{"role": "user", "content": "later"}], "prompt_cache_key": "thread-1"}, Endpoint.CHAT
    )
    assert keyed != key_of({**CHAT, "prompt_cache_key": "thread-1"}, Endpoint.CHAT, "team-b")
    assert key_of(CHAT, Endpoint.CHAT) is None

    user = {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "metadata": {"user_id": "u-1"}}
    assert key_of(user, Endpoint.MESSAGES) is not None

    turn = key_of({"input": "next", "previous_response_id": "resp_1"}, Endpoint.RESPONSES)
    assert turn == next_turn_key("team-a", "resp_1")


def test_a_placement_is_kept_for_its_ttl_after_the_last_request() -> None:
    now = [0.0]
    conversations = Conversations(60, clock=lambda: now[0])
    conversations.remember("c", Placement("vllm/llama", "http://a/v1"))

    now[0] = 59
    found = conversations.find("c")
    assert found is not None and found.then == Placement("vllm/llama", "http://a/v1")
    now[0] = 61
    expired = conversations.find("c")
    assert expired is not None and expired.key == "c" and expired.then is None
    assert conversations.find(None) is None


def test_the_least_recently_served_conversation_goes_first() -> None:
    conversations = Conversations(60, size=2)
    for name in ("a", "b", "c"):
        conversations.remember(name, Placement(name, None))
    assert conversations.find("a").then is None  # type: ignore[union-attr]
    assert conversations.find("c").then == Placement("c", None)  # type: ignore[union-attr]


def test_a_ttl_of_zero_remembers_nothing() -> None:
    conversations = Conversations(0)
    conversations.remember("c", Placement("d", None))
    assert conversations.find("c").then is None  # type: ignore[union-attr]
