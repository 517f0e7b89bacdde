"""The members the gateway sets in an OpenAI-format reply: `model` = the alias asked for, and in the
usage its exact cost (and the cached tokens), spliced into the bytes where they say for sure where
to, else decoded and encoded again; on whole answers, stream chunks and measure_ttft's assembly."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any

import msgspec
import pytest

from gateway.metering.pricing import Tariff
from gateway.providers.base import Endpoint, TokenUsage, UpstreamCall, stream_cost
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.azure import AzureAdapter
from gateway.providers.openai.chat_assembly import ChatAssembly
from gateway.providers.openai.reply_members import with_model, with_usage_members
from gateway.settings import Price
from tests.support.openapi import validate
from tests.unit.providers.calls import call, sse_payloads

ADAPTER = OpenAIAdapter()
ALIAS = b'"chat"'
TARIFF = Tariff(Price(input=Decimal("0.50"), output=Decimal("1.50"), cached_input=Decimal("0.25")))
BODY: dict[str, Any] = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
CHOICES = (
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},'
    b'"logprobs":null,"finish_reason":"stop"}]'
)
USAGE = b'"usage":{"prompt_tokens":100,"completion_tokens":5,"total_tokens":105}'


def priced_call(body: dict[str, Any] = BODY, tariff: Tariff | None = TARIFF, **kwargs: Any) -> UpstreamCall:
    return dataclasses.replace(call(body, **kwargs), tariff=tariff)


def completion(model: bytes = b'"gpt-4o-2024-08-06"', usage: bytes = USAGE) -> bytes:
    return (
        b'{"id":"c","object":"chat.completion","created":1,"model":'
        + model
        + b","
        + CHOICES
        + b","
        + usage
        + b"}"
    )


# --- the model ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (b'{"id":"c","model":"up-1","n":1}', b'{"id":"c","model":"chat","n":1}'),
        (b'{"id": "c", "model" : "up-1", "n": 1}', b'{"id": "c", "model" : "chat", "n": 1}'),
        (b'{\n  "id": "c",\n  "model":\n\t"up-1"\n}', b'{\n  "id": "c",\n  "model":\n\t"chat"\n}'),
        (b'{"model":"","choices":[]}', b'{"model":"chat","choices":[]}'),
    ],
)
def test_the_model_is_spliced_in_and_every_other_byte_kept(before: bytes, after: bytes) -> None:
    assert with_model(before, ALIAS) == after


def test_a_body_already_naming_the_alias_or_naming_no_model_is_returned_as_it_is() -> None:
    named = b'{"id":"c","model":"chat"}'
    unnamed = b'{"id":"c","choices":[]}'
    assert with_model(named, ALIAS) is named
    assert with_model(unnamed, ALIAS) is unnamed


@pytest.mark.parametrize(
    "body",
    [
        # the bytes "model" twice: a content of just that word, then the key
        b'{"choices":[{"delta":{"content":"model"}}],"model":"up-1"}',
        # a key seen twice, at two depths
        b'{"choices":[{"model":"inner"}],"model":"up-1"}',
        # an escape inside the value: the closing quote is not the first one found
        b'{"model":"up\\"1","id":"c"}',
        b'{"model":"up\\/1","id":"c"}',
        # not a string
        b'{"model":null,"id":"c"}',
    ],
)
def test_a_body_whose_bytes_are_ambiguous_is_decoded_and_only_its_model_changes(body: bytes) -> None:
    document = json.loads(body)
    assert json.loads(with_model(body, ALIAS)) == {**document, "model": "chat"}


def test_the_bytes_model_as_a_value_only_are_no_model_to_set() -> None:
    body = b'{"choices":[{"delta":{"content":"model"}}]}'
    assert json.loads(with_model(body, ALIAS)) == json.loads(body)


def test_an_answer_names_the_alias_and_the_upstream_name_is_gone() -> None:
    response = ADAPTER.parse_response(priced_call(), completion())
    document = json.loads(response.body)
    assert document["model"] == "chat"
    assert b"gpt-4o-2024-08-06" not in response.body
    validate("CreateChatCompletionResponse", document)


@pytest.mark.parametrize("endpoint", [Endpoint.COMPLETIONS, Endpoint.EMBEDDINGS])
def test_other_endpoints_name_the_alias_and_carry_the_cost(endpoint: Endpoint) -> None:
    body = b'{"object":"list","data":[],"model":"up-embed","usage":{"prompt_tokens":8,"total_tokens":8}}'
    response = ADAPTER.parse_response(priced_call({"model": "chat", "input": "x"}, endpoint=endpoint), body)
    document = json.loads(response.body)
    assert document["model"] == "chat"
    assert document["usage"]["cost"] == "0.00000400"  # 8 tokens at 0.50 / 1M
    assert ("prompt_tokens_details" in document["usage"]) is (endpoint is not Endpoint.EMBEDDINGS)


def test_azure_answers_name_the_alias_too() -> None:
    response = AzureAdapter().parse_response(priced_call(), completion(model=b'"gpt-4o"'))
    assert json.loads(response.body)["model"] == "chat"


# --- the cost -----------------------------------------------------------------------------------


def test_the_cost_is_the_tariffs_exact_decimal_string_and_the_responses_cost() -> None:
    response = ADAPTER.parse_response(priced_call(), completion())
    usage = json.loads(response.body)["usage"]
    assert usage["cost"] == "0.00005750"  # 100 x 0.50 + 5 x 1.50, per million
    assert response.cost == Decimal(usage["cost"]) == TARIFF.cost(TokenUsage(100, 5))
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert response.body == completion(
        model=ALIAS,
        usage=b'"usage":{"cost":"0.00005750","prompt_tokens_details":{"cached_tokens":0},'
        b'"prompt_tokens":100,"completion_tokens":5,"total_tokens":105}',
    )  # spliced: every byte of the answer as it came, the alias and the two members added


def test_usage_with_its_own_prompt_details_gets_only_the_cost() -> None:
    usage = (
        b'"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":40}}'
    )
    response = ADAPTER.parse_response(priced_call(), completion(usage=usage))
    assert json.loads(response.body)["usage"] == {
        "cost": "0.00004750",  # 60 x 0.50 + 40 x 0.25 + 5 x 1.50
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 40},
    }
    assert response.usage == TokenUsage(100, 5, 40)


def test_prompt_details_without_cached_tokens_keep_their_other_members() -> None:
    usage = b'"usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"audio_tokens":2}}'
    response = ADAPTER.parse_response(priced_call(), completion(usage=usage))
    parsed = json.loads(response.body)["usage"]
    assert parsed["prompt_tokens_details"] == {"audio_tokens": 2, "cached_tokens": 0}
    assert parsed["cost"] == "0.00000650"


@pytest.mark.parametrize("usage_object", [b"{}", b"{ }", b"{\n}"])
def test_an_empty_usage_object_gets_both_members(usage_object: bytes) -> None:
    spliced = with_usage_members(b'{"usage" : ' + usage_object + b"}", "0.1", cached_tokens=True)
    assert json.loads(spliced) == {"usage": {"cost": "0.1", "prompt_tokens_details": {"cached_tokens": 0}}}


def test_an_upstreams_own_cost_is_replaced_by_the_gateways() -> None:
    usage = b'"usage":{"prompt_tokens":100,"completion_tokens":5,"cost":0.25}'
    response = ADAPTER.parse_response(priced_call(), completion(usage=usage))
    assert json.loads(response.body)["usage"]["cost"] == "0.00005750"


def test_a_second_usage_key_makes_the_body_decoded() -> None:
    body = b'{"model":"x","choices":[{"usage":{"note":1}}],"usage":{"prompt_tokens":2,"completion_tokens":0}}'
    document = json.loads(ADAPTER.parse_response(priced_call(), body).body)
    assert document["choices"] == [{"usage": {"note": 1}}]
    assert document["usage"]["cost"] == "0.00000100"
    assert document["model"] == "chat"


@pytest.mark.parametrize(
    ("price", "usage", "expected"),
    [
        (Price(input=Decimal("0.02")), TokenUsage(1, 0), "0.00000002"),  # str() would say 2E-8
        (Price(input=Decimal("0.0001")), TokenUsage(3, 0), "0.0000000003"),
        (Price(input=Decimal(0), output=Decimal(0)), TokenUsage(5, 5), "0.000000"),
        (Price(input=Decimal(3), output=Decimal(15)), TokenUsage(1_000_000, 1_000_000), "18.000000"),
    ],
)
def test_costs_are_plain_decimals_however_small(price: Price, usage: TokenUsage, expected: str) -> None:
    body = completion(usage=b'"usage":' + msgspec.json.encode(msgspec.structs.asdict(usage)))
    response = ADAPTER.parse_response(priced_call(tariff=Tariff(price)), body)
    cost = json.loads(response.body)["usage"]["cost"]
    assert cost == expected
    assert "E" not in cost and "e" not in cost


def test_no_cost_without_a_tariff_or_without_believable_counts() -> None:
    unpriced = ADAPTER.parse_response(priced_call(tariff=None), completion())
    assert "cost" not in json.loads(unpriced.body)["usage"] and unpriced.cost is None
    untrue = completion(usage=b'"usage":{"prompt_tokens":-4,"completion_tokens":5}')
    distrusted = ADAPTER.parse_response(priced_call(), untrue)
    assert distrusted.untrusted_usage is not None and distrusted.cost is None
    assert json.loads(distrusted.body)["usage"] == {
        "prompt_tokens": -4,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


# --- streams ------------------------------------------------------------------------------------


def stream_chunk(content: str | None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-2024-08-06"}
    return msgspec.json.encode({**head, "choices": [choice], "usage": None})


USAGE_CHUNK = (
    b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","choices":[],'
    b'"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23}}'
)


def test_every_chunk_names_the_alias_and_the_usage_chunk_carries_the_cost() -> None:
    translator = ADAPTER.stream_translator(priced_call({**BODY, "stream": True}, client_wants_usage=True))
    frames = [*translator.feed(stream_chunk("Hel")), *translator.feed(stream_chunk("model"))]
    frames += translator.feed(USAGE_CHUNK) + translator.feed(b"[DONE]")
    payloads = sse_payloads(frames)
    assert [p["model"] for p in payloads[:-1]] == ["chat", "chat", "chat"]
    assert [p["choices"][0]["delta"]["content"] for p in payloads[:2]] == ["Hel", "model"]
    assert payloads[2]["usage"] == {
        "cost": "0.00001450",  # 20 x 0.50 + 3 x 1.50
        "prompt_tokens_details": {"cached_tokens": 0},
        "prompt_tokens": 20,
        "completion_tokens": 3,
        "total_tokens": 23,
    }
    assert stream_cost(translator) == Decimal("0.00001450") == TARIFF.cost(TokenUsage(20, 3))
    for payload in payloads[:-1]:
        validate("CreateChatCompletionStreamResponse", payload)


def test_a_chunk_is_spliced_byte_for_byte() -> None:
    translator = ADAPTER.stream_translator(priced_call({**BODY, "stream": True}))
    data = b'{"id": "c", "model" : "up-1", "choices": [{"delta": {"content": "x"}}], "usage" : null}'
    assert translator.feed(data) == [b"data: " + data.replace(b'"up-1"', b'"chat"') + b"\n\n"]


def test_an_unwanted_usage_chunk_is_dropped_but_priced() -> None:
    translator = ADAPTER.stream_translator(priced_call({**BODY, "stream": True}, client_wants_usage=False))
    assert translator.feed(USAGE_CHUNK) == []
    assert stream_cost(translator) == TARIFF.cost(TokenUsage(20, 3))


def test_a_stream_with_untrue_counts_has_no_cost() -> None:
    translator = ADAPTER.stream_translator(priced_call({**BODY, "stream": True}, client_wants_usage=True))
    untrue = USAGE_CHUNK.replace(b'"prompt_tokens":20', b'"prompt_tokens":-20')
    [payload] = sse_payloads(translator.feed(untrue))
    assert "cost" not in payload["usage"] and payload["model"] == "chat"
    assert translator.usage is None and stream_cost(translator) is None


def test_a_measured_answer_assembled_from_chunks_names_the_alias_and_carries_the_cost() -> None:
    """measure_ttft: the executor streams the chat completion, assembles it, then parses it."""
    assembly = ChatAssembly()
    for data in (stream_chunk("Hello"), stream_chunk(None, finish="stop"), USAGE_CHUNK, b"[DONE]"):
        assembly.feed(data)
    response = ADAPTER.parse_response(priced_call(), assembly.body())
    document = json.loads(response.body)
    assert document["model"] == "chat"
    assert document["choices"][0]["message"]["content"] == "Hello"
    assert document["usage"]["cost"] == "0.00001450" and response.cost == Decimal("0.00001450")
    validate("CreateChatCompletionResponse", document)
