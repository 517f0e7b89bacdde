"""Placement at create (gateway.jobs.placement): a job asking `metadata.gateway_placement` is
quoted, and the lane its rule picks is recorded on it and pins it. Real SQLite, the jobs' app."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.auth.key_cache import KeyCache
from gateway.db.keys import key_state_loader
from gateway.db.models import BatchJob
from gateway.db.session import session_factory
from gateway.jobs.ledger import PendingLine
from gateway.jobs.placement import runs_lines, with_tier
from gateway.routing.deployment import DeploymentTable
from gateway.settings import Settings
from gateway.settings.catalog import load_catalog
from tests.unit.jobs.conftest import Caller, Client, StandInServices, jobs_app, new_caller, upload

CHAT = "/v1/chat/completions"
CATALOG = """
providers:
  - {name: local, kind: mock, region: eu}
  - {name: cloud, kind: openai, region: us, base_url: "http://cloud.invalid/v1", batch_execution: provider}
models:
  - name: chat
    deployments:
      - {provider: local, model: sim, tokenizer: chars4, price: {input: 3, output: 6}}
      - provider: cloud
        model: upstream-chat
        price: {input: 2, output: 8, flex_input: 1, flex_output: 4}
        batch_discount: "0.6"
"""


@dataclass
class PlacingServices(StandInServices):
    """The jobs' stand-in services and the scheduler's queues a quote reads (none waiting)."""

    executor: Any = field(default_factory=lambda: SimpleNamespace(scheduler=SimpleNamespace(providers={})))


@pytest.fixture
def services(engine: AsyncEngine, tmp_path: Path) -> PlacingServices:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    catalog = load_catalog(path, {})
    sessions = session_factory(engine)
    settings = Settings(
        catalog=catalog, config_path="(test)", database_url="sqlite://", redis_url=None, admin_key=None
    )
    key_cache = KeyCache(key_state_loader(sessions), ttl_s=3600.0)
    return PlacingServices(settings, sessions, key_cache, DeploymentTable.from_catalog(catalog))


@pytest.fixture
async def client(services: PlacingServices) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=jobs_app(services)) as client:
        yield client


@pytest.fixture
async def alice(services: PlacingServices) -> Caller:
    return await new_caller(services.sessions, "alice")


def lines(count: int = 3) -> bytes:
    system = {"role": "system", "content": "Answer in one short sentence. " * 8}
    rows = []
    for i in range(count):
        body = {"model": "chat", "messages": [system, {"role": "user", "content": f"q{i}"}], "max_tokens": 8}
        rows.append(json.dumps({"custom_id": f"c{i}", "method": "POST", "url": CHAT, "body": body}))
    return ("\n".join(rows) + "\n").encode()


async def create(client: Client, caller: Caller, rule: str | None, window: str = "24h") -> Any:
    file_id = (await upload(client, caller, lines()))["id"]
    metadata = {} if rule is None else {"gateway_placement": rule}
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": window, "metadata": metadata}
    return await client.post("/v1/batches", headers=caller.headers, json=body)


@pytest.mark.parametrize(
    ("rule", "window", "lane"),
    [
        ("cheapest", "24h", "cloud/upstream-chat:provider"),  # the Batch API's price
        ("by_deadline", "24h", "cloud/upstream-chat:provider"),  # its 24 h are within the window
        ("by_deadline", "1h", "cloud/upstream-chat:gateway:flex"),  # not within 1h: the next cheapest
        ("fastest", "24h", "local/sim:gateway"),  # no history: a default tier, the catalog's first
    ],
)
async def test_a_placed_job_records_its_rules_lane_and_is_pinned_there(
    client: Client, services: PlacingServices, alice: Caller, rule: str, window: str, lane: str
) -> None:
    response = await create(client, alice, rule, window)

    assert response.status_code == 200, response.text
    batch = response.json()
    placement = batch["gateway"]["placement"]
    assert (placement["rule"], placement["lane"]) == (rule, lane)
    assert placement["quote"]["lines"] == 3
    assert {q["id"] for q in placement["quote"]["lanes"]} >= {lane}
    assert batch["expires_at"] - batch["created_at"] == int(window[:-1]) * 3600
    async with services.sessions() as session:
        job = await session.get(BatchJob, batch["id"])
    assert job is not None
    assert job.deployment == placement["deployment"] == batch["gateway"]["deployment"]
    assert job.directives == {"provider": lane.split("/")[0]}
    fetched = (await client.get(f"/v1/batches/{batch['id']}", headers=alice.headers)).json()
    assert fetched["gateway"]["placement"]["lane"] == lane


async def test_a_job_asking_no_placement_has_none(client: Client, alice: Caller) -> None:
    batch = (await create(client, alice, None)).json()

    assert batch["gateway"] == {"deployment": None, "paused_reason": None}


async def test_an_unknown_rule_or_a_short_window_without_placement_is_a_400(
    client: Client, alice: Caller
) -> None:
    unknown = await create(client, alice, "soonest")
    short = await create(client, alice, None, window="4h")
    too_long = await create(client, alice, "cheapest", window="48h")

    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "metadata.gateway_placement"
    assert short.status_code == 400 and short.json()["error"]["param"] == "completion_window"
    assert too_long.status_code == 400


def placed(execution: str, tier: str | None) -> BatchJob:
    job = BatchJob(id="batch_x")
    job.placement = {
        "rule": "by_deadline",
        "lane": "x",
        "deployment": "d",
        "execution": execution,
        "service_tier": tier,
    }
    return job


def test_a_tier_lanes_lines_ask_its_tier_and_other_lines_are_left_as_they_are() -> None:
    body = json.dumps({"model": "chat", "messages": [], "service_tier": "auto"})
    lines = [PendingLine(0, body, "p"), PendingLine(1, json.dumps({"model": "chat"}), "p", runs=1)]

    tiered = with_tier(lines, placed("gateway", "flex"))
    plain = with_tier(lines, placed("gateway", None))

    assert [json.loads(line.body)["service_tier"] for line in tiered] == ["flex", "flex"]
    assert [(line.line_no, line.runs) for line in tiered] == [(0, 0), (1, 1)]
    assert plain == lines and with_tier(lines, BatchJob(id="batch_y")) == lines


def test_only_a_job_placed_on_a_gateway_lane_is_run_line_by_line_whatever_its_provider() -> None:
    assert runs_lines(placed("gateway", None))
    assert not runs_lines(placed("provider", None))
    assert not runs_lines(BatchJob(id="batch_y"))
