"""Prompts the upstream prefilled are billed, whatever the answer lacks: streams the client abandons
after their first text delta (Responses passed through and translated, Messages translated), and
200 answers that carry no usage on every non-streamed endpoint. Each row: requests sent, what the
mock upstream served, records, the spend against what the whole prompts cost, and the gap.

A gateway of its own (Responses passed through, chat and Anthropic providers) on the session's
private PostgreSQL and mock upstream.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.faults.conftest import ADMIN_KEY, Stores
from tests.faults.records import report_gap, wait_for_records
from tests.support.gateway import GatewayProcess, create_team

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

CONFIG = """
providers:
  - name: responses-native
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret
    responses_api: native
    timeout_s: 30
  - name: selfhosted
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    timeout_s: 30
  - name: claude-direct
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret
    timeout_s: 30
models:
  - name: gpt
    deployments:
      - provider: responses-native
        model: gpt-upstream
        price: {{input: 1.25, output: 10}}
  - name: llama
    deployments:
      - provider: selfhosted
        model: llama-upstream
        price: {{input: 0.60, output: 0.80}}
  - name: claude
    deployments:
      - provider: claude-direct
        model: claude-upstream
        price: {{input: 3, output: 15}}
retry:
  max_attempts: 1
circuit:
  failure_threshold: 1000
"""
INPUT_PRICE = {"gpt": Decimal("1.25"), "llama": Decimal("0.60"), "claude": Decimal(3)}  # USD / 1M
PROMPT = "Classify the sentiment of this customer review, word by word. " * 6_400  # ~400 KB
REAL_TOKENS = len(PROMPT.encode()) // 4  # ~100k, as the mock counts them
MESSAGE: Any = [{"role": "user", "content": PROMPT}]
ROUNDS = 3  # requests of each kind


@dataclass
class Stack:
    gateway: GatewayProcess
    database_url: str

    def new_team(self, name: str) -> tuple[str, str]:
        """(team id, key secret) of a new team with one key."""
        headers = {"authorization": f"Bearer {ADMIN_KEY}"}
        with httpx.Client(base_url=self.gateway.base_url, headers=headers) as admin:
            team = create_team(admin, name)
        return team.id, team.key


class Clients:
    """The official SDKs pointed at one gateway with one team key."""

    def __init__(self, base_url: str, key: str) -> None:
        self.openai = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0)
        self.anthropic = anthropic.AsyncAnthropic(base_url=base_url, api_key=key, max_retries=0)

    async def close(self) -> None:
        await self.openai.close()
        await self.anthropic.close()


@pytest.fixture
def stack(stores: Stores, tmp_path: Path) -> Iterator[Stack]:
    """A gateway on a fresh database; the session's mock upstream is given back as it was."""
    database_url = stores.postgres.create_database(f"faults_{os.getpid()}_{next(stores.databases)}")
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=stores.upstream.base_url))
    env = {"GATEWAY_DATABASE_URL": database_url, "GATEWAY_REDIS_URL": "", "GATEWAY_ADMIN_KEY": ADMIN_KEY}
    gateway = GatewayProcess(config, env)
    try:
        yield Stack(gateway.start(), database_url)
    finally:
        gateway.stop()
        stores.upstream.set_behaviour()


async def measure(
    record_property: Callable[[str, object], None],
    scenario: str,
    stores: Stores,
    stack: Stack,
    sends: list[tuple[Callable[[Clients, str], Awaitable[str]], str]],
) -> list[Any]:
    """Send every (send, alias) pair at once, print the row, and return the records."""
    team_id, key = stack.new_team(scenario)
    stores.upstream.clear()
    clients = Clients(stack.gateway.base_url, key)
    try:
        request_ids = await asyncio.gather(*(send(clients, alias) for send, alias in sends))
    finally:
        await clients.close()
    records = await wait_for_records(stack.database_url, team_id, set(request_ids))
    full_prompts = sum(REAL_TOKENS * INPUT_PRICE[alias] / 1_000_000 for _, alias in sends)
    spend = sum((Decimal(record["cost"]) for record in records.values()), Decimal(0))
    gap = report_gap(
        record_property,
        scenario,
        requests=len(sends),
        served_upstream=stores.upstream.stats()["total"],
        records=len(records),
        spend=spend,
        limit=full_prompts,
    )
    assert gap == 0 and records.keys() == set(request_ids)
    assert spend >= full_prompts * Decimal("0.95")  # the whole prompts, within the estimate's rounding
    return list(records.values())


# --- 1. abandoned streams ---------------------------------------------------------------------


async def abandon_responses(clients: Clients, alias: str) -> str:
    stream = await clients.openai.responses.create(model=alias, input=PROMPT, stream=True)
    try:
        async for event in stream:
            if event.type == "response.output_text.delta":
                break
        return str(stream.response.headers["x-request-id"])
    finally:
        await stream.close()


async def abandon_messages(clients: Clients, alias: str) -> str:
    stream = await clients.anthropic.messages.create(
        model=alias, max_tokens=1024, messages=MESSAGE, stream=True
    )
    try:
        async for event in stream:
            if event.type == "content_block_delta":
                break
        return str(stream.response.headers["x-request-id"])
    finally:
        await stream.close()


async def test_abandoned_streams_bill_their_whole_prompt(
    stores: Stores, stack: Stack, record_property: Callable[[str, object], None]
) -> None:
    stores.upstream.set_behaviour(chunks=200, chunk_delay_ms=20, completion_tokens=400)
    kinds = [(abandon_responses, "llama"), (abandon_responses, "gpt"), (abandon_messages, "llama")]

    records = await measure(record_property, "unbilled_abandoned_streams", stores, stack, kinds * ROUNDS)

    for record in records:
        assert (record["status"], record["usage_source"]) == (499, "estimated")
        assert abs(record["prompt_tokens"] - REAL_TOKENS) <= REAL_TOKENS * 0.05


# --- 2. answers without usage -------------------------------------------------------------------


async def chat(clients: Clients, alias: str) -> str:
    raw = await clients.openai.chat.completions.with_raw_response.create(model=alias, messages=MESSAGE)
    return raw.headers["x-request-id"]


async def completions(clients: Clients, alias: str) -> str:
    raw = await clients.openai.completions.with_raw_response.create(model=alias, prompt=PROMPT)
    return raw.headers["x-request-id"]


async def embeddings(clients: Clients, alias: str) -> str:
    raw = await clients.openai.embeddings.with_raw_response.create(model=alias, input=PROMPT)
    return raw.headers["x-request-id"]


async def responses(clients: Clients, alias: str) -> str:
    raw = await clients.openai.responses.with_raw_response.create(model=alias, input=PROMPT)
    return raw.headers["x-request-id"]


async def messages(clients: Clients, alias: str) -> str:
    raw = await clients.anthropic.messages.with_raw_response.create(
        model=alias, max_tokens=64, messages=MESSAGE
    )
    return raw.headers["x-request-id"]


async def test_answers_without_usage_bill_their_whole_prompt(
    stores: Stores, stack: Stack, record_property: Callable[[str, object], None]
) -> None:
    stores.upstream.set_behaviour(omit_usage=True)
    kinds = [
        (chat, "llama"),
        (chat, "claude"),
        (completions, "llama"),
        (embeddings, "llama"),
        (responses, "gpt"),
        (responses, "llama"),
        (responses, "claude"),
        (messages, "claude"),
        (messages, "llama"),
    ]

    records = await measure(record_property, "unbilled_answers_without_usage", stores, stack, kinds * ROUNDS)

    for record in records:
        assert (record["status"], record["usage_source"]) == (200, "estimated")
        assert abs(record["prompt_tokens"] - REAL_TOKENS) <= REAL_TOKENS * 0.05
