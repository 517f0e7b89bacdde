"""Parsing a request body once: the dict to forward, the typed view, and the 400s for bad bodies."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.errors import InvalidRequest
from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request

MAX_MESSAGES = 5


def parse(body: Any, endpoint: Endpoint = Endpoint.CHAT, max_messages: int = MAX_MESSAGES) -> Any:
    raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
    return parse_request(raw, endpoint, max_messages)


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], **fields}


def test_chat_body_keeps_every_field_but_the_gateway_object() -> None:
    body = chat(seed=7, logit_bias={"1": -100}, gateway={"batch": "b-1"}, vendor_extension={"x": [1]})

    parsed = parse(body)

    assert parsed.body == chat(seed=7, logit_bias={"1": -100}, vendor_extension={"x": [1]})
    assert parsed.gateway_object == {"batch": "b-1"}
    assert parsed.model == "gpt-4o-mini"
    assert parsed.endpoint is Endpoint.CHAT
    assert parsed.chat is not None and parsed.chat.messages[0].content == "hi"
    assert not parsed.stream and not parsed.client_wants_usage


def test_prompt_cache_key_and_cache_control_are_read() -> None:
    message = {"role": "system", "content": "rules", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    parsed = parse(chat(messages=[message], prompt_cache_key="k-1", prompt_cache_retention="24h"))

    assert parsed.prompt_cache_key == "k-1"
    assert parsed.chat is not None
    assert parsed.chat.messages[0].cache_control == {"type": "ephemeral", "ttl": "1h"}
    assert parsed.body["prompt_cache_retention"] == "24h"


def test_without_a_prompt_cache_key_there_is_none() -> None:
    assert parse(chat()).prompt_cache_key is None


@pytest.mark.parametrize(
    ("stream_options", "wants_usage"),
    [(None, False), ({"include_usage": False}, False), ({"include_usage": True}, True)],
)
def test_stream_flags(stream_options: dict[str, bool] | None, wants_usage: bool) -> None:
    fields: dict[str, Any] = {"stream": True}
    if stream_options is not None:
        fields["stream_options"] = stream_options
    parsed = parse(chat(**fields))
    assert parsed.stream
    assert parsed.client_wants_usage is wants_usage


def test_stream_options_without_stream_is_refused() -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse(chat(stream_options={"include_usage": True}))
    assert raised.value.param == "stream_options"


def test_completions_and_embeddings_have_no_chat_view() -> None:
    completion = parse({"model": "m", "prompt": "Once", "stream": True}, Endpoint.COMPLETIONS)
    embedding = parse({"model": "e", "input": ["a", "b"]}, Endpoint.EMBEDDINGS)

    assert completion.chat is None and completion.stream and completion.prompt_cache_key is None
    assert embedding.chat is None and embedding.model == "e" and not embedding.stream


def test_prompt_cache_key_is_only_read_from_chat_requests() -> None:
    parsed = parse({"model": "m", "prompt": "x", "prompt_cache_key": "k"}, Endpoint.COMPLETIONS)
    assert parsed.prompt_cache_key is None
    assert parsed.body["prompt_cache_key"] == "k"  # still forwarded untouched


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "empty"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
    ],
)
def test_bodies_that_are_not_json_objects(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse(raw)
    assert message in raised.value.message
    assert raised.value.status == 400


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, None),
        (chat(model=""), "model"),
        (chat(messages=[]), "messages"),
        (chat(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role"),
        (chat(temperature="hot"), "temperature"),
        (chat(messages=[{"role": "user", "content": [{"text": "no type"}]}]), "messages[0].content[0]"),
    ],
)
def test_invalid_chat_bodies_name_the_parameter(body: dict[str, Any], param: str | None) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse(body)
    assert raised.value.param == param
    if param is not None:
        assert f"at '{param}'" in raised.value.message or param in raised.value.message


def test_a_missing_model_is_named_in_the_message() -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse({"messages": [{"role": "user", "content": "hi"}]})
    assert "model" in raised.value.message


def test_too_many_messages() -> None:
    messages = [{"role": "user", "content": str(i)} for i in range(MAX_MESSAGES + 1)]
    with pytest.raises(InvalidRequest) as raised:
        parse(chat(messages=messages))
    assert raised.value.param == "messages"
    assert str(MAX_MESSAGES) in raised.value.message
    assert parse(chat(messages=messages[:MAX_MESSAGES])).chat is not None


def test_embeddings_need_an_input() -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse({"model": "e"}, Endpoint.EMBEDDINGS)
    assert "input" in raised.value.message


def test_prompt_cache_retention_is_normalised_or_refused() -> None:
    from gateway.errors import InvalidRequest
    from gateway.providers.base import Endpoint
    from gateway.proxy.request import parse_request

    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "prompt_cache_retention": "in-memory"}'
    assert parse_request(body, Endpoint.CHAT, 10).body["prompt_cache_retention"] == "in_memory"
    with pytest.raises(InvalidRequest) as refused:
        parse_request(body.replace(b"in-memory", b"forever"), Endpoint.CHAT, 10)
    assert refused.value.param == "prompt_cache_retention"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, (None, 1)),
        ({"max_tokens": 50}, (50, 1)),
        ({"max_completion_tokens": 30, "max_tokens": 50}, (30, 1)),
        ({"max_completion_tokens": None, "max_tokens": 1}, (1, 1)),  # null is unset
        ({"max_tokens": None, "n": None}, (None, 1)),
        ({"max_tokens": 8, "n": 4}, (8, 4)),
    ],
)
def test_the_output_a_request_allows(fields: dict[str, Any], expected: tuple[int | None, int]) -> None:
    parsed = parse(chat(**fields))

    assert (parsed.max_output_tokens, parsed.choices) == expected


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_completion_tokens": -5, "max_tokens": 10}, "max_completion_tokens"),
        ({"max_tokens": 10, "max_completion_tokens": 2**31}, "max_completion_tokens"),
        ({"max_tokens": 10**30}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_tokens": "100"}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"n": 129}, "n"),
    ],
)
def test_output_limits_out_of_range_are_400(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse(chat(**fields))

    error = raised.value
    assert (error.status, error.type, error.param) == (400, "invalid_request_error", param)


def test_an_embedding_allows_no_output() -> None:
    parsed = parse({"model": "e", "input": "text"}, Endpoint.EMBEDDINGS)

    assert (parsed.max_output_tokens, parsed.choices) == (0, 1)


def test_a_completion_reads_max_tokens_and_n() -> None:
    parsed = parse({"model": "c", "prompt": "once", "max_tokens": 7, "n": 2}, Endpoint.COMPLETIONS)

    assert (parsed.max_output_tokens, parsed.choices) == (7, 2)
