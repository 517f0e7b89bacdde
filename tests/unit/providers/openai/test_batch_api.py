"""OpenAI's and Azure's batch API without a network (gateway.providers.openai.batch_api): the
requests built for a job's lines, golden, and the answers read: which lines succeeded, which the
provider refused (they fail), and which it never ran or failed itself (they run again)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.providers.base import Endpoint, UpstreamCall
from gateway.providers.openai.batch_api import (
    OpenAIBatchFormat,
    ProviderBatchError,
    Submission,
    line_no_of,
)
from gateway.settings import ProviderKind
from tests.support.catalogs import provider


def call(model: str = "m-up") -> UpstreamCall:
    return UpstreamCall(
        endpoint=Endpoint.CHAT,
        body={"model": "m", "messages": []},
        upstream_model=model,
        stream=False,
        client_wants_usage=False,
        team_id="team",
    )


CALLS = {n: call() for n in range(3)}
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m-up",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
              "prompt_tokens_details": {"cached_tokens": 4}},
}  # fmt: skip
OPENAI = OpenAIBatchFormat(provider("openai", base_url="https://api.openai.com/v1", api_key="sk-1"))
AZURE = OpenAIBatchFormat(
    provider("azure", ProviderKind.AZURE, base_url="https://contoso.openai.azure.com", api_key="az-1",
             api_version="2024-10-21", headers={"x-team": "t"})
)  # fmt: skip


def jsonl(*rows: Any) -> bytes:
    return b"".join(msgspec.json.encode(row) + b"\n" for row in rows)


def openai_row(custom_id: str, status: int, body: Any) -> dict[str, Any]:
    return {"id": "batch_req_1", "custom_id": custom_id, "response": {"status_code": status, "body": body}}


def openai_line_result(row: dict[str, Any], calls: dict[int, UpstreamCall]) -> Any:
    """The one result of a file holding `row`, or None when the file answers no line."""
    results = OpenAIBatchFormat.results(jsonl(row), calls)
    assert len(results) <= 1
    return results[0] if results else None


# --- the requests ---------------------------------------------------------------------------------


def test_openai_urls_and_bearer_key() -> None:
    assert OPENAI.files_url() == "https://api.openai.com/v1/files"
    assert OPENAI.batch_url("batch/1") == "https://api.openai.com/v1/batches/batch%2F1"
    assert OPENAI.cancel_url("b1") == "https://api.openai.com/v1/batches/b1/cancel"
    assert OPENAI.content_url("file-1") == "https://api.openai.com/v1/files/file-1/content"
    assert OPENAI.headers() == {"authorization": "Bearer sk-1"}


def test_azure_urls_carry_its_api_version_and_its_key_header() -> None:
    assert AZURE.batches_url() == "https://contoso.openai.azure.com/openai/batches?api-version=2024-10-21"
    assert (
        AZURE.content_url("f")
        == "https://contoso.openai.azure.com/openai/files/f/content?api-version=2024-10-21"
    )
    assert AZURE.headers() == {"api-key": "az-1", "x-team": "t"}


def test_the_input_file_names_each_line_and_the_chat_endpoint() -> None:
    lines = [Submission(n, call(), msgspec.Raw(b'{"model":"m-up","messages":[]}')) for n in (0, 7)]
    assert OPENAI.input_file(lines) == (
        b'{"custom_id":"line-0","method":"POST","url":"/v1/chat/completions","body":{"model":"m-up","messages":[]}}\n'
        b'{"custom_id":"line-7","method":"POST","url":"/v1/chat/completions","body":{"model":"m-up","messages":[]}}\n'
    )
    assert AZURE.input_file(lines[:1]).startswith(
        b'{"custom_id":"line-0","method":"POST","url":"/chat/completions",'
    )


def test_the_batch_is_created_from_the_uploaded_file() -> None:
    uploaded = OPENAI.uploaded_file_id(b'{"id":"file-9","object":"file","purpose":"batch","bytes":10}')
    assert msgspec.json.decode(OPENAI.create_batch(uploaded)) == {
        "input_file_id": "file-9", "endpoint": "/v1/chat/completions", "completion_window": "24h",
        "metadata": None,
    }  # fmt: skip
    assert OPENAI.created_batch_id(b'{"id":"batch_1","status":"validating"}') == "batch_1"


def test_an_answer_that_is_not_the_apis_is_a_provider_batch_error() -> None:
    with pytest.raises(ProviderBatchError, match="upload"):
        OPENAI.uploaded_file_id(b'{"object":"file"}')
    with pytest.raises(ProviderBatchError, match="read batch"):
        OPENAI.state("b", b"<html>")


def test_a_batch_has_ended_once_it_stopped_and_names_its_files() -> None:
    running = OPENAI.state("b", b'{"id":"b","status":"in_progress","output_file_id":null}')
    assert (running.ended, running.output_file_id) == (False, None)
    for status in ("completed", "failed", "expired", "cancelled"):
        body = msgspec.json.encode({"id": "b", "status": status, "output_file_id": "o", "error_file_id": "e"})
        state = OPENAI.state("b", body)
        assert (state.id, state.ended, state.output_file_id, state.error_file_id) == ("b", True, "o", "e")


# --- the answers --------------------------------------------------------------------------------


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


def test_a_file_is_read_line_by_line_past_what_is_not_a_line() -> None:
    data = jsonl(openai_row("line-0", 200, COMPLETION), [1, 2], openai_row("line-2", 200, COMPLETION))
    results = OpenAIBatchFormat.results(data + b"\nnot json\n", CALLS)
    assert [result.line_no for result in results] == [0, 2]
