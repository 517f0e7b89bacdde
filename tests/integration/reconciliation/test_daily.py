"""The daily run on real PostgreSQL: a settled day is reconciled once, by one of two processes at
once (the advisory lock), stored, and shown in /metrics; a day not yet settled waits; a provider
whose report cannot be read is logged and its day left for a later tick."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import httpx
import pytest
import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.db.models import UsageReconciliation, UsageRecord
from gateway.db.session import session_factory
from gateway.metrics.instruments import Metrics
from gateway.reconciliation.daily import due_days, reconcile_due, show_latest
from gateway.settings import Catalog, DeploymentSpec, ModelSpec, Price, Provider, ProviderKind
from mock_upstream.routes import Api
from mock_upstream.transport import InProcessMockTransport
from mock_upstream.usage_reports import ADMIN_KEY, MockPrice, Served
from tests.integration.metering.conftest import drop_database, fresh_pg_engine

DATABASE = "gateway_test_reconciliation"
DAY = date(2026, 11, 30)
SETTLED = datetime.combine(DAY + timedelta(days=1), time(7), UTC)  # 7 h after the day ended
PRICE = Price(input=Decimal("0.5"), output=Decimal("1.5"), cached_input=Decimal("0.25"))


def catalog(admin_key: str = ADMIN_KEY) -> Catalog:
    up = Provider(
        name="up", kind=ProviderKind.OPENAI, region="r", base_url="http://mock/v1", admin_api_key=admin_key
    )
    deployment = DeploymentSpec(provider="up", model="gpt-a", price=PRICE)
    return Catalog(providers=(up,), models=(ModelSpec(name="chat", deployments=(deployment,)),))


@pytest.fixture
async def engine() -> AsyncIterator[AsyncEngine]:
    engine = await fresh_pg_engine(DATABASE)
    yield engine
    await engine.dispose()
    await drop_database(DATABASE)


@pytest.fixture
async def mock() -> AsyncIterator[tuple[httpx.AsyncClient, InProcessMockTransport]]:
    transport = InProcessMockTransport()
    transport.upstream.bill.prices = {
        "gpt-a": MockPrice(input=PRICE.input, output=PRICE.output, cached_input=PRICE.cached_input)
    }
    async with httpx.AsyncClient(transport=transport) as http:
        yield http, transport


async def record(
    sessions: async_sessionmaker[AsyncSession],
    prompt: int,
    cached: int,
    completion: int,
    tier: str | None = None,
) -> None:
    cost = (
        Decimal(prompt - cached) * PRICE.input + cached * PRICE.cached_input + completion * PRICE.output
    ) / 1_000_000
    async with sessions.begin() as session:
        session.add(UsageRecord(
            request_id=uuid.uuid4().hex, created_at=datetime.combine(DAY, time(12), UTC), team_id="t", key_id="k",
            model="chat", provider="up", region="r", deployment="up/gpt-a", upstream_model="gpt-a",
            endpoint="chat/completions", status=200, prompt_tokens=prompt, completion_tokens=completion,
            cached_tokens=cached, cache_write_tokens=0, usage_source="upstream", cost=cost, uncached_cost=cost,
            latency_ms=1.0, service_tier=tier,
        ))  # fmt: skip


async def test_a_settled_day_is_reconciled_once_by_one_process(
    engine: AsyncEngine, mock: tuple[httpx.AsyncClient, InProcessMockTransport]
) -> None:
    http, transport = mock
    sessions = session_factory(engine)
    await record(sessions, 1000, 400, 50)
    await record(sessions, 300, 0, 20)
    await record(sessions, 200, 0, 10, tier="default")  # a record without a tier is at the default one
    await record(sessions, 100, 0, 5, tier="flex")
    bill = transport.upstream.bill.served
    bill[(Api.OPENAI, DAY, "gpt-a", "default")] = Served(1500, 400, 0, 80, 3)
    bill[(Api.OPENAI, DAY, "gpt-a", "flex")] = Served(100, 0, 0, 5, 1)
    log = structlog.get_logger("test")

    stored = await asyncio.gather(*(reconcile_due(sessions, catalog(), http, log, SETTLED) for _ in range(2)))
    assert sorted(stored) == [0, 3]  # three days due: two without traffic, each with its whole cost
    assert await reconcile_due(sessions, catalog(), http, log, SETTLED) == 0  # already stored
    async with sessions() as session:
        rows = (await session.scalars(select(UsageReconciliation))).all()
    assert {(r.day, r.model, r.tier, r.measure) for r in rows if r.day == DAY} == {
        (DAY, "gpt-a", "default", "input"), (DAY, "gpt-a", "default", "cached_input"),
        (DAY, "gpt-a", "default", "output"), (DAY, "gpt-a", "*", "cost"), (DAY, "*", "*", "cost"),
        (DAY, "gpt-a", "flex", "input"), (DAY, "gpt-a", "flex", "cached_input"), (DAY, "gpt-a", "flex", "output"),
    }  # fmt: skip
    assert {(r.day, r.model) for r in rows if r.day != DAY} == {
        (DAY - timedelta(days=2), "*"),
        (DAY - timedelta(days=1), "*"),
    }
    assert all(r.difference == 0 and not r.exceeded for r in rows)
    inputs = {r.tier: r.gateway for r in rows if r.measure == "input"}
    assert inputs == {"default": 1500, "flex": 100}

    metrics = Metrics()
    await show_latest(sessions, metrics)
    text = metrics.render().decode()
    assert (
        'gateway_reconciliation_difference_ratio{measure="output",model="gpt-a",provider="up",tier="default"} 0.0'
        in text
    )


async def test_an_unreadable_report_leaves_the_day_for_later(
    engine: AsyncEngine, mock: tuple[httpx.AsyncClient, InProcessMockTransport]
) -> None:
    http, _ = mock
    sessions = session_factory(engine)
    log = structlog.get_logger("test")
    with structlog.testing.capture_logs() as logs:
        assert await reconcile_due(sessions, catalog(admin_key="sk-wrong"), http, log, SETTLED) == 0
    assert [entry["event"] for entry in logs] == ["reconciliation_report_unavailable"] * 3
    assert "sk-wrong" not in repr(logs)
    assert await reconcile_due(sessions, catalog(), http, log, SETTLED) == 3


def test_a_day_is_due_once_it_has_settled() -> None:
    assert due_days(SETTLED, delay_h=6, lookback_days=3) == [
        DAY - timedelta(days=2),
        DAY - timedelta(days=1),
        DAY,
    ]
    assert due_days(SETTLED, delay_h=8, lookback_days=3) == [DAY - timedelta(days=2), DAY - timedelta(days=1)]
