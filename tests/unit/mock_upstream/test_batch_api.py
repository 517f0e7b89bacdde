"""The mock's batch APIs over real HTTP, driven by the official SDKs: OpenAI's files and batches,
Anthropic's Message Batches; answers after the batch delay, per-line failures, and cancels."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.support.openapi import validate
from tests.support.upstream import RunningUpstream, mock_upstream_fixture

DELAY_MS = 300


@pytest.fixture(scope="module")
def upstream() -> Iterator[RunningUpstream]:
    yield from mock_upstream_fixture(completion_tokens=5)


@pytest.fixture
def fresh(upstream: RunningUpstream) -> RunningUpstream:
    upstream.clear()
    upstream.set_behaviour(completion_tokens=5, batch_delay_ms=DELAY_MS)
    return upstream


def chat_line(custom_id: str, text: str, **extra: Any) -> bytes:
    body = {"model": "up-model", "messages": [{"role": "user", "content": text}], **extra}
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    return json.dumps(line).encode() + b"\n"


def openai_client(upstream: RunningUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{upstream.base_url}/v1", api_key="sk-test", max_retries=0)


def test_an_openai_batch_runs_its_lines_after_the_delay(fresh: RunningUpstream) -> None:
    client = openai_client(fresh)
    lines = chat_line("a", "one") + chat_line("b", "two", mock={"fail_rate": 1, "fail_status": 400})
    uploaded = client.files.create(file=("in.jsonl", lines), purpose="batch")
    validate("OpenAIFile", uploaded.model_dump(exclude_unset=True))
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    validate("Batch", batch.model_dump(exclude_none=True))  # OpenAI sends its absent fields as null
    assert batch.status == "in_progress"
    assert client.batches.retrieve(batch.id).status == "in_progress"  # the delay has not passed yet
    deadline = time.monotonic() + 30
    while (batch := client.batches.retrieve(batch.id)).status != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (
        2,
        1,
        1,
    )
    assert batch.output_file_id is not None and batch.error_file_id is not None
    output = [json.loads(line) for line in client.files.content(batch.output_file_id).text.splitlines()]
    errors = [json.loads(line) for line in client.files.content(batch.error_file_id).text.splitlines()]
    assert [line["custom_id"] for line in output] == ["a"]
    assert set(output[0]) == {"id", "custom_id", "response", "error"}  # OpenAI's output line
    answer = output[0]["response"]["body"]
    validate("CreateChatCompletionResponse", answer)
    assert (answer["model"], answer["usage"]["completion_tokens"]) == ("up-model", 5)
    assert [(line["custom_id"], line["response"]["status_code"]) for line in errors] == [("b", 400)]
    assert errors[0]["response"]["body"]["error"]["type"] == "invalid_request_error"


def test_an_openai_batch_cancelled_before_its_delay_runs_no_line(fresh: RunningUpstream) -> None:
    fresh.set_behaviour(batch_delay_ms=60_000)
    client = openai_client(fresh)
    uploaded = client.files.create(file=("in.jsonl", chat_line("a", "one")), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert client.batches.cancel(batch.id).status == "cancelled"
    batch = client.batches.retrieve(batch.id)
    assert batch.request_counts is not None and batch.request_counts.completed == 0
    assert batch.output_file_id is not None
    assert client.files.content(batch.output_file_id).text == ""


def test_an_unknown_batch_or_file_is_a_404(fresh: RunningUpstream) -> None:
    client = openai_client(fresh)
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_missing")
    with pytest.raises(openai.NotFoundError):
        client.files.content("file-missing")


def anthropic_client(upstream: RunningUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=upstream.base_url, api_key="sk-ant-test", max_retries=0)


def message_params(text: str, **extra: Any) -> Any:
    return {"model": "claude-up", "max_tokens": 64, "messages": [{"role": "user", "content": text}], **extra}


def test_an_anthropic_message_batch_ends_with_one_result_per_request(fresh: RunningUpstream) -> None:
    client = anthropic_client(fresh)
    batch = client.messages.batches.create(
        requests=[
            {"custom_id": "ok", "params": message_params("hello")},
            {
                "custom_id": "bad",
                "params": message_params("hello", mock={"fail_rate": 1, "fail_status": 400}),
            },
        ]
    )
    assert batch.processing_status == "in_progress"
    deadline = time.monotonic() + 30
    while (batch := client.messages.batches.retrieve(batch.id)).processing_status != "ended":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (batch.request_counts.succeeded, batch.request_counts.errored) == (1, 1)
    assert batch.results_url is not None
    results = {entry.custom_id: entry.result for entry in client.messages.batches.results(batch.id)}
    ok, bad = results["ok"], results["bad"]
    assert ok.type == "succeeded" and bad.type == "errored"
    assert ok.message.model == "claude-up" and ok.message.usage.output_tokens == 5
    assert bad.error.error.type == "invalid_request_error"


def test_an_anthropic_batch_cancelled_before_its_delay_cancels_every_request(fresh: RunningUpstream) -> None:
    fresh.set_behaviour(batch_delay_ms=60_000)
    client = anthropic_client(fresh)
    batch = client.messages.batches.create(requests=[{"custom_id": "a", "params": message_params("hi")}])
    assert client.messages.batches.cancel(batch.id).processing_status == "ended"
    results = list(client.messages.batches.results(batch.id))
    assert [(entry.custom_id, entry.result.type) for entry in results] == [("a", "canceled")]
