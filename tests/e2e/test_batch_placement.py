"""Placement by deadline and price, end to end: the openai SDK -> `gateway serve` -> the mock
upstream over real HTTP. Three lanes for one model: a self-hosted deployment the gateway runs, a
provider's Batch API (`batch_execution: provider`) and that provider's flex tier. Jobs asking
`fastest` (before any history), `cheapest` and `by_deadline` (1h and 24h) run where the rule says: on the provider's
batch API (no line sent one by one), line by line with `service_tier: flex`, or on the self-hosted
deployment, each metered at its lane's price. The quote endpoint lists the lanes and the picks.
"""

from __future__ import annotations

import json
import subprocess
import sys
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

ADMIN_KEY = "admin-placement-secret"
DATABASE = "gateway_test_e2e_batch_placement"
DEADLINE_S = 60.0
LOCAL, BATCH_API, FLEX = (
    "local/self-chat:gateway",
    "cloud/cloud-chat:provider",
    "cloud/cloud-chat:gateway:flex",
)
# USD per million tokens (input, output) of each lane
PRICES = {
    LOCAL: (Decimal(3), Decimal(6)),
    BATCH_API: (Decimal("0.8"), Decimal("3.2")),  # 0.4 of the normal price
    FLEX: (Decimal(1), Decimal(4)),
}

CONFIG = """
providers:
  - {{name: local, kind: openai, region: eu-west, base_url: "{upstream}/v1", api_key: local-secret}}
  - name: cloud
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: cloud-secret
    batch_execution: provider
models:
  - name: chat
    deployments:
      - {{provider: local, model: self-chat, price: {{input: 3, output: 6}}}}
      - provider: cloud
        model: cloud-chat
        price: {{input: 2, output: 8, flex_input: 1, flex_output: 4}}
        batch_discount: "0.6"
jobs: {{poll_interval_s: 0.2, pause_s: 0.5}}
"""


@dataclass
class Stack:
    upstream: RunningUpstream
    gateway: GatewayProcess
    admin: httpx.Client
    team: Team

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url + "/v1", api_key=self.team.key, max_retries=0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    database_url = recreate_database(DATABASE)
    upstream = start_mock_upstream(completion_tokens=6, batch_delay_ms=200)
    config = tmp_path_factory.mktemp("placement") / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    gateway = GatewayProcess(config, {"GATEWAY_DATABASE_URL": database_url, "GATEWAY_ADMIN_KEY": ADMIN_KEY})
    try:
        gateway.start()
        admin = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
        yield Stack(upstream, gateway, admin, create_team(admin, "placement"))
        admin.close()
    finally:
        gateway.stop()
        upstream.stop()


def input_file(client: openai.OpenAI, tag: str, count: int = 4) -> str:
    system = {"role": "system", "content": "You answer in one sentence. " * 6}
    rows = []
    for i in range(count):
        body = {
            "model": "chat",
            "messages": [system, {"role": "user", "content": f"{tag} {i}?"}],
            "max_tokens": 16,
        }
        rows.append(
            json.dumps(
                {"custom_id": f"{tag}-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
            )
        )
    data = ("\n".join(rows) + "\n").encode()
    return client.files.create(file=(f"{tag}.jsonl", data), purpose="batch").id


def placed_job(stack: Stack, tag: str, rule: str, window: str) -> Any:
    client = stack.client()
    batch = client.batches.create(
        input_file_id=input_file(client, tag),
        endpoint="/v1/chat/completions",
        completion_window=window,  # type: ignore[arg-type]  # the SDK types OpenAI's one window
        metadata={"gateway_placement": rule},
    )
    deadline = time.monotonic() + DEADLINE_S
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"batch {batch.id} still {batch.status}"
        time.sleep(0.2)
    assert batch.status == "completed", batch
    return batch


def totals(stack: Stack, batch_id: str) -> dict[str, Any]:
    """The batch's requests, tokens and cost from its usage records (`/v1/gateway/batches/{id}`)."""
    headers = {"authorization": f"Bearer {stack.team.key}"}
    reply = httpx.get(stack.gateway.base_url + f"/v1/gateway/batches/{batch_id}", headers=headers)
    found: dict[str, Any] = reply.raise_for_status().json()
    return found


def priced(found: dict[str, Any], lane: str) -> Decimal:
    """The batch's tokens at the lane's rates (no cache rate configured: every prompt token at input)."""
    rates = PRICES[lane]
    return (int(found["prompt_tokens"]) * rates[0] + int(found["completion_tokens"]) * rates[1]) / 1_000_000


def chat_requests(stack: Stack, model: str) -> list[dict[str, Any]]:
    return [
        r
        for r in stack.upstream.requests()
        if r["path"].endswith("/chat/completions")
        and isinstance(r.get("body"), dict)
        and r["body"].get("model") == model
    ]


def test_the_quote_lists_each_lane_and_what_each_rule_picks(stack: Stack) -> None:
    client = stack.client()
    file_id = input_file(client, "quote")
    headers = {"authorization": f"Bearer {stack.team.key}"}

    reply = httpx.post(
        stack.gateway.base_url + "/v1/gateway/batches/quote",
        json={"input_file_id": file_id, "completion_window": "1h"},
        headers=headers,
    )

    assert reply.status_code == 200, reply.text
    quote = reply.json()
    assert {lane["id"] for lane in quote["lanes"]} == {LOCAL, BATCH_API, FLEX, "cloud/cloud-chat:gateway"}
    assert (quote["cheapest"], quote["by_deadline"]) == (BATCH_API, FLEX)
    batch_api = next(lane for lane in quote["lanes"] if lane["id"] == BATCH_API)
    assert batch_api["duration"]["bound_s"] == 86_400 and batch_api["meets_window"] is False
    assert all(lane["tokens"]["counted_by"] == "estimate" for lane in quote["lanes"])


def test_fastest_with_no_history_anywhere_runs_on_the_self_hosted_deployment(stack: Stack) -> None:
    """Before any job has run (this module's first), no lane has an expected duration: the fastest
    is a gateway-run lane at the default tier, the catalog's first."""
    batch = placed_job(stack, "fast", "fastest", "24h")

    placement = batch.model_extra["gateway"]["placement"] if batch.model_extra else None
    assert placement is not None and placement["lane"] == LOCAL
    assert all(lane["duration"]["basis"] in ("no history", "window") for lane in placement["quote"]["lanes"])
    sent = [r for r in chat_requests(stack, "self-chat") if "fast" in json.dumps(r["body"]["messages"])]
    assert len(sent) == 4
    found = totals(stack, batch.id)
    assert found["requests"] == 4 and Decimal(found["cost"]) == priced(found, LOCAL)


def test_cheapest_runs_on_the_providers_batch_api_at_its_price(stack: Stack) -> None:
    sent_before = len(chat_requests(stack, "cloud-chat"))

    batch = placed_job(stack, "cheap", "cheapest", "24h")

    placement = batch.model_extra["gateway"]["placement"] if batch.model_extra else None
    assert placement is not None and placement["lane"] == BATCH_API and placement["execution"] == "provider"
    assert len(chat_requests(stack, "cloud-chat")) == sent_before  # no line sent one by one
    submitted = [r for r in stack.upstream.requests() if r["path"] == "/v1/batches" and r["method"] == "POST"]
    assert submitted
    found = totals(stack, batch.id)
    assert found["requests"] == 4 and Decimal(found["cost"]) == priced(found, BATCH_API)


def test_by_deadline_within_an_hour_runs_line_by_line_at_the_flex_tier(stack: Stack) -> None:
    batch = placed_job(stack, "soon", "by_deadline", "1h")

    placement = batch.model_extra["gateway"]["placement"] if batch.model_extra else None
    assert placement is not None and placement["lane"] == FLEX and placement["service_tier"] == "flex"
    sent = [r for r in chat_requests(stack, "cloud-chat") if "soon" in json.dumps(r["body"]["messages"])]
    assert len(sent) == 4  # sent one by one (the tier itself goes only to servers that have tiers)
    found = totals(stack, batch.id)
    assert found["requests"] == 4 and Decimal(found["cost"]) == priced(found, FLEX)
    assert batch.expires_at - batch.created_at == 3600


def test_by_deadline_with_a_day_takes_the_batch_api(stack: Stack) -> None:
    batch = placed_job(stack, "later", "by_deadline", "24h")

    assert batch.model_extra is not None and batch.model_extra["gateway"]["placement"]["lane"] == BATCH_API


def test_the_console_shows_a_placed_jobs_quote_with_its_lane_marked_and_quotes_a_file(stack: Stack) -> None:
    batch = placed_job(stack, "shown", "by_deadline", "1h")

    file_id = input_file(stack.client(), "console")

    with httpx.Client(base_url=stack.gateway.base_url) as console:
        signed_in = console.post("/ui/login", data={"key": stack.team.key, "next": f"/ui/batches/{batch.id}"})
        page = console.get(f"/ui/batches/{batch.id}")
        quoted = console.get("/ui/quote", params={"file": file_id, "window": "1h"})

    assert signed_in.status_code in (200, 303), signed_in.text
    assert page.status_code == 200
    assert 'id="placement"' in page.text
    assert f'class="chosen" data-chosen="true" data-lane="{FLEX}"' in page.text
    assert all(f'data-lane="{lane}"' in page.text for lane in PRICES)
    assert quoted.status_code == 200
    assert 'id="quote-result"' in quoted.text and "data-chosen" not in quoted.text
    assert all(f'data-lane="{lane}"' in quoted.text for lane in PRICES)


def test_the_cli_prints_a_quote_as_a_table(stack: Stack, tmp_path: Any) -> None:
    system = {"role": "system", "content": "Be brief."}
    body = {"model": "chat", "messages": [system, {"role": "user", "content": "Hi?"}], "max_tokens": 8}
    path = tmp_path / "lines.jsonl"
    path.write_text(
        json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}) + "\n"
    )
    command = [sys.executable, "-m", "gateway.cli", "batches", "quote", str(path)]
    command += ["--url", stack.gateway.base_url, "--key", stack.team.key, "--window", "1h"]

    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()
    assert rows[0] == "chat, 1 lines"
    assert rows[1].split()[:3] == ["lane", "execution", "tier"]
    assert {row.split()[0] for row in rows[3:-1]} == {*PRICES, "cloud/cloud-chat:gateway"}
    assert rows[-1].startswith(f"cheapest: {BATCH_API}")
