"""Reading a provider batch's results: which lines succeeded, which the provider refused (they
fail), and which it never ran or failed itself (they run again)."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.jobs.provider_batch_api import anthropic_line_result, chat_call, line_no_of, openai_line_result
from gateway.providers.base import UpstreamCall

CALLS: dict[int, UpstreamCall] = {
    n: chat_call({"model": "m", "messages": []}, "m-up", "team", None, None) for n in range(3)
}
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m-up",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
              "prompt_tokens_details": {"cached_tokens": 4}},
}  # fmt: skip


def openai_row(custom_id: str, status: int, body: Any) -> dict[str, Any]:
    return {"id": "batch_req_1", "custom_id": custom_id, "response": {"status_code": status, "body": body}}


def test_custom_ids_name_line_numbers() -> None:
    assert (line_no_of("line-7"), line_no_of("line-x"), line_no_of("req-7"), line_no_of(None)) == (
        7,
        None,
        None,
        None,
    )


def test_an_openai_answer_is_a_succeeded_line_with_its_usage() -> None:
    result = openai_line_result(openai_row("line-1", 200, COMPLETION), CALLS)
    assert result is not None and result.response is not None and result.response.usage is not None
    assert (result.line_no, result.status_code) == (1, 200)
    usage = result.response.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (10, 2, 4)


def test_an_openai_refusal_is_a_failed_line_but_a_provider_failure_runs_again() -> None:
    error = {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}}
    refused = openai_line_result(openai_row("line-0", 400, error), CALLS)
    assert refused is not None and refused.response is None and refused.status_code == 400
    assert openai_line_result(openai_row("line-0", 500, error), CALLS) is None
    assert openai_line_result(openai_row("line-0", 429, error), CALLS) is None


def test_an_openai_line_that_never_ran_or_is_not_the_jobs_is_left_pending() -> None:
    never_ran = {"custom_id": "line-2", "response": None, "error": {"code": "batch_expired", "message": "x"}}
    assert openai_line_result(never_ran, CALLS) is None
    assert openai_line_result(openai_row("line-9", 200, COMPLETION), CALLS) is None


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
