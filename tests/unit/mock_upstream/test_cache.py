from __future__ import annotations

from typing import Any

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.cache import PromptCache, PromptUsage
from mock_upstream.content import text_tokens
from mock_upstream.prompt import MESSAGE_OVERHEAD, anthropic_prompt, chat_prompt

SYSTEM = "You are a careful extractor. " * 40


def chat(question: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        **extra,
    }


def anthropic(question: str, cache: bool = True) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": SYSTEM}
    if cache:
        block["cache_control"] = {"type": "ephemeral"}
    return {
        "model": "c",
        "max_tokens": 8,
        "system": [block],
        "messages": [{"role": "user", "content": question}],
    }


def test_no_hint_means_no_cache() -> None:
    cache = PromptCache()
    for _ in range(2):
        usage = cache.account(chat_prompt(chat("q1")), MockBehaviour())
        assert usage.cache_read == 0
        assert usage.cache_write == 0


def test_prompt_cache_key_hits_on_the_second_request_with_the_same_prefix() -> None:
    cache = PromptCache()
    first = cache.account(chat_prompt(chat("q1", prompt_cache_key="k")), MockBehaviour())
    second = cache.account(chat_prompt(chat("q2", prompt_cache_key="k")), MockBehaviour())
    other_key = cache.account(chat_prompt(chat("q3", prompt_cache_key="other")), MockBehaviour())
    assert first.cache_read == 0
    assert 0 < second.cache_read < second.tokens
    assert other_key.cache_read == 0


def test_breakpoint_sets_the_prefix() -> None:
    cache = PromptCache()
    body = chat("q1")
    body["messages"][0]["cache_control"] = {"type": "ephemeral"}
    cache.account(chat_prompt(body), MockBehaviour())
    body = chat("a different question")
    body["messages"][0]["cache_control"] = {"type": "ephemeral"}
    assert (
        cache.account(chat_prompt(body), MockBehaviour()).cache_read == text_tokens(SYSTEM) + MESSAGE_OVERHEAD
    )


def test_anthropic_writes_then_reads_the_prefix() -> None:
    cache = PromptCache()
    first = cache.account(anthropic_prompt(anthropic("q1")), MockBehaviour())
    second = cache.account(anthropic_prompt(anthropic("q2")), MockBehaviour())
    assert first.cache_write > 0
    assert first.cache_read == 0
    assert second == PromptUsage(second.tokens, cache_read=first.cache_write)


def test_explicit_counts_win() -> None:
    cache = PromptCache()
    usage = cache.account(chat_prompt(chat("q")), MockBehaviour(prompt_tokens=100, cached_tokens=40))
    assert usage == PromptUsage(100, cache_read=40)
    capped = cache.account(chat_prompt(chat("q")), MockBehaviour(prompt_tokens=10, cached_tokens=40))
    assert capped == PromptUsage(10, cache_read=10)


def test_capacity_forgets_the_oldest_prefix() -> None:
    cache = PromptCache(capacity=1)
    cache.account(anthropic_prompt(anthropic("q")), MockBehaviour())
    other = anthropic("q")
    other["system"][0]["text"] = "another system prompt"
    cache.account(anthropic_prompt(other), MockBehaviour())
    assert cache.account(anthropic_prompt(anthropic("q")), MockBehaviour()).cache_read == 0
