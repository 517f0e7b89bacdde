"""Reconciliation end to end: a day of mixed traffic (OpenAI- and Anthropic-kind providers, several
models, cached and cache-written tokens, streams) through `gateway serve` with the official SDKs,
then `gateway usage reconcile` against the mock's own usage and cost reports: it agrees to the
token. A drift injected into the mock's reports is then found, stored with its size, and fails
the command (exit 3)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from sqlalchemy import select

from gateway.db.models import UsageReconciliation
from gateway.db.session import create_engine, session_factory
from tests.support.gateway import GatewayProcess, create_team, recreate_database
from tests.support.upstream import RunningUpstream, start_mock_upstream

pytestmark = pytest.mark.e2e

ADMIN_KEY = "admin-reconcile-secret"
MOCK_ADMIN_KEY = "sk-admin-mock"  # mock_upstream.usage_reports.ADMIN_KEY
REPO = Path(__file__).resolve().parents[2]
PRICES = {
    "gpt-a": {"input": "0.5", "cached_input": "0.25", "output": "1.5"},
    "gpt-b": {"input": "2", "cached_input": "1", "output": "8"},
    "claude-c": {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"},
}
CONFIG = """
providers:
  - name: up-openai
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret-openai
    admin_api_key: {admin}
    cache_hints: openai  # prompt_cache_key forwarded to the mock, as to api.openai.com
  - name: up-anthropic
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    admin_api_key: {admin}
models:
  - name: chat-a
    deployments:
      - provider: up-openai
        model: gpt-a
        price: {{input: 0.5, cached_input: 0.25, output: 1.5}}
  - name: chat-b
    deployments:
      - provider: up-openai
        model: gpt-b
        price: {{input: 2, cached_input: 1, output: 8}}
  - name: claude
    deployments:
      - provider: up-anthropic
        model: claude-c
        price: {{input: 3, cached_input: 0.3, cache_write: 3.75, output: 15}}
reconciliation:
  threshold: 0.001
"""
HANDBOOK = "Every answer follows the house style guide, section by section. " * 120
EPHEMERAL = {"type": "ephemeral"}


@dataclass
class ReconcileStack:
    gateway: GatewayProcess
    upstream: RunningUpstream
    database_url: str
    key: str

    def reconcile(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = os.environ | {
            "GATEWAY_CONFIG": str(self.gateway.config_path),
            "GATEWAY_DATABASE_URL": self.database_url,
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        }
        day = datetime.now(UTC).date().isoformat()
        command = [sys.executable, "-m", "gateway.cli", "usage", "reconcile", "--day", day, *args]
        return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReconcileStack]:
    database_url = recreate_database(f"gateway_e2e_reconcile_{os.getpid()}")
    upstream = start_mock_upstream(completion_tokens=9)
    httpx.put(f"{upstream.base_url}/_mock/reports/prices", json=PRICES).raise_for_status()
    config = tmp_path_factory.mktemp("reconcile") / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url, admin=MOCK_ADMIN_KEY))
    env = {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
    }
    gateway = GatewayProcess(config, env).start()
    try:
        with httpx.Client(
            base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        ) as admin:
            team = create_team(admin, "reconciled")
        yield ReconcileStack(gateway, upstream, database_url, team.key)
    finally:
        gateway.stop()
        upstream.stop()


def send_a_day_of_traffic(stack: ReconcileStack) -> None:
    chat = openai.OpenAI(base_url=stack.gateway.base_url + "/v1", api_key=stack.key, max_retries=0)
    messages = [{"role": "system", "content": HANDBOOK}, {"role": "user", "content": "q"}]
    for index in range(3):  # the first writes the prefix, the next read it
        chat.chat.completions.create(
            model="chat-a",
            messages=[*messages[:1], {"role": "user", "content": f"question {index}"}],  # type: ignore[list-item]
            extra_body={"prompt_cache_key": "handbook"},
        )
    stream = chat.chat.completions.create(
        model="chat-a",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},  # type: ignore[arg-type]
    )
    assert any(chunk.usage for chunk in stream)
    chat.chat.completions.create(model="chat-b", messages=[{"role": "user", "content": "short one"}])
    chat.chat.completions.create(model="claude", messages=[{"role": "user", "content": "through chat"}])
    claude = anthropic.Anthropic(base_url=stack.gateway.base_url, api_key=stack.key, max_retries=0)
    system = [{"type": "text", "text": HANDBOOK, "cache_control": EPHEMERAL}]
    for index in range(2):
        claude.messages.create(
            model="claude",
            max_tokens=64,
            system=system,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": f"message {index}"}],
        )
    with claude.messages.stream(
        model="claude",
        max_tokens=64,
        system=system,
        messages=[{"role": "user", "content": "streamed"}],  # type: ignore[arg-type]
    ) as streamed:
        streamed.get_final_message()


def stored(database_url: str) -> dict[tuple[str, str, str, str], UsageReconciliation]:
    """Today's stored findings (the gateway's own daily run stores the days before, without traffic)."""
    today = datetime.now(UTC).date()

    async def read() -> list[UsageReconciliation]:
        engine = create_engine(database_url)
        try:
            async with session_factory(engine)() as session:
                query = select(UsageReconciliation).where(UsageReconciliation.day == today)
                return list((await session.scalars(query)).all())
        finally:
            await engine.dispose()

    return {(r.provider, r.model, r.tier, r.measure): r for r in asyncio.run(read())}


def wait_for_records(stack: ReconcileStack, expected: int) -> None:
    """Until the writer has stored every request's record (the admin report counts them)."""
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = httpx.get(stack.gateway.base_url + "/admin/usage", params={"group_by": "team"}, headers=admin)
        if sum(int(row["requests"]) for row in rows.json()["data"]) >= expected:
            return
        time.sleep(0.2)
    raise AssertionError("the usage records were not written in time")


def test_a_day_agrees_to_the_token_then_a_drift_is_found(stack: ReconcileStack) -> None:
    send_a_day_of_traffic(stack)
    wait_for_records(stack, expected=9)

    agreed = stack.reconcile()
    assert agreed.returncode == 0, agreed.stdout + agreed.stderr
    rows = stored(stack.database_url)
    models = {(provider, model) for provider, model, _, _ in rows}
    assert models == {
        ("up-openai", "gpt-a"), ("up-openai", "gpt-b"), ("up-anthropic", "claude-c"),
        ("up-openai", "*"), ("up-anthropic", "*"),  # each day's whole bill
    }  # fmt: skip
    assert all(row.difference == 0 and row.share == 0 and not row.exceeded for row in rows.values())
    for provider, model, tier in (("up-openai", "gpt-a", "default"), ("up-anthropic", "claude-c", "default")):
        assert rows[(provider, model, tier, "cached_input")].gateway > 0  # caching was exercised
        assert (
            rows[(provider, model, tier, "input")].reported
            > rows[(provider, model, tier, "cached_input")].reported
        )
    assert rows[("up-openai", "gpt-a", "*", "cost")].gateway > 0  # OpenAI's costs have no tier
    assert rows[("up-anthropic", "claude-c", "default", "cost")].reported > 0

    output_b = rows[("up-openai", "gpt-b", "default", "output")].gateway
    cost_c = rows[("up-anthropic", "claude-c", "default", "cost")].gateway
    drifts = [
        {"api": "openai", "model": "gpt-b", "output_tokens": 40},
        {"api": "anthropic", "model": "claude-c", "cost_share": 0.05},
    ]
    for drift in drifts:
        httpx.post(f"{stack.upstream.base_url}/_mock/reports/drift", json=drift).raise_for_status()

    drifted = stack.reconcile()
    assert drifted.returncode == 3, drifted.stdout + drifted.stderr
    assert "PAST" in drifted.stdout
    assert drifted.stderr.count("reconciliation_difference") == 5  # a warning for each, on stderr
    assert MOCK_ADMIN_KEY not in drifted.stdout + drifted.stderr + stack.gateway.logs()
    rows = stored(stack.database_url)
    output = rows[("up-openai", "gpt-b", "default", "output")]
    assert (output.gateway, output.reported, output.difference) == (output_b, output_b + 40, 40)
    assert output.share == pytest.approx(40 / float(output_b + 40)) and output.exceeded
    cost = rows[("up-anthropic", "claude-c", "default", "cost")]
    assert cost.gateway == cost_c and cost.exceeded
    assert cost.difference == (cost_c * Decimal("0.05")).quantize(Decimal("1e-10"))
    assert cost.share == pytest.approx(0.05 / 1.05)
    billed = rows[("up-openai", "gpt-b", "*", "cost")]  # the drifted tokens are billed too
    assert billed.difference == Decimal(40 * 8) / 1_000_000 and billed.exceeded
    past = {key for key, row in rows.items() if row.exceeded}
    assert past == {
        ("up-openai", "gpt-b", "default", "output"),
        ("up-openai", "gpt-b", "*", "cost"),
        ("up-anthropic", "claude-c", "default", "cost"),
        ("up-openai", "*", "*", "cost"),
        ("up-anthropic", "*", "*", "cost"),
    }


def test_the_serving_process_reconciles_the_settled_days_itself(stack: ReconcileStack) -> None:
    settled = datetime.now(UTC).date() - timedelta(days=2)  # ended over a day ago: past delay_h (6)

    async def providers_of_the_day() -> set[str]:
        engine = create_engine(stack.database_url)
        try:
            async with session_factory(engine)() as session:
                query = select(UsageReconciliation.provider).where(UsageReconciliation.day == settled)
                return set((await session.scalars(query)).all())
        finally:
            await engine.dispose()

    deadline = time.monotonic() + 30
    while asyncio.run(providers_of_the_day()) != {"up-openai", "up-anthropic"}:
        assert time.monotonic() < deadline, stack.gateway.logs()
        time.sleep(0.2)
    metrics = httpx.get(stack.gateway.base_url + "/metrics").text
    assert 'gateway_reconciliation_day_timestamp_seconds{provider="up-anthropic"}' in metrics
