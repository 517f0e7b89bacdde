"""`POST /v1/gateway/batches/quote` through the app on SQLite: lanes for inline lines and for an
uploaded file, the duration from the deployment's recorded batches, and the 4xx a wrong request
gets (another team's file is not found)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from litestar import Litestar
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.testing import AsyncTestClient
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.api.gateway.quotes import QUOTE_HANDLERS
from gateway.api.openai.files import FILE_HANDLERS
from gateway.app import DEPENDENCIES, gateway_error_handler, http_error_handler
from gateway.auth.key_cache import KeyCache
from gateway.db.keys import key_state_loader
from gateway.db.models import UsageRecord
from gateway.db.session import create_engine, session_factory
from gateway.errors import GatewayError
from gateway.routing.deployment import DeploymentTable
from gateway.schemas.quotes import BatchQuote
from gateway.settings import Settings
from gateway.settings.catalog import load_catalog
from tests.unit.auth.records import create_tables
from tests.unit.jobs.conftest import Caller, StandInServices, new_caller, upload

Client = AsyncTestClient[Litestar]
CHAT = "/v1/chat/completions"
CATALOG = """
providers:
  - {name: local, kind: mock, region: eu}
  - {name: cloud, kind: openai, region: us, base_url: "http://cloud.invalid/v1", batch_execution: provider}
models:
  - name: chat
    deployments:
      - {provider: local, model: sim, tokenizer: chars4, price: {input: 1, output: 2, cached_input: "0.5"}}
      - {provider: cloud, model: gpt-4o-mini, price: {input: 2, output: 8}, batch_discount: "0.5"}
"""


@dataclass
class QuoteServices(StandInServices):
    executor: Any = field(default_factory=lambda: SimpleNamespace(scheduler=SimpleNamespace(providers={})))


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite:///{tmp_path}/gateway.db")
    await create_tables(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
def services(engine: AsyncEngine, tmp_path: Path) -> QuoteServices:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    catalog = load_catalog(path, {})
    sessions = session_factory(engine)
    settings = Settings(
        catalog=catalog, config_path="(test)", database_url="sqlite://", redis_url=None, admin_key=None
    )
    return QuoteServices(
        settings,
        sessions,
        KeyCache(key_state_loader(sessions), ttl_s=3600.0),
        DeploymentTable.from_catalog(catalog),
    )


@pytest.fixture
async def client(services: QuoteServices) -> AsyncIterator[Client]:
    app = Litestar(
        route_handlers=[*FILE_HANDLERS, *QUOTE_HANDLERS],
        dependencies=DEPENDENCIES,
        exception_handlers={GatewayError: gateway_error_handler, HTTPException: http_error_handler},
        state=State({"services": services}),
    )
    async with AsyncTestClient(app=app) as client:
        yield client


@pytest.fixture
async def alice(services: QuoteServices) -> Caller:
    return await new_caller(services.sessions, "alice")


@pytest.fixture
async def bob(services: QuoteServices) -> Caller:
    return await new_caller(services.sessions, "bob")


def lines(count: int = 3, max_tokens: int = 10) -> list[dict[str, Any]]:
    system = {"role": "system", "content": "Answer briefly. " * 20}
    return [
        {
            "custom_id": f"c{i}",
            "method": "POST",
            "url": CHAT,
            "body": {
                "model": "chat",
                "messages": [system, {"role": "user", "content": f"q{i}"}],
                "max_tokens": max_tokens,
            },
        }
        for i in range(count)
    ]


def lanes_by_id(quote: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {lane["id"]: lane for lane in quote["lanes"]}


async def test_inline_lines_are_quoted_on_every_lane(client: Client, alice: Caller) -> None:
    reply = await client.post("/v1/gateway/batches/quote", headers=alice.headers, json={"lines": lines()})

    assert reply.status_code == 200, reply.text
    quote = reply.json()
    msgspec.json.decode(reply.content, type=BatchQuote)  # the declared wire format
    lanes = lanes_by_id(quote)
    assert list(lanes) == ["local/sim:gateway", "cloud/gpt-4o-mini:gateway", "cloud/gpt-4o-mini:provider"]
    local, cloud, batch_api = lanes.values()
    assert local["tokens"]["tokenizer"] == "chars4" and local["tokens"]["cached"] > 0
    assert cloud["tokens"]["tokenizer"] == "o200k_base" and cloud["tokens"]["counted_by"] == "tokenizer"
    assert cloud["tokens"]["cached"] == 0  # OpenAI caches prompts of 1,024 tokens or more only
    assert all(lane["tokens"]["output"] == 30 for lane in lanes.values())
    assert Decimal(batch_api["cost"]) * 2 == Decimal(cloud["cost"])  # the batch discount
    assert local["duration"]["basis"] == "no history" and batch_api["duration"]["bound_s"] == 86_400
    assert quote["cheapest"] == "local/sim:gateway"
    assert (quote["model"], quote["lines"]) == ("chat", 3)


async def test_an_uploaded_file_is_quoted_as_its_lines(client: Client, alice: Caller, bob: Caller) -> None:
    data = "".join(json.dumps(line) + "\n" for line in lines()).encode()
    file_id = (await upload(client, alice, data))["id"]

    mine = await client.post(
        "/v1/gateway/batches/quote", headers=alice.headers, json={"input_file_id": file_id}
    )
    inline = await client.post("/v1/gateway/batches/quote", headers=alice.headers, json={"lines": lines()})
    theirs = await client.post(
        "/v1/gateway/batches/quote", headers=bob.headers, json={"input_file_id": file_id}
    )

    assert mine.status_code == 200
    assert mine.json()["lanes"] == inline.json()["lanes"]
    assert theirs.status_code == 404


async def test_a_deployment_with_recorded_batches_has_an_expected_duration(
    client: Client, services: QuoteServices, alice: Caller
) -> None:
    start = datetime.now(UTC) - timedelta(minutes=5)
    records = [
        {
            "request_id": f"req_{uuid.uuid4().hex}",
            "created_at": start + timedelta(seconds=i),
            "team_id": alice.team_id,
            "key_id": "key",
            "model": "chat",
            "provider": "local",
            "region": "eu",
            "deployment": "local/sim",
            "upstream_model": "sim",
            "endpoint": "chat/completions",
            "batch_id": "earlier",
            "status": 200,
            "prompt_tokens": 100,
            "completion_tokens": 11,
            "usage_source": "upstream",
            "cost": Decimal("0.0001"),
            "latency_ms": Decimal("1100"),
            "ttft_ms": Decimal("100"),
        }
        for i in range(4)
    ]
    async with services.sessions.begin() as session:
        await session.execute(insert(UsageRecord), records)

    quote = (
        await client.post("/v1/gateway/batches/quote", headers=alice.headers, json={"lines": lines()})
    ).json()

    took = lanes_by_id(quote)["local/sim:gateway"]["duration"]
    assert took["basis"] == "history" and took["history_batches"] == 1
    assert took["p10_s"] < took["expected_s"] < took["p90_s"]
    assert lanes_by_id(quote)["cloud/gpt-4o-mini:gateway"]["duration"]["basis"] == "no history"
    assert quote["fastest"] == "local/sim:gateway"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input_file_id"),
        ({"lines": [], "input_file_id": "file-x"}, "input_file_id"),
        ({"lines": [{"custom_id": "a", "method": "POST", "url": CHAT, "body": {"model": "nope"}}]}, "model"),
        ({"lines": lines(), "completion_window": "3d"}, "completion_window"),
        ({"lines": lines(), "endpoint": "/v1/embeddings"}, "endpoint"),
        ({"lines": [{"custom_id": "a", "method": "GET", "url": CHAT, "body": {"model": "chat"}}]}, "method"),
    ],
)
async def test_a_wrong_request_is_a_4xx_naming_what_is_wrong(
    client: Client, alice: Caller, body: dict[str, Any], param: str
) -> None:
    reply = await client.post("/v1/gateway/batches/quote", headers=alice.headers, json=body)

    assert 400 <= reply.status_code < 500, reply.text
    assert reply.json()["error"]["param"] == param
