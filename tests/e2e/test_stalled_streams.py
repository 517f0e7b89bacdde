"""A client that opens a stream and never reads it holds nothing for long: once a send to it waits
past `limits.stream_write_timeout_s`, the gateway drops its connection, closes the upstream stream,
gives the provider's capacity permit back and records the request as 499 `client_stalled`; and one
key may have only `limits.max_streams_per_key` streams in flight at a gateway process.

Its own stack: one `gateway serve` in front of `gateway mock-upstream`, a SQLite file, no Redis
(permits counted in the process). tests/faults/test_stalled_streams.py runs the same case with
PostgreSQL and permits shared through Redis.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import GatewayProcess, Team, create_team
from tests.support.upstream import RunningUpstream, start_mock_upstream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
ADMIN_KEY = "admin-stalls-secret"
WRITE_TIMEOUT_S = 1.0
QUEUE_TIMEOUT_S = 20.0  # far longer than the write deadline: a permit that never comes back shows
MAX_STREAMS_PER_KEY = 2

CONFIG = f"""
providers:
  - name: capped
    kind: openai
    region: us-east
    base_url: {{upstream}}/v1
    timeout_s: 30
    capacity: {{{{max_concurrency: 2}}}}
  - name: roomy
    kind: openai
    region: us-east
    base_url: {{upstream}}/v1
    timeout_s: 30
models:
  - name: chat
    deployments:
      - provider: capped
        model: upstream-chat
        price: {{{{input: 1, output: 2}}}}
  - name: wide
    deployments:
      - provider: roomy
        model: upstream-wide
        price: {{{{input: 1, output: 2}}}}
scheduling:
  queue_timeout_s: {{{{interactive: {QUEUE_TIMEOUT_S}}}}}
limits:
  stream_write_timeout_s: {WRITE_TIMEOUT_S}
  max_streams_per_key: {MAX_STREAMS_PER_KEY}
"""
CHAT_PATH = "/v1/chat/completions"
# About 7 MB of SSE in 1,000 chunks: far more than the socket buffers between the gateway and a
# client that never reads can hold, so the gateway's sends to it stall.
ENDLESS = {"completion_tokens": 1_000_000, "chunks": 1_000}
SLOW = {"chunks": 400, "chunk_delay_ms": 25}  # about 10 s: open for as long as a case needs


@dataclass
class Served:
    gateway: GatewayProcess
    upstream: RunningUpstream
    admin: httpx.Client

    def sdk(self, team: Team) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url + "/v1", api_key=team.key, max_retries=0)

    def records(self, team: Team, expected: int) -> list[dict[str, Any]]:
        """The team's usage records once there are `expected` of them (written off the request path)."""
        events: list[dict[str, Any]] = []
        for _ in range(150):
            reply = self.admin.get("/admin/usage/events", params={"team_id": team.id, "limit": 100})
            events = reply.raise_for_status().json()["data"]
            if len(events) >= expected:
                return events
            time.sleep(0.1)
        raise AssertionError(f"{len(events)} usage records for team {team.id}, expected {expected}")

    def served_upstream(self) -> int:
        return int(self.upstream.stats()["paths"].get(CHAT_PATH, 0))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("stalls")
    upstream = start_mock_upstream()
    config = directory / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    env = {
        "GATEWAY_DATABASE_URL": f"sqlite:///{directory / 'gateway.db'}",
        "GATEWAY_REDIS_URL": "",
        "GATEWAY_WORKERS": "1",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
    }
    gateway = GatewayProcess(config, env).start()
    admin = httpx.Client(
        base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
    )
    try:
        yield Served(gateway, upstream, admin)
    finally:
        admin.close()
        gateway.stop()
        upstream.stop()


@pytest.fixture
def upstream(served: Served) -> Iterator[RunningUpstream]:
    served.upstream.clear()
    served.upstream.set_behaviour()
    yield served.upstream
    served.upstream.set_behaviour()


def open_unread_stream(gateway: GatewayProcess, key: str, model: str = "chat") -> socket.socket:
    """Send a streaming request over a raw socket with a small receive buffer, and never read."""
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "go on"}], "stream": True, "mock": ENDLESS}
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


def read_to_the_end(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    """What the connection still held once the client reads again; ends when the gateway closed it."""
    sock.settimeout(timeout_s)
    received = bytearray()
    try:
        while chunk := sock.recv(65_536):
            received += chunk
    except ConnectionResetError:
        pass
    return bytes(received)


def wait_until(condition: Any, bound_s: float = 15.0) -> None:
    """Poll `condition` (the bound only ends a broken test)."""
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def test_unread_streams_give_their_permits_back_and_are_recorded_as_499(
    served: Served, upstream: RunningUpstream
) -> None:
    stalling, waiting = create_team(served.admin, "stalling"), create_team(served.admin, "waiting")
    unread = [open_unread_stream(served.gateway, stalling.key) for _ in range(2)]  # both permits
    try:
        wait_until(lambda: served.served_upstream() == 2)

        started = time.monotonic()
        reply = served.sdk(waiting).chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "my turn"}]
        )
        waited_s = time.monotonic() - started

        assert reply.http_response.status_code == 200  # not 429 queue_timeout after 20 s
        stalled = served.records(stalling, 2)
        tails = [read_to_the_end(sock) for sock in unread]  # the clients come back: too late
    finally:
        for sock in unread:
            sock.close()

    for tail in tails:  # cut: neither the end of the SSE stream nor the end of the chunked body
        assert b"data: [DONE]" not in tail and not tail.endswith(b"0\r\n\r\n")
    assert [(r["status"], r["error_code"]) for r in stalled] == [(499, "client_stalled")] * 2
    for record in stalled:  # what was seen, estimated: the upstream sent no counts before the cut
        assert record["usage_source"] == "estimated"
        assert record["prompt_tokens"] > 0 and record["completion_tokens"] > 0
    (served_record,) = served.records(waiting, 1)
    assert served_record["status"] == 200
    assert served.served_upstream() == 3  # one upstream call per record, no more, no less
    assert "ASGI" not in served.gateway.logs()  # uvicorn saw clients gone, not a failing app
    print(
        f"\nSTALLED STREAMS: permit back after {waited_s:.2f} s "
        f"(queue {reply.headers['x-gateway-queue-ms']} ms; write deadline {WRITE_TIMEOUT_S} s)"
    )


def test_a_key_past_its_streams_in_flight_is_refused_before_any_upstream_call(
    served: Served, upstream: RunningUpstream
) -> None:
    busy, other = create_team(served.admin, "busy"), create_team(served.admin, "other")
    body = {"model": "wide", "messages": [{"role": "user", "content": "hi"}], "stream": True, "mock": SLOW}
    with httpx.Client(base_url=served.gateway.base_url, timeout=30) as http:
        held = [
            http.stream("POST", CHAT_PATH, json=body, headers={"authorization": f"Bearer {busy.key}"})
            for _ in range(MAX_STREAMS_PER_KEY)
        ]
        replies = [stream.__enter__() for stream in held]
        try:
            assert [r.status_code for r in replies] == [200] * MAX_STREAMS_PER_KEY
            before = served.served_upstream()

            with pytest.raises(openai.RateLimitError) as refused:
                served.sdk(busy).chat.completions.create(
                    model="wide", messages=[{"role": "user", "content": "one more"}], stream=True
                )
            assert refused.value.code == "too_many_streams"
            assert refused.value.response.headers["retry-after"] == "1"
            assert served.served_upstream() == before  # refused before any upstream call

            answer = served.sdk(busy).chat.completions.create(  # a non-streamed request goes on
                model="wide", messages=[{"role": "user", "content": "not a stream"}]
            )
            assert answer.choices[0].message.content
            with served.sdk(other).chat.completions.create(  # another key has its own bound
                model="wide", messages=[{"role": "user", "content": "hi"}], stream=True
            ) as stream:
                assert any(chunk.choices for chunk in stream)
        finally:
            for stream in held:
                stream.__exit__(None, None, None)

    def streams_again() -> bool:  # once the gateway has seen the held streams' clients leave
        try:
            with served.sdk(busy).chat.completions.create(
                model="wide", messages=[{"role": "user", "content": "again"}], stream=True
            ) as stream:
                return any(chunk.choices for chunk in stream)
        except openai.RateLimitError:
            return False

    wait_until(streams_again)
