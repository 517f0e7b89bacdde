"""The OpenAI-compatible adapter: request building, hints, response and stream pass-through, errors."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.errors import UpstreamError, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from gateway.providers.base import Endpoint, TokenUsage
from gateway.providers.errors import parse_retry_after
from gateway.providers.openai.adapter import OpenAIAdapter, is_openai_api, openai_auth_headers
from tests.support.openapi import validate
from tests.unit.providers.calls import SECRET, call, provider, sse_payloads

ADAPTER = OpenAIAdapter()
VLLM = "http://10.0.0.5:8000/v1"
OPENAI = "https://api.openai.com/v1"
EPH = {"type": "ephemeral"}

BODY: dict[str, Any] = {
    "model": "alias",
    "messages": [{"role": "system", "content": "s", "cache_control": EPH}, {"role": "user", "content": "u"}],
    "temperature": 0.3,
    "response_format": {"type": "json_object"},
    "logit_bias": {"50256": -100},
    "seed": 7,
}


def sent(body: dict[str, Any], base_url: str = VLLM, **kwargs: Any) -> dict[str, Any]:
    settings = kwargs.pop("provider", provider())
    request = ADAPTER.build_request(call(body, **kwargs), settings, base_url)
    decoded: dict[str, Any] = json.loads(request.content)
    return decoded


def test_request_url_headers_and_model() -> None:
    settings = provider(headers={"x-extra": "1"})
    request = ADAPTER.build_request(call(BODY), settings, VLLM + "/")
    assert request.url == f"{VLLM}/chat/completions"
    assert request.method == "POST"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert request.headers["x-extra"] == "1"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content)["model"] == "upstream-model"


def test_no_authorization_without_key() -> None:
    request = ADAPTER.build_request(call(BODY), provider(api_key=None), VLLM)
    assert "authorization" not in request.headers


def test_every_other_field_is_forwarded_untouched() -> None:
    forwarded = sent(BODY, provider=provider(cache_hints="pass"))
    assert forwarded == {**BODY, "model": "upstream-model"}
    assert BODY["model"] == "alias"  # the client's body is not modified


@pytest.mark.parametrize("endpoint", [Endpoint.COMPLETIONS, Endpoint.EMBEDDINGS])
def test_other_endpoints(endpoint: Endpoint) -> None:
    body = (
        {"model": "alias", "input": "x"} if endpoint is Endpoint.EMBEDDINGS else {"model": "a", "prompt": "x"}
    )
    request = ADAPTER.build_request(call(body, endpoint=endpoint, cache_key="k"), provider(), OPENAI)
    assert request.url == f"{OPENAI}/{endpoint.value}"
    assert "prompt_cache_key" not in json.loads(request.content)


def test_stream_asks_for_usage_and_keeps_other_stream_options() -> None:
    body = {**BODY, "stream": True, "stream_options": {"include_obfuscation": False}}
    assert sent(body)["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert body["stream_options"] == {"include_obfuscation": False}
    assert sent({**BODY, "stream": True})["stream_options"] == {"include_usage": True}


def test_openai_hints_for_api_openai_com() -> None:
    body = {**BODY, "prompt_cache_retention": "24h"}
    forwarded = sent(body, OPENAI, cache_key="derived-key")
    assert forwarded["prompt_cache_key"] == "derived-key"
    assert forwarded["prompt_cache_retention"] == "24h"
    assert "cache_control" not in json.dumps(forwarded)
    own = sent({**body, "prompt_cache_key": "client-key"}, OPENAI, cache_key="derived-key")
    assert own["prompt_cache_key"] == "client-key"


def test_self_hosted_strips_hints_by_default() -> None:
    forwarded = sent({**BODY, "prompt_cache_key": "k", "prompt_cache_retention": "24h"}, cache_key="d")
    assert "prompt_cache_key" not in forwarded
    assert "prompt_cache_retention" not in forwarded
    assert "cache_control" not in json.dumps(forwarded)


def test_pass_forwards_hints_as_sent() -> None:
    forwarded = sent({**BODY, "prompt_cache_key": "k"}, provider=provider(cache_hints="pass"), cache_key="d")
    assert forwarded["prompt_cache_key"] == "k"
    assert forwarded["messages"][0]["cache_control"] == EPH


COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "alias",  # as the client asked: an answer naming it needs no change for its model
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "total_tokens": 105,
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
    },
}


def test_response_with_cached_tokens_passes_through_byte_for_byte() -> None:
    body = json.dumps(COMPLETION, indent=1).encode()
    response = ADAPTER.parse_response(call(BODY), body)
    assert response.body is body
    assert response.usage == TokenUsage(prompt_tokens=100, completion_tokens=5, cached_tokens=64)


def test_response_without_cached_tokens_gets_them() -> None:
    document = {**COMPLETION, "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}
    response = ADAPTER.parse_response(call(BODY), json.dumps(document).encode())
    parsed = json.loads(response.body)
    assert parsed["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert parsed["choices"] == COMPLETION["choices"]
    assert response.usage == TokenUsage(prompt_tokens=9, completion_tokens=2)
    validate("CreateChatCompletionResponse", parsed)


def test_response_keeps_other_prompt_details_when_adding_cached_tokens() -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11, "prompt_tokens_details": {}}
    response = ADAPTER.parse_response(call(BODY), json.dumps({**COMPLETION, "usage": usage}).encode())
    assert json.loads(response.body)["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_embeddings_usage_is_left_as_sent() -> None:
    body = b'{"object":"list","data":[],"model":"e","usage":{"prompt_tokens":3,"total_tokens":3}}'
    response = ADAPTER.parse_response(call({"model": "e", "input": "x"}, endpoint=Endpoint.EMBEDDINGS), body)
    assert response.body is body
    assert response.usage == TokenUsage(prompt_tokens=3)


def test_response_without_usage() -> None:
    body = json.dumps({**COMPLETION, "usage": None}).encode()
    response = ADAPTER.parse_response(call(BODY), body)
    assert response.usage is None
    assert response.body is body


@pytest.mark.parametrize("body", [b"<html>bad gateway</html>", b"", b"[1, 2]", b'{"usage": "lots"}'])
def test_garbage_response_is_a_bad_response(body: bytes) -> None:
    with pytest.raises(UpstreamError) as caught:
        ADAPTER.parse_response(call(BODY), body)
    assert caught.value.status == 502
    assert caught.value.code == "upstream_bad_response"


def test_error_object_with_200_is_an_upstream_error() -> None:
    with pytest.raises(UpstreamError, match="model overloaded"):
        ADAPTER.parse_response(call(BODY), b'{"error": {"message": "model overloaded"}}')


def chunk(content: str) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "logprobs": None, "finish_reason": None}
    document = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "alias",
        "choices": [choice],
    }
    return json.dumps(document).encode()


USAGE_CHUNK = (
    b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"alias","choices":[],'
    b'"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23,'
    b'"prompt_tokens_details":{"cached_tokens":16}}}'
)


def test_stream_passes_chunks_verbatim_and_drops_unwanted_usage_chunk() -> None:
    translator = ADAPTER.stream_translator(call({**BODY, "stream": True}, client_wants_usage=False))
    first = chunk('say "usage" and "error"')
    frames = translator.feed(first) + translator.feed(USAGE_CHUNK) + translator.feed(b"[DONE]")
    assert frames == [b"data: " + first + b"\n\n", b"data: [DONE]\n\n"]
    assert translator.usage == TokenUsage(prompt_tokens=20, completion_tokens=3, cached_tokens=16)
    assert translator.finish() == []


def test_stream_keeps_usage_chunk_when_client_asked() -> None:
    translator = ADAPTER.stream_translator(call({**BODY, "stream": True}, client_wants_usage=True))
    frames = translator.feed(USAGE_CHUNK)
    assert frames == [b"data: " + USAGE_CHUNK + b"\n\n"]
    validate("CreateChatCompletionStreamResponse", sse_payloads(frames)[0])


def test_stream_null_usage_chunks_pass_and_done_is_added_when_missing() -> None:
    translator = ADAPTER.stream_translator(call({**BODY, "stream": True}))
    data = chunk("x")[:-1] + b', "usage": null}'
    assert translator.feed(data) == [b"data: " + data + b"\n\n"]
    assert translator.usage is None
    assert translator.finish() == [b"data: [DONE]\n\n"]


def test_stream_chunks_with_null_usage_are_not_decoded() -> None:
    """The fast path: a chunk whose usage is null is relayed as it came, never parsed."""
    translator = ADAPTER.stream_translator(call({**BODY, "stream": True}))
    for data in (b'{"choices":[],"usage":null,"x":', b'{"choices":[],"usage": null,"x":'):
        assert translator.feed(data) == [b"data: " + data + b"\n\n"]
    assert translator.usage is None


def test_a_delta_of_just_the_word_usage_does_not_hide_the_counts() -> None:
    translator = ADAPTER.stream_translator(call({**BODY, "stream": True}, client_wants_usage=True))
    data = (
        chunk("usage")[:-1] + b', "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}'
    )
    [payload] = sse_payloads(translator.feed(data))
    assert payload["choices"][0]["delta"] == {"content": "usage"}
    assert payload["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 1,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert translator.usage == TokenUsage(prompt_tokens=5, completion_tokens=1)


def test_stream_error_payload_raises() -> None:
    translator = ADAPTER.stream_translator(call({**BODY, "stream": True}))
    with pytest.raises(UpstreamError, match="context length"):
        translator.feed(b'{"error": {"message": "context length exceeded", "type": "invalid_request_error"}}')


def error_body(message: str, param: str | None = None, code: str | None = None) -> bytes:
    return msgspec.json.encode(
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    )


def test_429_with_retry_after_seconds() -> None:
    error = ADAPTER.classify_error(429, error_body("slow down"), {"Retry-After": "7"})
    assert isinstance(error, UpstreamRateLimited)
    assert error.retry_after_s == 7.0
    assert error.retryable
    assert error.status == 429
    assert "slow down" in error.message


def test_retry_after_ms_and_http_date() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    date = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert parse_retry_after({"retry-after": date}, now=1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("status", "kind", "gateway_status"),
    [
        (503, UpstreamUnavailable, 503),
        (529, UpstreamUnavailable, 503),
        (500, UpstreamError, 502),
        (502, UpstreamError, 502),
        (408, UpstreamError, 502),
        (409, UpstreamError, 502),
        (504, UpstreamError, 504),
    ],
)
def test_server_trouble_is_retryable(status: int, kind: type[UpstreamError], gateway_status: int) -> None:
    error = ADAPTER.classify_error(status, b"<html>oops</html>", {"retry-after": "2"})
    assert isinstance(error, kind)
    assert error.status == gateway_status
    assert error.retryable
    assert error.retry_after_s == 2.0


@pytest.mark.parametrize("status", [401, 403])
def test_credential_rejection_is_final_and_never_echoes_the_key(status: int) -> None:
    body = error_body(f"Incorrect API key provided: {SECRET}", code="invalid_api_key")
    error = ADAPTER.classify_error(status, body, {})
    assert error.status == 502
    assert not error.retryable
    assert "credentials" in error.message
    assert SECRET not in error.to_json().decode()


def test_other_4xx_is_passed_on_with_the_upstream_details() -> None:
    body = error_body("max_tokens is too large", param="max_tokens", code="invalid_value")
    error = ADAPTER.classify_error(400, body, {})
    assert isinstance(error, UpstreamRejected)
    assert (error.status, error.param, error.code) == (400, "max_tokens", "invalid_value")
    assert error.message == "max_tokens is too large"
    assert not error.retryable
    not_found = ADAPTER.classify_error(404, b"not json", {})
    assert not_found.status == 404
    assert not_found.code == "upstream_rejected"


def test_key_shaped_text_in_upstream_messages_is_redacted() -> None:
    error = ADAPTER.classify_error(400, error_body(f"bad header {SECRET}"), {})
    assert SECRET not in error.message


@pytest.mark.parametrize(
    "usage_json",
    [
        b'{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}',
        b'{ "prompt_tokens" : 9, "completion_tokens": 2, "total_tokens": 11 }',
        b"{}",
        b"{ }",
    ],
)
def test_cached_tokens_are_added_to_any_usage_layout(usage_json: bytes) -> None:
    head = b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
    head += b'"message":{"role":"assistant","content":"the \\"usage\\":{ key","refusal":null},'
    head += b'"logprobs":null,"finish_reason":"stop"}],'
    for separator in (b'"usage":', b'"usage" :\n  '):
        body = head + separator + usage_json + b"}"
        expected = {**json.loads(usage_json), "prompt_tokens_details": {"cached_tokens": 0}}
        document = json.loads(ADAPTER.parse_response(call(BODY), body).body)
        assert document["usage"] == expected
        assert document["choices"][0]["message"]["content"] == 'the "usage":{ key'


def test_a_second_usage_object_elsewhere_is_left_alone() -> None:
    document = {
        **COMPLETION,
        "choices": [{**COMPLETION["choices"][0], "usage": {"note": 1}}],  # type: ignore[index]
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
    }
    parsed = json.loads(ADAPTER.parse_response(call(BODY), json.dumps(document).encode()).body)
    assert parsed["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert parsed["choices"][0]["usage"] == {"note": 1}


def test_the_member_is_spliced_in_and_every_other_byte_kept() -> None:
    """The body is not decoded and encoded again: its own spacing and key order stay as sent."""
    before = b'{"id": "c",  "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],\n'
    body = before + b'  "usage" : { "prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11 }}'
    spliced = before + (
        b'  "usage" : {"prompt_tokens_details":{"cached_tokens":0}, "prompt_tokens": 9, '
        b'"completion_tokens": 2, "total_tokens": 11 }}'
    )
    assert ADAPTER.parse_response(call(BODY), body).body == spliced


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (OPENAI, True),
        ("https://API.OPENAI.COM:443/v1", True),
        ("https://api.openai.com.example.net/v1", False),
        ("https://example.net/api.openai.com/v1", False),
        (VLLM, False),
    ],
)
def test_is_openai_api(url: str, expected: bool) -> None:
    assert is_openai_api(url) is expected


def test_openai_auth_header() -> None:
    assert openai_auth_headers(provider()) == {"authorization": f"Bearer {SECRET}"}
    assert openai_auth_headers(provider(api_key=None)) == {}
