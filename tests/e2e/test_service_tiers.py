"""Service tiers through the official openai SDK, `gateway serve` on PostgreSQL and the mock upstream.

`service_tier="flex"` reaches an Azure-kind upstream (the mock) and comes back in the answer; the
usage record in PostgreSQL holds the tier the upstream said it served and the cost at that tier's
price, the same cost the answer carries; a flex request the mock downgrades to default is recorded
and priced at default; a self-hosted server is not sent the tier and the request is recorded at the
tier it asked for; Anthropic is asked in its own terms and its served tier recorded in OpenAI's;
a tier outside OpenAI's enum is a 400; the usage report groups by tier.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import text

from gateway.db.session import create_engine
from tests.e2e.conftest import ADMIN_KEY, Stack
from tests.support.gateway import GatewayProcess, recreate_database
from tests.support.upstream import RunningUpstream, fresh, start_mock_upstream

pytestmark = pytest.mark.e2e

CONFIG = """
providers:
  - name: tiered-azure
    kind: azure
    region: eu-west
    base_url: {upstream}
    api_key: upstream-secret-azure
    timeout_s: 5
  - name: self-hosted
    kind: openai
    region: eu-west
    base_url: {upstream}/v1
    timeout_s: 5
  - name: tiered-anthropic
    kind: anthropic
    region: eu-west
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    timeout_s: 5
models:
  - name: tiered
    deployments:
      - provider: tiered-azure
        model: azure-chat
        price: {{input: 2, output: 8, flex_input: 1, flex_output: 4, tier_multipliers: {{priority: 2}}}}
  - name: tiered-self
    deployments:
      - provider: self-hosted
        model: local-chat
        price: {{input: 2, output: 8, tier_multipliers: {{flex: 0.25}}}}
  - name: tiered-claude
    deployments:
      - provider: tiered-anthropic
        model: claude-test
        price: {{input: 3, output: 15, tier_multipliers: {{priority: 2}}}}
"""
MESSAGES: list[Any] = [{"role": "user", "content": "Summarise the quarter in one line"}]
MILLION = Decimal(1_000_000)


@pytest.fixture(scope="module")
def tiers_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`gateway serve` on a database of its own (records written by its in-process writer)."""
    directory = tmp_path_factory.mktemp("tiers")
    upstream = start_mock_upstream()
    config = directory / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    env = {
        "GATEWAY_DATABASE_URL": recreate_database("gateway_e2e_service_tiers"),
        "GATEWAY_REDIS_URL": "",
        "GATEWAY_WORKERS": "1",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
    }
    gateway = GatewayProcess(config, env).start()
    admin = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
    try:
        yield Stack(gateway, upstream, admin)
    finally:
        admin.close()
        gateway.stop()
        upstream.stop()


@pytest.fixture
def served(tiers_stack: Stack) -> Iterator[Stack]:
    yield from (tiers_stack for _ in fresh(tiers_stack.upstream))


def record(stack: Stack, request_id: str) -> dict[str, Any]:
    """The usage record of `request_id`, read from PostgreSQL once the writer has it."""

    async def read() -> dict[str, Any] | None:
        engine = create_engine(stack.gateway.env["GATEWAY_DATABASE_URL"])
        try:
            async with engine.connect() as connection:
                row = await connection.execute(
                    text(
                        "SELECT service_tier, cost, prompt_tokens, completion_tokens, cached_tokens "
                        "FROM usage_records WHERE request_id = :id"
                    ),
                    {"id": request_id},
                )
                found = row.mappings().first()
                return None if found is None else dict(found)
        finally:
            await engine.dispose()

    for _ in range(80):
        found = asyncio.run(read())
        if found is not None:
            return found
        time.sleep(0.25)
    raise AssertionError(f"no usage record for {request_id}")


def priced(row: dict[str, Any], input_rate: int, output_rate: int) -> Decimal:
    """What the record's counts cost at these rates (no cached tokens in these requests)."""
    assert row["cached_tokens"] == 0
    return (row["prompt_tokens"] * input_rate + row["completion_tokens"] * output_rate) / MILLION


def sent_tiers(upstream: RunningUpstream) -> list[Any]:
    return [request["body"].get("service_tier", "(none)") for request in upstream.requests()]


def test_flex_is_forwarded_served_and_recorded_at_its_price(served: Stack) -> None:
    team = served.new_team(f"tiers-flex-{time.monotonic_ns()}")
    client = served.client(team.key)

    raw = client.chat.completions.with_raw_response.create(
        model="tiered", messages=MESSAGES, service_tier="flex"
    )

    answer = raw.parse()
    assert answer.service_tier == "flex"
    assert sent_tiers(served.upstream) == ["flex"]
    row = record(served, raw.http_response.headers["x-request-id"])
    assert row["service_tier"] == "flex"
    assert row["cost"] == priced(row, 1, 4)  # flex_input, flex_output
    assert Decimal(raw.http_response.headers["x-gateway-cost"]) == row["cost"]


def test_a_stream_downgraded_to_default_is_recorded_and_priced_at_default(served: Stack) -> None:
    team = served.new_team(f"tiers-downgraded-{time.monotonic_ns()}")
    served.upstream.set_behaviour(serve_tier="default")
    client = served.client(team.key)

    with client.chat.completions.with_streaming_response.create(
        model="tiered",
        messages=MESSAGES,
        service_tier="flex",
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        request_id = response.headers["x-request-id"]
        chunks = list(response.parse())

    assert {chunk.service_tier for chunk in chunks} == {"default"}
    usage = chunks[-1].usage
    assert usage is not None
    row = record(served, request_id)
    assert row["service_tier"] == "default"
    assert row["cost"] == priced(row, 2, 8)
    assert Decimal(str(usage.model_extra["cost"])) == row["cost"]  # type: ignore[index]


def test_priority_by_multiplier(served: Stack) -> None:
    team = served.new_team(f"tiers-priority-{time.monotonic_ns()}")
    raw = served.client(team.key).chat.completions.with_raw_response.create(
        model="tiered", messages=MESSAGES, service_tier="priority"
    )
    row = record(served, raw.http_response.headers["x-request-id"])
    assert (row["service_tier"], row["cost"]) == ("priority", priced(row, 4, 16))


def test_a_self_hosted_server_is_not_sent_the_tier_and_the_record_keeps_the_one_asked_for(
    served: Stack,
) -> None:
    team = served.new_team(f"tiers-self-{time.monotonic_ns()}")
    raw = served.client(team.key).chat.completions.with_raw_response.create(
        model="tiered-self", messages=MESSAGES, service_tier="flex"
    )

    assert raw.parse().service_tier is None
    assert sent_tiers(served.upstream) == ["(none)"]
    row = record(served, raw.http_response.headers["x-request-id"])
    assert row["service_tier"] == "flex"
    assert row["cost"] == priced(row, 2, 8) / 4  # tier_multipliers.flex: 0.25


def test_a_tier_outside_the_enum_is_a_400_before_any_upstream(served: Stack) -> None:
    team = served.new_team(f"tiers-bad-{time.monotonic_ns()}")
    with pytest.raises(openai.BadRequestError) as raised:
        served.client(team.key).chat.completions.create(
            model="tiered",
            messages=MESSAGES,
            service_tier="cheap",  # type: ignore[arg-type]
        )
    assert raised.value.param == "service_tier"
    assert served.upstream.requests() == []


def test_the_usage_report_groups_by_tier(served: Stack) -> None:
    team = served.new_team(f"tiers-report-{time.monotonic_ns()}")
    client = served.client(team.key)
    ids = []
    for tier in ("flex", "flex", "priority", None):
        extra: dict[str, Any] = {} if tier is None else {"service_tier": tier}
        raw = client.chat.completions.with_raw_response.create(model="tiered", messages=MESSAGES, **extra)
        ids.append(raw.http_response.headers["x-request-id"])
    rows = [record(served, request_id) for request_id in ids]

    report = served.usage(team_id=team.id, group_by="tier")

    by_tier = {row["service_tier"]: (row["requests"], Decimal(str(row["cost"]))) for row in report}
    assert by_tier == {
        None: (1, rows[3]["cost"]),
        "flex": (2, rows[0]["cost"] + rows[1]["cost"]),
        "priority": (1, rows[2]["cost"]),
    }


def test_the_mock_names_no_tier_when_none_was_asked_for(served: Stack) -> None:
    team = served.new_team(f"tiers-none-{time.monotonic_ns()}")
    raw = served.client(team.key).chat.completions.with_raw_response.create(model="tiered", messages=MESSAGES)
    assert raw.parse().service_tier is None
    assert record(served, raw.http_response.headers["x-request-id"])["service_tier"] is None


def test_anthropic_is_asked_in_its_terms_and_its_served_tier_recorded(served: Stack) -> None:
    team = served.new_team(f"tiers-claude-{time.monotonic_ns()}")
    raw = served.client(team.key).chat.completions.with_raw_response.create(
        model="tiered-claude", messages=MESSAGES, service_tier="priority"
    )

    assert sent_tiers(served.upstream) == ["auto"]  # Anthropic's Priority Tier is reached through auto
    row = record(served, raw.http_response.headers["x-request-id"])
    assert row["service_tier"] == "default"  # the mock served it at standard
    assert row["cost"] == priced(row, 3, 15)
