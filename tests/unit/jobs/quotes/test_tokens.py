"""Prompt counts and the prefix cache's share, per tokenizer (gateway.jobs.quotes.tokens)."""

from __future__ import annotations

import json
import math

from gateway.jobs.quotes.tokens import (
    BLOCK_CACHE,
    ESTIMATE,
    BpeCounter,
    CacheRule,
    CharsCounter,
    EstimateCounter,
    Prompt,
    cached_tokens,
    chained,
    tokenizer_name,
)
from gateway.settings import Provider, ProviderKind
from gateway.settings.catalog import DeploymentSpec
from mock_upstream.vllm.tokens import prompt_blocks, prompt_text

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 12}


def body(question: str, system: dict[str, str] = SYSTEM) -> dict[str, object]:
    return {"model": "m", "messages": [system, {"role": "user", "content": question}], "max_tokens": 8}


def test_chars4_counts_as_the_simulated_vllm_does() -> None:
    for question in ("hi", "What is 12 squared?", "x" * 301):
        line = body(question)
        expected = prompt_blocks("m", prompt_text(line["messages"]), 16)  # type: ignore[arg-type]

        counted = CharsCounter().prompt(line, json.dumps(line))

        assert counted.tokens == expected.tokens
        assert len(counted.blocks) == len(expected.block_hashes)


def test_lines_sharing_a_system_prompt_cache_its_whole_blocks_after_the_first() -> None:
    counter = CharsCounter()
    lines = [body(f"question {i}") for i in range(4)]
    prompts = [counter.prompt(line, json.dumps(line)) for line in lines]
    shared_chars = len(f"<|system|>{SYSTEM['content']}\n<|user|>question ")
    shared_blocks = shared_chars // (16 * 4)

    cached = cached_tokens(prompts, counter.cache)

    assert cached == [0] + [shared_blocks * 16] * 3


def test_a_prompt_keeps_one_token_to_compute_even_when_all_of_it_was_seen() -> None:
    prompt = Prompt(32, chained([b"a", b"b"]))

    assert cached_tokens([prompt, prompt], BLOCK_CACHE) == [0, 16]


def test_a_prompt_below_the_cache_minimum_caches_nothing() -> None:
    rule = CacheRule(block=2, minimum=10)
    short = Prompt(5, chained([b"a", b"b"]))
    long = Prompt(11, chained([b"a", b"b", b"c", b"d", b"e"]))

    assert cached_tokens([short, short, long, long], rule) == [0, 0, 4, 10]


def test_a_different_prefix_shares_nothing() -> None:
    counter = CharsCounter()
    first = body("same question", {"role": "system", "content": "A" * 200})
    second = body("same question", {"role": "system", "content": "B" * 200})
    prompts = [counter.prompt(line, json.dumps(line)) for line in (first, second)]

    assert cached_tokens(prompts, counter.cache) == [0, 0]


def test_the_bpe_counts_an_openai_chat_with_its_format_tokens() -> None:
    line = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello world"}]}

    counted = BpeCounter("o200k_base").prompt(line, json.dumps(line))

    # "Hello world" and "user" are 2 and 1 o200k tokens; 3 a message and 3 for the reply
    assert counted.tokens == 3 + 1 + 2 + 3


def test_the_estimate_is_the_gateways_own() -> None:
    line = body("What is the capital of France?")
    text_bytes = sum(len(m["content"].encode()) for m in line["messages"])  # type: ignore[attr-defined]

    counted = EstimateCounter(max_messages=100).prompt(line, json.dumps(line))

    assert counted.tokens == math.ceil(text_bytes / 4)


def test_the_tokenizer_is_the_catalogs_else_the_models_bpe_else_the_estimate() -> None:
    openai = Provider(name="o", kind=ProviderKind.OPENAI, region="us", base_url="http://o")
    mock = Provider(name="m", kind=ProviderKind.MOCK, region="us")

    assert tokenizer_name(DeploymentSpec(provider="m", model="x", tokenizer="chars4"), mock) == "chars4"
    assert tokenizer_name(DeploymentSpec(provider="o", model="gpt-4o-mini"), openai) == "o200k_base"
    assert tokenizer_name(DeploymentSpec(provider="o", model="gpt-4"), openai) == "cl100k_base"
    assert tokenizer_name(DeploymentSpec(provider="o", model="llama-3-8b"), openai) == ESTIMATE
    assert tokenizer_name(DeploymentSpec(provider="m", model="gpt-4o"), mock) == ESTIMATE
