"""The Responses API passed through to OpenAI and Azure: the request as sent, the alias and cost
on the reply, usage from the Response and the stream's last event, and which providers pass through."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gateway.dialects.endpoints import endpoint_adapter
from gateway.dialects.responses.adapter import TranslatedResponsesAdapter, serves_responses_natively
from gateway.dialects.responses.native import NativeResponsesAdapter
from gateway.errors import UpstreamError, UpstreamRateLimited, UpstreamRejected
from gateway.metering.pricing import Tariff
from gateway.providers.base import Endpoint, TokenUsage, UpstreamCall
from gateway.settings import ConfigError, Price, ProviderKind, load_catalog
from tests.support.openapi import validate
from tests.unit.providers.calls import SECRET, provider

OPENAI_BASE = "https://api.openai.com/v1"
OPENAI = provider(base_url=OPENAI_BASE, headers={"openai-organization": "org-1"})
AZURE = provider(ProviderKind.AZURE, base_url="https://eu.openai.azure.com")
TARIFF = Tariff(Price(input=Decimal("1.25"), output=Decimal(10), cached_input=Decimal("0.125")))


def native(target: Any = OPENAI) -> Any:
    adapter = endpoint_adapter(target, Endpoint.RESPONSES)
    assert isinstance(adapter, NativeResponsesAdapter)
    return adapter


def responses_call(body: dict[str, Any], cache_key: str | None = None) -> UpstreamCall:
    return UpstreamCall(
        endpoint=Endpoint.RESPONSES,
        body=body,
        upstream_model="gpt-5-2025-08-07",
        stream=bool(body.get("stream")),
        client_wants_usage=False,
        team_id="team-1",
        cache_key=cache_key,
        tariff=TARIFF,
    )


# --- the request ---------------------------------------------------------------------------------


def test_the_body_goes_to_openai_as_sent_with_the_upstream_model() -> None:
    body = {
        "model": "gpt",
        "input": [{"role": "user", "content": "hi"}],
        "previous_response_id": "resp_1",  # OpenAI keeps the state: nothing is refused here
        "tools": [{"type": "web_search"}],
        "store": True,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
    }
    request = native().build_request(responses_call(body), OPENAI, OPENAI_BASE + "/")
    assert request.url == "https://api.openai.com/v1/responses"
    assert request.headers == {
        "content-type": "application/json",
        "authorization": f"Bearer {SECRET}",
        "openai-organization": "org-1",
    }
    assert json.loads(request.content) == {**body, "model": "gpt-5-2025-08-07"}  # no stream_options added


def test_the_cache_key_the_gateway_knows_is_sent_unless_the_client_gave_one() -> None:
    sent = native().build_request(
        responses_call({"model": "g", "input": "x"}, "batch-key"), OPENAI, OPENAI_BASE
    )
    assert json.loads(sent.content)["prompt_cache_key"] == "batch-key"
    own = responses_call({"model": "g", "input": "x", "prompt_cache_key": "mine"}, "batch-key")
    assert json.loads(native().build_request(own, OPENAI, OPENAI_BASE).content)["prompt_cache_key"] == "mine"


def test_azure_is_asked_on_its_v1_surface_with_its_key_header() -> None:
    request = native(AZURE).build_request(
        responses_call({"model": "g", "input": "x"}), AZURE, "https://eu.openai.azure.com/"
    )
    assert request.url == "https://eu.openai.azure.com/openai/v1/responses"
    assert request.headers["api-key"] == SECRET
    assert "authorization" not in request.headers
    assert json.loads(request.content)["model"] == "gpt-5-2025-08-07"  # Azure's deployment name


# --- the Response --------------------------------------------------------------------------------

RESPONSE: dict[str, Any] = {
    "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
    "object": "response",
    "created_at": 1741476542,
    "status": "completed",
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "max_output_tokens": None,
    "model": "gpt-5-2025-08-07",
    "output": [
        {
            "type": "message",
            "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b",
            "status": "completed",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "In a peaceful grove...", "annotations": [], "logprobs": []}
            ],
        }
    ],
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_p": 1.0,
    "truncation": "disabled",
    "usage": {
        "input_tokens": 2036,
        "input_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 0},
        "output_tokens": 87,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2123,
    },
    "user": None,
    "metadata": {},
}


def test_the_reply_names_the_alias_and_carries_its_exact_cost() -> None:
    answer = native().parse_response(
        responses_call({"model": "gpt", "input": "x"}), json.dumps(RESPONSE).encode()
    )
    assert answer.usage == TokenUsage(prompt_tokens=2036, completion_tokens=87, cached_tokens=2000)
    body = json.loads(answer.body)
    # 36 x 1.25 + 2000 x 0.125 + 87 x 10 = 1165 USD a million tokens
    assert body["usage"]["cost"] == format(TARIFF.cost(answer.usage), "f") == "0.001165000"
    assert body["model"] == "gpt"
    unchanged = {
        **body,
        "model": RESPONSE["model"],
        "usage": {k: v for k, v in body["usage"].items() if k != "cost"},
    }
    assert unchanged == RESPONSE
    validate("Response", {**body, "user": "u"})  # (OpenAI's document wants `user` a string)


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": -3, "output_tokens": 4},
        {"input_tokens": 3, "output_tokens": 10**12},
        {"input_tokens": 3.5, "output_tokens": 4},
        {"input_tokens": 3, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 9}},
        {"input_tokens": 3, "output_tokens": 4, "input_tokens_details": "none"},
    ],
)
def test_counts_that_cannot_be_true_are_not_believed(usage: dict[str, Any]) -> None:
    answer = native().parse_response(
        responses_call({"model": "gpt", "input": "x"}), json.dumps({**RESPONSE, "usage": usage}).encode()
    )
    assert answer.usage is None
    assert answer.untrusted_usage
    body = json.loads(answer.body)
    assert body["usage"] == usage  # served as it came, without a cost
    assert body["model"] == "gpt"


def test_a_response_without_usage_is_served_unmetered() -> None:
    answer = native().parse_response(
        responses_call({"model": "gpt", "input": "x"}), json.dumps({**RESPONSE, "usage": None}).encode()
    )
    assert (answer.usage, answer.untrusted_usage) == (None, None)


@pytest.mark.parametrize("body", [b"<html>", b"[1]", json.dumps({"error": {"message": "boom"}}).encode()])
def test_what_is_not_a_response_is_an_upstream_error(body: bytes) -> None:
    with pytest.raises(UpstreamError):
        native().parse_response(responses_call({"model": "gpt", "input": "x"}), body)


def test_upstream_errors_are_classified_as_for_chat() -> None:
    error = json.dumps(
        {"error": {"message": "Unknown parameter", "type": "invalid_request_error", "param": "x"}}
    )
    assert isinstance(native().classify_error(400, error.encode(), {}), UpstreamRejected)
    limited = native().classify_error(429, b"{}", {"retry-after": "2"})
    assert isinstance(limited, UpstreamRateLimited) and limited.retry_after_s == 2
    assert native().classify_error(500, b"{}", {}).retryable


# --- the stream ----------------------------------------------------------------------------------


def started(kind: str, sequence: int) -> dict[str, Any]:
    return {
        "type": kind,
        "sequence_number": sequence,
        "response": {**RESPONSE, "status": "in_progress", "output": [], "usage": None},
    }


STREAM = [
    started("response.created", 0),
    started("response.in_progress", 1),
    {"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
     "item": {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}},
    {"type": "response.output_text.delta", "sequence_number": 3, "item_id": "msg_1", "output_index": 0,
     "content_index": 0, "delta": "In a", "logprobs": []},
    {"type": "response.completed", "sequence_number": 4, "response": RESPONSE},
]  # fmt: skip


def stream_frames(events: list[Any], call: UpstreamCall | None = None) -> tuple[Any, list[bytes]]:
    translator = native().stream_translator(
        call or responses_call({"model": "gpt", "input": "x", "stream": True})
    )
    frames: list[bytes] = []
    for event in events:
        frames += translator.feed(event if isinstance(event, bytes) else json.dumps(event).encode())
    return translator, frames + translator.finish()


def test_stream_events_pass_through_with_their_event_lines() -> None:
    translator, frames = stream_frames(STREAM)
    assert len(frames) == len(STREAM)
    delta = json.dumps(STREAM[3]).encode()
    assert frames[3] == b"event: response.output_text.delta\ndata: " + delta + b"\n\n"  # verbatim
    events = []
    for frame in frames:
        head, _, data = frame.partition(b"\ndata: ")
        event = json.loads(data)
        assert head == b"event: " + event["type"].encode()
        events.append(event)
    assert [event["response"]["model"] for event in events if "response" in event] == ["gpt"] * 3
    assert translator.usage == TokenUsage(prompt_tokens=2036, completion_tokens=87, cached_tokens=2000)
    assert events[-1]["response"]["usage"]["cost"] == "0.001165000"


@pytest.mark.parametrize("last", ["response.incomplete", "response.failed"])
def test_an_incomplete_or_failed_response_is_metered_from_its_last_event(last: str) -> None:
    final = {
        "type": last,
        "sequence_number": 3,
        "response": {**RESPONSE, "status": last.removeprefix("response.")},
    }
    translator, frames = stream_frames([*STREAM[:3], final])
    assert translator.usage is not None and translator.usage.completion_tokens == 87
    assert frames[-1].startswith(f"event: {last}\n".encode())


def test_the_response_id_is_kept_for_its_owner_from_the_first_event_that_carries_it() -> None:
    answer = native().parse_response(
        responses_call({"model": "gpt", "input": "x"}), json.dumps(RESPONSE).encode()
    )
    assert answer.response_id == RESPONSE["id"]
    translator = native().stream_translator(responses_call({"model": "gpt", "input": "x", "stream": True}))
    translator.feed(json.dumps(STREAM[0]).encode())  # a stream abandoned after response.created
    assert translator.response_id == RESPONSE["id"]


def test_a_done_line_is_dropped() -> None:
    _, frames = stream_frames([*STREAM, b"[DONE]"])
    assert len(frames) == len(STREAM)


def test_an_error_event_ends_the_stream_as_an_upstream_failure() -> None:
    error = {
        "type": "error",
        "sequence_number": 3,
        "code": "server_error",
        "message": "The server had an error",
        "param": None,
    }
    with pytest.raises(UpstreamError, match="The server had an error"):
        stream_frames([*STREAM[:3], error])


def test_a_stream_that_ends_before_its_last_event_is_an_upstream_failure() -> None:
    with pytest.raises(UpstreamError, match="ended before the response was complete"):
        stream_frames(STREAM[:4])


def test_untrusted_stream_counts_are_not_believed() -> None:
    final = {**STREAM[4], "response": {**RESPONSE, "usage": {"input_tokens": -1, "output_tokens": 1}}}
    translator, frames = stream_frames([*STREAM[:4], final])
    assert translator.usage is None and translator.untrusted_usage
    assert b'"cost"' not in frames[-1]


# --- which providers pass through ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "base_url", "setting", "passes_through"),
    [
        (ProviderKind.OPENAI, OPENAI_BASE, "auto", True),
        (ProviderKind.OPENAI, "http://vllm.internal:8000/v1", "auto", False),
        (ProviderKind.OPENAI, "http://vllm.internal:8000/v1", "native", True),
        (ProviderKind.OPENAI, OPENAI_BASE, "chat", False),
        (ProviderKind.AZURE, "https://eu.openai.azure.com", "auto", True),
        (ProviderKind.AZURE, "https://eu.openai.azure.com", "chat", False),
        (ProviderKind.ANTHROPIC, "https://api.anthropic.com", "auto", False),
        (ProviderKind.MOCK, None, "auto", False),
    ],
)
def test_which_providers_serve_the_responses_api_themselves(
    kind: ProviderKind, base_url: str | None, setting: str, passes_through: bool
) -> None:
    target = provider(kind, base_url=base_url, responses_api=setting)
    assert serves_responses_natively(target) is passes_through
    adapter = endpoint_adapter(target, Endpoint.RESPONSES)
    assert isinstance(adapter, NativeResponsesAdapter if passes_through else TranslatedResponsesAdapter)


def catalog_error(tmp_path: Path, kind: str, setting: str) -> str:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"providers:\n  - {{name: p, kind: {kind}, region: r, base_url: 'http://h/v1', responses_api: {setting}}}\n"
        "models:\n  - {name: m, deployments: [{provider: p, model: u}]}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_catalog(config, {})
    return str(raised.value)


@pytest.mark.parametrize("kind", ["anthropic", "mock"])
def test_native_is_a_config_error_where_the_kind_has_no_responses_api(tmp_path: Path, kind: str) -> None:
    message = catalog_error(tmp_path, kind, "native")
    assert message.startswith(f"{tmp_path / 'gateway.yaml'}: providers[0].responses_api: native needs")
    assert kind in message


def test_an_unknown_setting_is_a_config_error(tmp_path: Path) -> None:
    assert "providers[0].responses_api: must be auto, native or chat" in catalog_error(
        tmp_path, "openai", "always"
    )
