"""What a batch's input file is refused for, through the official `openai` SDK against `gateway
serve` on PostgreSQL: a line nesting past the gateway's bound (even thousands deep) and a line
carrying its own routing directives fail the batch at validation, naming the line; never a 500.
A file is checked a chunk at a time: good lines stored before a later bad one are not kept."""

from __future__ import annotations

import json
from typing import Any, Final

import openai
import pytest

from gateway.schemas.nesting import MAX_NESTING
from tests.integration.jobs.conftest import JobsGateway
from tests.integration.jobs.test_batch_api_postgres import jsonl, stored, upload
from tests.support.gateway import Team

pytestmark = pytest.mark.integration

CHAT: Final = "/v1/chat/completions"


def line(custom_id: str, body: dict[str, Any] | str) -> bytes:
    text = body if isinstance(body, str) else json.dumps(body)
    return f'{{"custom_id": "{custom_id}", "method": "POST", "url": "{CHAT}", "body": {text}}}\n'.encode()


def nested(depth: int) -> str:
    """A chat body whose metadata value nests so that the body is `depth` levels deep."""
    return '{"model": "chat", "messages": [], "metadata": ' + '{"v": ' * (depth - 1) + "1" + "}" * depth


def create(client: openai.OpenAI, data: bytes) -> Any:
    return client.batches.create(input_file_id=upload(client, data), endpoint=CHAT, completion_window="24h")


def test_lines_nesting_past_the_bound_fail_the_batch_naming_them(gateway: JobsGateway, team_a: Team) -> None:
    client = gateway.client(team_a)
    good = jsonl(20_000)  # megabytes of good lines first: stored chunk by chunk, then dropped
    data = (
        good + line("deep", nested(MAX_NESTING + 1)) + line("hostile", nested(5_000)) + jsonl(1, prefix="z")
    )
    first_bad = good.count(b"\n") + 1

    batch = create(client, data)
    accepted = create(client, line("deepest", nested(MAX_NESTING)))

    assert batch.status == "failed"
    assert batch.errors is not None and batch.errors.data is not None
    assert [(e.code, e.param, e.line) for e in batch.errors.data] == [
        ("invalid_request", "body", first_bad),
        ("invalid_request", "body", first_bad + 1),
    ]
    assert all(f"{MAX_NESTING} levels" in (e.message or "") for e in batch.errors.data)
    assert stored(batch.id)[1] == 0
    assert accepted.status == "validating" and stored(accepted.id)[1] == 1


def test_a_lines_own_gateway_directive_fails_the_batch_saying_where_directives_go(
    gateway: JobsGateway, team_a: Team
) -> None:
    client = gateway.client(team_a)
    steered = {"model": "chat", "messages": [], "gateway": {"region": "eu-west"}}

    batch = create(client, jsonl(2) + line("steered", steered))

    assert batch.status == "failed"
    assert batch.errors is not None and batch.errors.data is not None
    [error] = batch.errors.data
    assert (error.code, error.param, error.line) == ("invalid_request", "body.gateway", 3)
    assert error.message is not None
    assert "X-Gateway-Region" in error.message and "metadata" in error.message
    assert stored(batch.id)[1] == 0


def test_a_good_file_of_many_chunks_is_stored_whole(gateway: JobsGateway, team_a: Team) -> None:
    client = gateway.client(team_a)
    data = jsonl(30_000)  # lines cut across the check's chunk boundaries

    batch = create(client, data)

    assert batch.status == "validating"
    assert batch.request_counts is not None and batch.request_counts.total == 30_000
    assert stored(batch.id)[1] == 30_000
