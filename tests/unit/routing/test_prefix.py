"""A prompt's leading part as digests (gateway.routing.prefix): what two prompts share, and only that."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request
from gateway.routing.prefix import BLOCK_BYTES, NO_PREFIX, PromptPrefix, prompt_prefix

HANDBOOK = "Extract every invoice field. " * 200  # about 5.8 KB: five whole blocks and more
WINDOW = 8192


def prefix_of(body: dict[str, Any], team: str = "team-a", endpoint: Endpoint = Endpoint.CHAT) -> PromptPrefix:
    parsed = parse_request(msgspec.json.encode({"model": "m", **body}), endpoint, 100)
    return prompt_prefix(team, parsed.typed, WINDOW)


def chat(question: str, system: str = HANDBOOK, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return {"messages": messages, **extra}


def test_one_system_prompt_with_different_questions_shares_its_part_and_blocks() -> None:
    first, second = prefix_of(chat("Invoice 1")), prefix_of(chat("Invoice 2, much longer " * 50))

    assert first.shared is not None and first.shared == second.shared
    assert first.shared_tokens == second.shared_tokens > len(HANDBOOK) // 4
    whole = len(HANDBOOK) // BLOCK_BYTES
    assert first.blocks[:whole] == second.blocks[:whole]
    assert first.anchor == second.anchor == first.shared


def test_two_teams_never_share_a_digest() -> None:
    ours, theirs = prefix_of(chat("Invoice 1"), "team-a"), prefix_of(chat("Invoice 1"), "team-b")

    assert ours.shared != theirs.shared
    assert not set(ours.blocks) & set(theirs.blocks)


def test_different_system_prompts_share_nothing_past_their_common_opening() -> None:
    first = prefix_of(chat("q", system="A handbook. " + HANDBOOK))
    second = prefix_of(chat("q", system="Another handbook. " + HANDBOOK))

    assert first.shared != second.shared
    assert first.blocks[0] != second.blocks[0]


def test_a_prompt_shorter_than_a_block_has_no_prefix_to_follow() -> None:
    short = prefix_of(
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}
    )

    assert short.blocks == () and short.shared is None and short.anchor is None
    assert short.shared_tokens == 0


def test_a_single_long_message_is_followed_by_its_first_block() -> None:
    alone = prefix_of({"messages": [{"role": "user", "content": HANDBOOK + "What is due?"}]})

    assert alone.shared is None
    assert alone.blocks and alone.anchor == alone.blocks[0].hex()
    assert alone.shared_blocks == len(alone.blocks)


def test_the_window_bounds_what_is_hashed() -> None:
    huge = chat("q", system="x" * 1_000_000)
    parsed = parse_request(msgspec.json.encode({"model": "m", **huge}), Endpoint.CHAT, 100)

    bounded = prompt_prefix("team-a", parsed.typed, 1024)

    assert len(bounded.blocks) == 1024 * 4 // BLOCK_BYTES
    assert bounded.shared_bytes == 1024 * 4  # the shared part is named by the window's worth of it
    assert prompt_prefix("team-a", parsed.typed, 0) == NO_PREFIX


def test_a_breakpoint_ends_the_shared_part() -> None:
    marked = {"role": "user", "content": HANDBOOK, "cache_control": {"type": "ephemeral"}}
    one = prefix_of(
        {"messages": [marked, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "1"}]}
    )
    two = prefix_of(
        {"messages": [marked, {"role": "assistant", "content": "yes"}, {"role": "user", "content": "2"}]}
    )

    assert one.shared is not None and one.shared == two.shared


def test_messages_and_responses_share_their_system_and_instructions() -> None:
    def messages(question: str) -> PromptPrefix:
        body = {"max_tokens": 8, "system": HANDBOOK, "messages": [{"role": "user", "content": question}]}
        return prefix_of(body, endpoint=Endpoint.MESSAGES)

    def responses(question: str) -> PromptPrefix:
        return prefix_of({"instructions": HANDBOOK, "input": question}, endpoint=Endpoint.RESPONSES)

    assert messages("a").shared is not None and messages("a").shared == messages("b").shared
    assert responses("a").shared is not None and responses("a").shared == responses("b").shared


def test_embeddings_have_no_prefix() -> None:
    assert prefix_of({"input": HANDBOOK}, endpoint=Endpoint.EMBEDDINGS) == NO_PREFIX
