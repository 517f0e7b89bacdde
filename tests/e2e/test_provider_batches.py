"""Jobs run on the provider's own batch API (`batch_execution: provider`), end to end: the openai
SDK -> `gateway serve` -> the mock upstream's OpenAI and Anthropic batch APIs over real HTTP.

A job completes with exactly one line per custom_id across its output and error files, the lines
are never sent one by one, and each line's usage record is priced at the deployment's batch price.
A job whose estimated cost does not fit its team's budget is never submitted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import GatewayProcess, Team, create_team, recreate_database
from tests.support.upstream import RunningUpstream, start_mock_upstream

pytestmark = pytest.mark.e2e

ADMIN_KEY = "admin-provider-batches-secret"
DATABASE = "gateway_test_e2e_provider_batches"
DEADLINE_S = 60.0
# USD per million tokens: the OpenAI deployment's explicit batch rates, the Anthropic one's discount
OPENAI_BATCH = (Decimal(1), Decimal(4))
ANTHROPIC_BATCH = (Decimal("1.5"), Decimal("7.5"))  # half of input 3, output 15

CONFIG = """
providers:
  - name: up-openai
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret-openai
    batch_execution: provider
  - name: up-anthropic
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    batch_execution: provider
  - name: up-anthropic-foreign
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    batch_execution: provider
    headers: {{x-mock-results-base: "{foreign}"}}
models:
  - name: chat
    deployments:
      - provider: up-openai
        model: upstream-chat
        price: {{input: 2, output: 8, batch_input: 1, batch_output: 4}}
  - name: claude
    deployments:
      - provider: up-anthropic
        model: claude-upstream
        price: {{input: 3, output: 15}}
        batch_discount: 0.5
  - name: claude-foreign
    deployments:
      - provider: up-anthropic-foreign
        model: claude-upstream
        price: {{input: 3, output: 15}}
jobs: {{poll_interval_s: 0.2, pause_s: 0.5}}
"""


@dataclass
class Stack:
    upstream: RunningUpstream
    foreign: RunningUpstream  # where a provider's results_url may point: another server
    gateway: GatewayProcess
    admin: httpx.Client
    team: Team

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url + "/v1", api_key=self.team.key, max_retries=0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    database_url = recreate_database(DATABASE)
    upstream = start_mock_upstream(completion_tokens=6, batch_delay_ms=300)
    foreign = start_mock_upstream()
    config = tmp_path_factory.mktemp("provider-batches") / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url, foreign=foreign.base_url))
    env = {"GATEWAY_DATABASE_URL": database_url, "GATEWAY_ADMIN_KEY": ADMIN_KEY}
    gateway = GatewayProcess(config, env)
    try:
        gateway.start()
        admin = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
        yield Stack(upstream, foreign, gateway, admin, create_team(admin, "provider-batches"))
        admin.close()
    finally:
        gateway.stop()
        upstream.stop()
        foreign.stop()


def line(custom_id: str, model: str, text: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]
    body = {"model": model, "messages": messages, "max_tokens": 32, **extra}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def run_job(client: openai.OpenAI, lines: list[dict[str, Any]]) -> Any:
    data = b"".join(json.dumps(entry).encode() + b"\n" for entry in lines)
    uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + DEADLINE_S
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"batch {batch.id} still {batch.status}"
        time.sleep(0.2)
    return batch


def file_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(text) for text in client.files.content(file_id).text.splitlines()]


def batch_events(stack: Stack, batch_id: str) -> list[dict[str, Any]]:
    reply = stack.admin.get("/admin/usage/events", params={"batch": batch_id, "limit": "1000"})
    events: list[dict[str, Any]] = reply.raise_for_status().json()["data"]
    return events


def priced(event: dict[str, Any], rates: tuple[Decimal, Decimal]) -> Decimal:
    """The event's cost at these rates: no cache rate is configured, so every prompt token is
    priced at the input rate."""
    prompt, completion = int(event["prompt_tokens"]), int(event["completion_tokens"])
    return (prompt * rates[0] + completion * rates[1]) / 1_000_000


def sent_one_by_one(stack: Stack) -> int:
    paths = stack.upstream.stats()["paths"]
    return sum(count for path, count in paths.items() if path.endswith(("/chat/completions", "/messages")))


def test_an_openai_job_runs_on_the_providers_batch_api_at_the_batch_price(stack: Stack) -> None:
    client = stack.client()
    refused = {"mock": {"fail_rate": 1, "fail_status": 400}}  # the mock refuses this line alone
    lines = [line(f"req-{i}", "chat", f"question {i}") for i in range(5)]
    lines.insert(2, line("refused", "chat", "question refused", **refused))
    batch = run_job(client, lines)
    assert batch.status == "completed", batch
    output, errors = file_lines(client, batch.output_file_id), file_lines(client, batch.error_file_id)
    assert [entry["custom_id"] for entry in output] == [f"req-{i}" for i in range(5)]
    assert [(entry["custom_id"], entry["response"]["status_code"]) for entry in errors] == [("refused", 400)]
    for entry in output:
        completion = entry["response"]["body"]
        assert completion["object"] == "chat.completion" and completion["usage"]["completion_tokens"] == 6
        assert entry["response"]["request_id"].startswith(batch.id)
    assert batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (5, 1)
    assert sent_one_by_one(stack) == 0
    events = [event for event in batch_events(stack, batch.id) if event["status"] == 200]
    assert len(events) == 5
    for event in events:
        assert Decimal(event["cost"]) == priced(event, OPENAI_BATCH), event
        assert Decimal(event["cost"]) < priced(event, (Decimal(2), Decimal(8)))  # below the normal price
    uploads = [r for r in stack.upstream.requests() if r["path"] == "/v1/batches" and r["method"] == "POST"]
    assert uploads[-1]["headers"]["authorization"] == "Bearer upstream-secret-openai"


def test_an_anthropic_job_is_translated_both_ways_and_priced_at_the_discount(stack: Stack) -> None:
    client = stack.client()
    batch = run_job(client, [line(f"c-{i}", "claude", f"question {i}") for i in range(4)])
    assert batch.status == "completed", batch
    assert batch.error_file_id is None
    output = file_lines(client, batch.output_file_id)
    assert [entry["custom_id"] for entry in output] == [f"c-{i}" for i in range(4)]
    for entry in output:
        completion = entry["response"]["body"]
        assert completion["object"] == "chat.completion"
        assert completion["choices"][0]["message"]["content"]
        assert completion["usage"]["completion_tokens"] == 6
    submitted = [r for r in stack.upstream.requests() if r["path"] == "/v1/messages/batches"]
    params = submitted[-1]["body"]["requests"][0]["params"]
    assert params["model"] == "claude-upstream" and params["system"][0]["text"] == "You are terse."
    assert submitted[-1]["headers"]["x-api-key"] == "upstream-secret-anthropic"
    assert sent_one_by_one(stack) == 0
    events = batch_events(stack, batch.id)
    assert len(events) == 4
    for event in events:
        assert Decimal(event["cost"]) == priced(event, ANTHROPIC_BATCH), event


def test_a_results_url_off_the_providers_base_is_never_fetched_with_its_key(stack: Stack) -> None:
    """The provider names results on another server (with a signed query): the gateway does not
    follow it, the job waits with the reason, and a cancel still ends it."""
    client = stack.client()
    data = json.dumps(line("f-0", "claude-foreign", "question")).encode() + b"\n"
    uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + DEADLINE_S
    while not ((reason := paused_reason(client, batch.id)) and "results_url" in reason):
        assert time.monotonic() < deadline, f"batch {batch.id} never paused on its results_url"
        time.sleep(0.2)
    assert reason.startswith("provider batch API failing: the provider's results_url http://127.0.0.1:")
    assert "not under its base URL" in reason and "signature" not in reason
    assert stack.foreign.requests() == []  # the key never went there
    assert "mock-signature" not in stack.gateway.logs()
    client.batches.cancel(batch.id)
    while (batch := client.batches.retrieve(batch.id)).status != "cancelled":
        assert time.monotonic() < deadline, f"batch {batch.id} still {batch.status}"
        time.sleep(0.2)
    assert [entry["custom_id"] for entry in file_lines(client, batch.error_file_id)] == ["f-0"]
    assert stack.foreign.requests() == []


def paused_reason(client: openai.OpenAI, batch_id: str) -> str | None:
    placement = client.batches.retrieve(batch_id).to_dict().get("gateway") or {}
    reason = placement.get("paused_reason")
    return reason if isinstance(reason, str) else None


def test_a_job_over_its_teams_budget_is_never_submitted_and_fails_with_insufficient_quota(
    stack: Stack,
) -> None:
    """5 lines allowing 1,000 output tokens each reserve ~$0.02 at the batch price ($4 / million):
    more than the team's $0.001."""
    team = create_team(stack.admin, "provider-batches-tiny-budget", monthly_budget_usd="0.001")
    client = openai.OpenAI(base_url=stack.gateway.base_url + "/v1", api_key=team.key, max_retries=0)
    submissions_before = len(provider_submissions(stack))
    batch = run_job(client, [line(f"b-{i}", "chat", f"question {i}", max_tokens=1000) for i in range(5)])
    assert batch.status == "failed", batch
    assert batch.errors is not None and [e.code for e in batch.errors.data or []] == ["insufficient_quota"]
    assert batch.output_file_id is not None and file_lines(client, batch.output_file_id) == []
    errors = file_lines(client, batch.error_file_id)
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
        (f"b-{i}", "insufficient_quota") for i in range(5)
    ]
    assert len(provider_submissions(stack)) == submissions_before  # nothing went to the provider
    assert batch_events(stack, batch.id) == []


def provider_submissions(stack: Stack) -> list[dict[str, Any]]:
    return [r for r in stack.upstream.requests() if r["method"] == "POST" and r["path"] == "/v1/batches"]
