"""`/v1/gateway/batches` through the app on SQLite: the team's batches page by page, and one
batch's pin, totals and throughput, for a live batch and a Batch API job."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.testing import AsyncTestClient
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.api.gateway.batches import BATCH_HANDLERS
from gateway.app import DEPENDENCIES, gateway_error_handler, http_error_handler
from gateway.auth.key_cache import KeyCache
from gateway.db.keys import key_state_loader
from gateway.db.migrate import upgrade_head_async
from gateway.db.models import BatchJob, UsageRecord
from gateway.db.session import create_engine, session_factory
from gateway.errors import GatewayError
from gateway.metrics.instruments import Metrics
from gateway.routing.batch_pin import new_pin
from gateway.routing.deployment import DeploymentTable
from gateway.routing.pins import MemoryPinStore
from tests.unit.auth.records import add_key, add_team
from tests.unit.routing.catalog import CATALOG, CHAT

Client = AsyncTestClient[Litestar]
Sessions = async_sessionmaker[AsyncSession]
START = datetime(2026, 3, 1, 12, tzinfo=UTC)


@dataclass
class StandInServices:
    """What the batch handlers use of the gateway's Services."""

    sessions: Sessions
    key_cache: KeyCache
    pins: MemoryPinStore
    table: DeploymentTable
    metrics: Metrics = field(default_factory=Metrics)  # the error handlers count refusals


@dataclass(frozen=True)
class Caller:
    team_id: str
    headers: dict[str, str]


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[StandInServices]:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await upgrade_head_async(url)
    engine = create_engine(url)
    sessions = session_factory(engine)
    yield StandInServices(
        sessions,
        KeyCache(key_state_loader(sessions), ttl_s=3600.0),
        MemoryPinStore(3600),
        DeploymentTable.from_catalog(CATALOG),
    )
    await engine.dispose()


@pytest.fixture
async def client(services: StandInServices) -> AsyncIterator[Client]:
    app = Litestar(
        route_handlers=BATCH_HANDLERS,
        dependencies=DEPENDENCIES,
        exception_handlers={GatewayError: gateway_error_handler, HTTPException: http_error_handler},
        state=State({"services": services}),
    )
    async with AsyncTestClient(app=app) as client:
        yield client


async def caller(services: StandInServices, team: str) -> Caller:
    created = await add_team(services.sessions, team)
    _, secret = await add_key(services.sessions, created.id, f"{team}-key")
    return Caller(created.id, {"Authorization": f"Bearer {secret}"})


@pytest.fixture
async def alice(services: StandInServices) -> Caller:
    return await caller(services, "alice")


@pytest.fixture
async def bob(services: StandInServices) -> Caller:
    return await caller(services, "bob")


_seconds = itertools.count()


def record(team_id: str, batch_id: str | None, **fields: Any) -> dict[str, Any]:
    """A usage record, a second after the one made before it unless `at` says when."""
    at = fields.pop("at", START + timedelta(seconds=next(_seconds)))
    values: dict[str, Any] = {
        "request_id": f"req_{uuid.uuid4().hex}",
        "created_at": at,
        "team_id": team_id,
        "key_id": "key",
        "model": "chat",
        "provider": "vllm-eu",
        "region": "eu-west",
        "deployment": "vllm-eu/llama-x",
        "upstream_model": "llama-x",
        "endpoint": "chat/completions",
        "batch_id": batch_id,
        "status": 200,
        "prompt_tokens": 1000,
        "completion_tokens": 100,
        "cached_tokens": 0,
        "cache_write_tokens": 0,
        "usage_source": "upstream",
        "cost": Decimal("0.001"),
        "uncached_cost": Decimal("0.001"),
        "latency_ms": Decimal("1000"),
        "ttft_ms": Decimal("200"),
    }
    return values | fields


async def store(services: StandInServices, *records: dict[str, Any]) -> None:
    async with services.sessions.begin() as session:
        await session.execute(insert(UsageRecord), list(records))


async def add_job(
    services: StandInServices, team_id: str, job_id: str, created: datetime, **fields: Any
) -> None:
    values: dict[str, Any] = {
        "id": job_id,
        "team_id": team_id,
        "key_id": "key",
        "endpoint": "/v1/chat/completions",
        "input_file_id": "file-x",
        "completion_window": "24h",
        "status": "in_progress",
        "model": "chat",
        "created_at": created,
        "expires_at": created + timedelta(hours=24),
    }
    async with services.sessions.begin() as session:
        session.add(BatchJob(**(values | fields)))


async def test_a_live_batch_has_its_pin_totals_and_throughput(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    pin = new_pin(alice.team_id, "nightly", CHAT["vllm-eu"], time.time() - 60)
    await services.pins.place(pin)
    now = datetime.now(UTC)
    await store(
        services,
        # 1000 prompt (250 cached) + 100 completion; TTFT 0.2 s, then 0.8 s generating
        record(alice.team_id, "nightly", at=now - timedelta(seconds=10), cached_tokens=250),
        # 3000 prompt, 300 completion; TTFT 0.5 s, then 1.5 s generating
        record(alice.team_id, "nightly", at=now - timedelta(seconds=9), prompt_tokens=3000,
               completion_tokens=300, latency_ms=Decimal("2000"), ttft_ms=Decimal("500")),
        # not streamed, not measured: in the tokens, out of the rates
        record(alice.team_id, "nightly", at=now - timedelta(seconds=8), ttft_ms=None),
        record(alice.team_id, "nightly", at=now - timedelta(seconds=7), status=502, completion_tokens=0,
               ttft_ms=None, latency_ms=Decimal("50")),
        # before the pin was made: an earlier batch with the same id, not counted
        record(alice.team_id, "nightly", at=now - timedelta(hours=2)),
    )  # fmt: skip

    response = await client.get("/v1/gateway/batches/nightly", headers=alice.headers)

    assert response.status_code == 200, response.text
    batch = response.json()
    assert (batch["deployment"], batch["region"], batch["live"]) == ("vllm-eu/llama-x", "eu-west", True)
    assert (batch["requests"], batch["prompt_tokens"], batch["cached_tokens"]) == (4, 6000, 250)
    figures = batch["throughput"]
    assert figures["span_s"] == 3.05  # from -10 s to the failed one's end at -7 s + 0.05 s
    assert figures["requests"] == {"succeeded": 3, "failed": 1}
    assert figures["tokens"] == {"prompt": 6000, "cached": 250, "completion": 500}
    assert figures["cache_hit_ratio"] == round(250 / 6000, 4)
    # Interval ends come from stored timestamps plus milliseconds: equal to a few parts per million
    # Both rates over the measured requests' time at the upstream: -10 s to -9 s, then -9 s to -7 s
    assert figures["prefill_tokens_per_s"] == pytest.approx((750 + 3000) / 3.0, rel=1e-5)
    assert figures["decode_tokens_per_s"] == pytest.approx(400 / 3.0, rel=1e-5)
    assert figures["requests_without_ttft"] == 1
    assert figures["ttft_ms"] == {"p50": 200.0, "p90": 500.0, "p99": 500.0}
    assert [bucket["prompt_tokens"] for bucket in figures["by_prompt_length"]] == ["0-2k", "2-8k"]
    assert figures["by_prompt_length"][1]["decode_tokens_per_s"] == 150.0  # 300 / 2.0


async def test_a_job_id_is_a_batch_too(client: Client, services: StandInServices, alice: Caller) -> None:
    await add_job(
        services, alice.team_id, "batch_abc", START, deployment="vllm-eu/llama-x", status="completed"
    )
    await store(
        services, record(alice.team_id, "batch_abc"), record(alice.team_id, "batch_abc", ttft_ms=None)
    )

    response = await client.get("/v1/gateway/batches/batch_abc", headers=alice.headers)

    assert response.status_code == 200, response.text
    batch = response.json()
    assert (batch["job_status"], batch["live"], batch["deployment"], batch["provider"]) == (
        "completed",
        False,
        "vllm-eu/llama-x",
        "vllm-eu",
    )
    assert "confirmed" not in batch and "moves" not in batch  # a job has no pin of the pin store
    assert batch["created"] == int(START.timestamp())
    assert batch["requests"] == 2
    assert batch["throughput"]["requests_without_ttft"] == 1
    assert batch["throughput"]["prefill_tokens_per_s"] == pytest.approx(1000.0, rel=1e-5)  # 1000 / 1.0 s


async def test_a_job_with_no_lines_run_yet_has_no_throughput(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    await add_job(services, alice.team_id, "batch_new", START, status="validating")

    batch = (await client.get("/v1/gateway/batches/batch_new", headers=alice.headers)).json()

    assert (batch["requests"], batch["throughput"], batch["model"]) == (0, None, "chat")
    assert "deployment" not in batch and "last_used" not in batch


async def test_an_ended_batch_is_listed_but_not_found(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    await store(services, record(alice.team_id, "old", at=START))

    response = await client.get("/v1/gateway/batches/old", headers=alice.headers)

    assert response.status_code == 404  # its next request starts a new batch of that id
    listed = (await client.get("/v1/gateway/batches", headers=alice.headers)).json()["data"]
    assert [(b["id"], b["created"], b["last_used"]) for b in listed] == [
        ("old", int(START.timestamp()), int(START.timestamp()))
    ]


async def test_another_teams_batch_is_not_found(
    client: Client, services: StandInServices, alice: Caller, bob: Caller
) -> None:
    await store(services, record(alice.team_id, "mine"))
    await add_job(services, alice.team_id, "batch_mine", START)

    for batch_id in ("mine", "batch_mine", "nobody"):
        response = await client.get(f"/v1/gateway/batches/{batch_id}", headers=bob.headers)
        assert response.status_code == 404, batch_id
        assert response.json()["error"]["code"] == "batch_not_found"
    assert (await client.get("/v1/gateway/batches", headers=bob.headers)).json()["data"] == []


async def test_the_list_holds_jobs_and_batches_newest_first_page_by_page(
    client: Client, services: StandInServices, alice: Caller, bob: Caller
) -> None:
    await store(
        services,
        record(alice.team_id, "first", at=START),
        record(alice.team_id, "first", at=START + timedelta(minutes=5)),
        record(alice.team_id, "third", at=START + timedelta(minutes=2)),
        record(alice.team_id, None, at=START + timedelta(minutes=3)),  # no batch
        record(bob.team_id, "bobs", at=START + timedelta(minutes=4)),
        # a job's lines, recorded after the job was made
        record(alice.team_id, "batch_job", at=START + timedelta(minutes=9)),
    )
    await add_job(services, alice.team_id, "batch_job", START + timedelta(minutes=1), status="completed")
    await add_job(services, alice.team_id, "batch_empty", START + timedelta(minutes=4), status="validating")

    first = (await client.get("/v1/gateway/batches?limit=2", headers=alice.headers)).json()
    rest = (await client.get("/v1/gateway/batches?limit=2&after=third", headers=alice.headers)).json()

    summaries = [(b["id"], b["requests"], b["job_status"]) for b in first["data"] + rest["data"]]
    assert summaries == [
        ("batch_empty", 0, "validating"),
        ("third", 1, None),
        ("batch_job", 1, "completed"),
        ("first", 2, None),
    ]
    assert (first["has_more"], first["last_id"], rest["has_more"]) == (True, "third", False)
    job = rest["data"][0]
    assert job["created"] == int(
        (START + timedelta(minutes=1)).timestamp()
    )  # the job's, not its first line's
    assert job["last_used"] == int((START + timedelta(minutes=9)).timestamp())
    assert first["data"][0]["last_used"] is None


async def test_a_page_after_an_unknown_or_foreign_batch_is_not_found(
    client: Client, services: StandInServices, alice: Caller, bob: Caller
) -> None:
    await store(services, record(bob.team_id, "bobs"))

    for after in ("nobody", "bobs"):
        response = await client.get(f"/v1/gateway/batches?after={after}", headers=alice.headers)
        assert response.status_code == 404
        assert response.json()["error"]["param"] == "after"
    assert (await client.get("/v1/gateway/batches?limit=0", headers=alice.headers)).status_code == 400


async def test_a_job_whose_lines_hold_a_pin_shows_its_status_beside_the_pin(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    await add_job(services, alice.team_id, "batch_running", START, deployment="vllm-eu/llama-x")
    await services.pins.place(new_pin(alice.team_id, "batch_running", CHAT["vllm-eu"], time.time() - 5))

    response = await client.get("/v1/gateway/batches/batch_running", headers=alice.headers)

    assert response.status_code == 200, response.text
    batch = response.json()
    assert (batch["live"], batch["job_status"], batch["deployment"]) == (
        True,
        "in_progress",
        "vllm-eu/llama-x",
    )
