"""Anthropic's Message Batches without a network (gateway.providers.anthropic.batch_api): the
request built for a job's lines, golden, and the results read as chat completions, a line failing
only when the line itself is at fault."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.providers.anthropic.batch_api import AnthropicBatchFormat, ForeignResultsUrl
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.providers.openai.batch_api import BatchState, LineResult, ProviderBatchError, Submission
from gateway.settings import ProviderKind
from tests.support.catalogs import provider

CALLS = {
    n: UpstreamCall(
        endpoint=Endpoint.CHAT,
        body={"model": "m", "messages": []},
        upstream_model="m-up",
        stream=False,
        client_wants_usage=False,
        team_id="team",
    )
    for n in range(3)
}
CLAUDE = AnthropicBatchFormat(
    provider("claude", ProviderKind.ANTHROPIC, base_url="https://api.anthropic.com", api_key="ak-1",
             headers={"anthropic-beta": "b"})
)  # fmt: skip


def anthropic_line_result(
    row: dict[str, Any], calls: dict[int, UpstreamCall], created: int
) -> LineResult | None:
    """The one result of results holding `row`, or None when they answer no line."""
    results = AnthropicBatchFormat.results(msgspec.json.encode(row) + b"\n", calls, created)
    assert len(results) <= 1
    return results[0] if results else None


# --- the requests -------------------------------------------------------------------------------


def test_urls_and_headers() -> None:
    assert CLAUDE.batches_url() == "https://api.anthropic.com/v1/messages/batches"
    assert CLAUDE.batch_url("msgbatch/1") == "https://api.anthropic.com/v1/messages/batches/msgbatch%2F1"
    assert CLAUDE.cancel_url("m1") == "https://api.anthropic.com/v1/messages/batches/m1/cancel"
    assert CLAUDE.headers() == {"anthropic-version": "2023-06-01", "x-api-key": "ak-1", "anthropic-beta": "b"}


def test_the_lines_go_in_one_create_request() -> None:
    params = msgspec.Raw(b'{"model":"claude-up","max_tokens":5,"messages":[]}')
    created = CLAUDE.create_batch([Submission(0, CALLS[0], params), Submission(4, CALLS[0], params)])
    assert created == (
        b'{"requests":[{"custom_id":"line-0","params":{"model":"claude-up","max_tokens":5,"messages":[]}},'
        b'{"custom_id":"line-4","params":{"model":"claude-up","max_tokens":5,"messages":[]}}]}'
    )
    assert CLAUDE.created_batch_id(b'{"id":"msgbatch_1","processing_status":"in_progress"}') == "msgbatch_1"
    with pytest.raises(ProviderBatchError, match="create message batch"):
        CLAUDE.created_batch_id(b'{"type":"error"}')


def test_a_batch_has_ended_once_processing_ended() -> None:
    running = CLAUDE.state("m1", b'{"id":"m1","processing_status":"in_progress","results_url":null}')
    assert (running.ended, running.results_url) == (False, None)
    ended = CLAUDE.state(
        "m1", b'{"id":"m1","processing_status":"ended","results_url":"https://api.anthropic.com/r"}'
    )
    assert (ended.ended, ended.results_url) == (True, "https://api.anthropic.com/r")


def test_results_are_read_where_the_batch_says_if_it_is_the_providers() -> None:
    assert (
        CLAUDE.results_url(BatchState("m1", True))
        == "https://api.anthropic.com/v1/messages/batches/m1/results"
    )
    named = BatchState("m1", True, results_url="https://api.anthropic.com/v1/messages/batches/m1/results?x=1")
    assert CLAUDE.results_url(named) == named.results_url
    with pytest.raises(ForeignResultsUrl):
        CLAUDE.results_url(BatchState("m1", True, results_url="https://elsewhere.example/results"))


# --- the answers --------------------------------------------------------------------------------


def test_an_anthropic_message_becomes_a_chat_completion() -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-up",
               "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
               "usage": {"input_tokens": 5, "output_tokens": 3, "cache_read_input_tokens": 2}}  # fmt: skip
    row = {"custom_id": "line-0", "result": {"type": "succeeded", "message": message}}
    result = anthropic_line_result(row, CALLS, created=100)
    assert result is not None and result.response is not None and result.response.usage is not None
    completion = msgspec.json.decode(result.response.body)
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"]["content"] == "hello"
    assert (result.response.usage.prompt_tokens, result.response.usage.cached_tokens) == (7, 2)


def test_anthropic_errors_fail_a_line_only_when_the_line_is_at_fault() -> None:
    def errored(kind: str) -> dict[str, Any]:
        error = {"type": "error", "error": {"type": kind, "message": "no"}}
        return {"custom_id": "line-1", "result": {"type": "errored", "error": error}}

    refused = anthropic_line_result(errored("invalid_request_error"), CALLS, created=0)
    assert refused is not None and refused.status_code == 400 and refused.error is not None
    assert anthropic_line_result(errored("overloaded_error"), CALLS, created=0) is None
    assert (
        anthropic_line_result({"custom_id": "line-1", "result": {"type": "canceled"}}, CALLS, created=0)
        is None
    )
