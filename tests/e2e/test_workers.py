"""`gateway serve` with two workers: each listens on a socket of its own, and the connections of a
batch spread over both (gateway.server.serving).

Its own stack: one `gateway serve --workers 2` on PostgreSQL and a Redis db of its own, in front of one mock
upstream. Which worker holds a connection is read from /proc, as `ss -tp` would show it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
import redis

from tests.e2e.conftest import ADMIN_KEY, CONFIG, MAX_BODY
from tests.support.gateway import GatewayProcess, Team, create_team, free_port, recreate_database
from tests.support.stores import redis_url
from tests.support.upstream import start_mock_upstream

pytestmark = pytest.mark.e2e
REDIS_URL = redis_url("e2e-workers")
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "Which worker am I on?"}]}
CONNECTIONS = 64
LISTEN, ESTABLISHED = "0A", "01"  # TCP states as /proc/net/tcp writes them


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def tcp_sockets(port: int, state: str) -> set[str]:
    """Inodes of the TCP sockets whose local port is `port`, in `state`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                inodes.add(fields[9])
    return inodes


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def workers(gateway: GatewayProcess) -> dict[int, set[str]]:
    """The serving processes, each with the inodes of its listening sockets on the gateway's port."""
    assert gateway.process is not None
    listening = tcp_sockets(gateway.port, LISTEN)
    found = {}
    for child in children(gateway.process.pid):
        try:
            own = socket_inodes(child) & listening
        except FileNotFoundError:  # a child that has just exited (the migration)
            continue
        if own:
            found[child] = own
    return found


def wait_for_workers(gateway: GatewayProcess, count: int, timeout_s: float = 30.0) -> dict[int, set[str]]:
    deadline = time.monotonic() + timeout_s
    while len(found := workers(gateway)) != count and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    upstream = start_mock_upstream()
    config: Path = tmp_path_factory.mktemp("workers") / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url, dead_port=free_port(), max_body=MAX_BODY))
    env = {
        "GATEWAY_DATABASE_URL": recreate_database(f"gateway_e2e_workers_{os.getpid()}"),
        "GATEWAY_REDIS_URL": REDIS_URL,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_WORKERS": "2",
    }
    process = GatewayProcess(config, env).start()
    try:
        yield process
    finally:
        process.stop()
        upstream.stop()
        redis.Redis.from_url(REDIS_URL).flushdb()


@pytest.fixture(scope="module")
def team(gateway: GatewayProcess) -> Team:
    with httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        return create_team(admin, "two-workers")


def ask_on_fresh_connections(gateway: GatewayProcess, team: Team, count: int) -> list[openai.OpenAI]:
    """`count` clients at once, each on a connection of its own, kept open after its answer."""
    clients = [
        openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=team.key, max_retries=0)
        for _ in range(count)
    ]

    def ask(client: openai.OpenAI) -> str:
        completion = client.chat.completions.create(**CHAT, extra_headers={"x-gateway-batch": "spread"})  # type: ignore[call-overload]
        return str(completion.choices[0].message.content)

    with ThreadPoolExecutor(max_workers=count) as pool:
        answers = list(pool.map(ask, clients))
    assert all(answers)
    return clients


def test_each_worker_listens_on_a_socket_of_its_own(gateway: GatewayProcess) -> None:
    found = wait_for_workers(gateway, 2)
    assert len(found) == 2
    assert all(len(inodes) == 1 for inodes in found.values())
    assert len(set.union(*found.values())) == 2  # two sockets, not one shared


def test_a_batch_on_fresh_connections_is_spread_over_both_workers(
    gateway: GatewayProcess, team: Team
) -> None:
    clients = ask_on_fresh_connections(gateway, team, CONNECTIONS)
    try:
        established = tcp_sockets(gateway.port, ESTABLISHED)
        held = {pid: len(socket_inodes(pid) & established) for pid in wait_for_workers(gateway, 2)}
    finally:
        for client in clients:
            client.close()
    assert sum(held.values()) == CONNECTIONS
    # by a hash of each connection's addresses: 32 each on average; under 12 has odds below 1e-4
    assert min(held.values()) >= 12, held


def test_a_killed_worker_leaves_the_other_serving_and_is_replaced(
    gateway: GatewayProcess, team: Team
) -> None:
    before = wait_for_workers(gateway, 2)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)

    for client in ask_on_fresh_connections(gateway, team, 16):  # served by the other one meanwhile
        client.close()

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (victim in (found := workers(gateway)) or len(found) != 2):
        time.sleep(0.1)
    assert victim not in found and len(found) == 2
    for client in ask_on_fresh_connections(gateway, team, 16):
        client.close()
