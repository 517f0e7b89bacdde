"""Clients that open streams and never read them: the provider's capacity permits come back within
the write deadline, another team is served, and every upstream call has one record (499
`client_stalled` for the stalled ones). The row: requests, served upstream, records, the gap, and
how long the permit took to come back.

Two gateways of their own on the session's private PostgreSQL, Redis (capacity permits shared by
both) and mock upstream: the streams stall on one, the other team is served by the other.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import redis

from tests.faults.conftest import ADMIN_KEY, Stores
from tests.faults.records import record_counts, records_of, report, report_gap, wait_for_records
from tests.support.gateway import GatewayProcess, Team, create_team

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

WRITE_TIMEOUT_S = 1.0
QUEUE_TIMEOUT_S = 30.0  # what another team would wait before queue_timeout, were no permit to come back
STALLED_STREAMS = 2  # as many as the provider's max_concurrency: every permit held
CONFIG = f"""
providers:
  - name: capped
    kind: openai
    region: us-east
    base_url: {{upstream}}/v1
    timeout_s: 60
    capacity: {{{{max_concurrency: {STALLED_STREAMS}}}}}
models:
  - name: chat
    deployments:
      - provider: capped
        model: upstream-chat
        price: {{{{input: 0.50, output: 1.50}}}}
scheduling:
  queue_timeout_s: {{{{interactive: {QUEUE_TIMEOUT_S}}}}}
limits:
  stream_write_timeout_s: {WRITE_TIMEOUT_S}
"""
CHAT_PATH = "/v1/chat/completions"
# About 7 MB of SSE in 1,000 chunks: more than every socket buffer between a gateway and a client
# that never reads can hold.
ENDLESS = {"completion_tokens": 1_000_000, "chunks": 1_000}


@dataclass
class Stack:
    gateways: list[GatewayProcess]
    database_url: str

    def new_team(self, name: str) -> Team:
        headers = {"authorization": f"Bearer {ADMIN_KEY}"}
        with httpx.Client(base_url=self.gateways[0].base_url, headers=headers) as admin:
            return create_team(admin, name)


@pytest.fixture
def stack(stores: Stores, tmp_path: Path) -> Iterator[Stack]:
    database_url = stores.postgres.create_database(f"faults_{os.getpid()}_{next(stores.databases)}")
    redis_url = stores.redis.url(next(stores.redis_dbs))
    with redis.Redis.from_url(redis_url) as client:  # permits another scenario left in this db
        client.flushdb()
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=stores.upstream.base_url))
    env = {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
    }
    gateways: list[GatewayProcess] = []
    try:
        for _ in range(2):  # one after the other: the first one migrates the database
            gateways.append(GatewayProcess(config, env))
            gateways[-1].start()
        yield Stack(gateways, database_url)
    finally:
        for gateway in gateways:
            gateway.stop()
        stores.upstream.set_behaviour()


def open_unread_stream(gateway: GatewayProcess, key: str) -> socket.socket:
    """A streaming request over a raw socket with a small receive buffer, never read."""
    body = json.dumps(
        {"model": "chat", "messages": [{"role": "user", "content": "go on"}], "stream": True, "mock": ENDLESS}
    ).encode()
    head = (
        f"POST {CHAT_PATH} HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {key}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gateway.port))
    sock.sendall(head + body)
    return sock


async def served_upstream(stores: Stores) -> int:
    return int(stores.upstream.stats()["paths"].get(CHAT_PATH, 0))


async def test_unread_streams_give_their_permits_back(
    stores: Stores, stack: Stack, record_property: Callable[[str, object], None]
) -> None:
    stalling, waiting = stack.new_team("stalling"), stack.new_team("waiting")
    stores.upstream.clear()
    unread = [open_unread_stream(stack.gateways[0], stalling.key) for _ in range(STALLED_STREAMS)]
    try:
        for _ in range(300):  # until both hold their permit upstream (the bound ends a broken test)
            if await served_upstream(stores) == STALLED_STREAMS:
                break
            await asyncio.sleep(0.05)
        stalled_at = time.monotonic()
        sdk = openai.AsyncOpenAI(
            base_url=stack.gateways[1].base_url + "/v1", api_key=waiting.key, max_retries=0
        )
        async with sdk:
            reply = await sdk.chat.completions.with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": "my turn"}]
            )
        permit_back_s = time.monotonic() - stalled_at
        assert reply.http_response.status_code == 200  # not 429 queue_timeout
        for _ in range(300):  # the stalled streams' records, written off the request path
            if (await record_counts(stack.database_url, stalling.id))[0] >= STALLED_STREAMS:
                break
            await asyncio.sleep(0.1)
    finally:
        for sock in unread:
            sock.close()

    served = await wait_for_records(stack.database_url, waiting.id, {reply.headers["x-request-id"]})
    records = [*(await records_of(stack.database_url, stalling.id)).values(), *served.values()]
    gap = report_gap(
        record_property,
        "stalled_streams",
        requests=STALLED_STREAMS + 1,
        served_upstream=await served_upstream(stores),
        records=len(records),
    )
    report(
        record_property,
        "stalled_streams_permits",
        {
            "write_timeout_s": WRITE_TIMEOUT_S,
            "permit_back_s": round(permit_back_s, 3),
            "queue_ms": reply.headers["x-gateway-queue-ms"],
        },
    )
    assert gap == 0
    assert (
        sorted((r["status"], r["error_code"]) for r in records)
        == [(200, None)] + [(499, "client_stalled")] * STALLED_STREAMS
    )
    for team in (stalling, waiting):  # one record per request id, none twice
        count, distinct = await record_counts(stack.database_url, team.id)
        assert count == distinct
