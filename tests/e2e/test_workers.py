"""`gateway serve` with two workers: each listens on a socket of its own, and the connections of a
batch spread over both (gateway.server.serving); a scrape of /metrics, whichever worker answers
it, reports both (gateway.metrics.instruments); every line the server writes is one of the gateway's JSON lines.

Its own stack: one `gateway serve --workers 2` on PostgreSQL and a Redis db of its own, in front of one mock
upstream. Which worker holds a connection is read from /proc, as `ss -tp` would show it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import msgspec
import openai
import pytest
import redis
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from gateway.routing.pins import RedisPinStore
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


# --- /metrics across the workers --------------------------------------------------------------

SPREAD = 40  # requests for the `chat-azure` model: no other test here asks for it
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def serving_worker(gateway: GatewayProcess, client_port: int) -> int:
    """The worker holding the gateway's end of the connection from `client_port`."""
    ends = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
            if (local, remote, fields[3]) == (gateway.port, client_port, ESTABLISHED):
                ends.add(fields[9])
    holders = [pid for pid in wait_for_workers(gateway, 2) if socket_inodes(pid) & ends]
    assert len(holders) == 1, holders
    return holders[0]


def scrape_on_a_fresh_connection(gateway: GatewayProcess) -> tuple[Series, int]:
    """The series of one scrape, and the worker that answered it."""
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
        reply = client.get("/metrics")
        assert reply.status_code == 200
        worker = serving_worker(gateway, reply.extensions["network_stream"].get_extra_info("client_addr")[1])
    series = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }
    return series, worker


def total(series: Series, name: str, **labels: str) -> float:
    return sum(v for (n, found), v in series.items() if n == name and set(labels.items()) <= set(found))


def own_requests(pid: int) -> float:
    """What one worker counted itself, from its own file in the metrics directory."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    directory = next(
        v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"PROMETHEUS_MULTIPROC_DIR=")
    )
    metrics = MultiProcessCollector.merge([f"{directory}/counter_{pid}.db"])  # type: ignore[no-untyped-call]
    return sum(
        s.value
        for m in metrics
        for s in m.samples
        if s.name == "gateway_requests_total" and s.labels["model"] == "chat-azure"
    )


def on_fresh_connections(count: int, send: Callable[[httpx.Client], httpx.Response]) -> list[int]:
    """`send` on `count` connections of their own, at once; their statuses."""

    def once(_: int) -> int:
        with httpx.Client(timeout=30) as client:
            return send(client).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(once, range(count)))


def test_every_scrape_counts_the_requests_of_both_workers(gateway: GatewayProcess, team: Team) -> None:
    body = {"model": "chat-azure", "messages": [{"role": "user", "content": "Counted where?"}]}
    auth = {"authorization": f"Bearer {team.key}"}
    url = gateway.base_url + "/v1/chat/completions"
    assert on_fresh_connections(SPREAD, lambda c: c.post(url, json=body, headers=auth)) == [200] * SPREAD
    own = {pid: own_requests(pid) for pid in wait_for_workers(gateway, 2)}
    assert sum(own.values()) == SPREAD and min(own.values()) > 0, own  # both served some

    answered_by = set()
    for _ in range(20):
        series, worker = scrape_on_a_fresh_connection(gateway)
        answered_by.add(worker)
        assert total(series, "gateway_requests_total", model="chat-azure") == SPREAD
        assert total(series, "gateway_request_latency_seconds_count", provider="up-azure") == SPREAD
        assert (
            total(series, "gateway_request_latency_seconds_bucket", provider="up-azure", le="+Inf") == SPREAD
        )
        assert total(series, "gateway_tokens_total", model="chat-azure", kind="completion") > 0
    assert answered_by == set(own)  # both answered scrapes (all 20 on one: odds of 2 in a million)


def test_refused_requests_are_counted_whichever_worker_refused_them(
    gateway: GatewayProcess, team: Team
) -> None:
    url = gateway.base_url + "/v1/embeddings"
    unknown_key = {"authorization": "Bearer sk-gw-" + "0" * 43}
    body = {"model": "embed", "input": "x"}
    assert on_fresh_connections(12, lambda c: c.post(url, json=body, headers=unknown_key)) == [401] * 12
    auth = {"authorization": f"Bearer {team.key}"}
    unknown_model = {"model": "no-such-model", "input": "x"}
    assert on_fresh_connections(8, lambda c: c.post(url, json=unknown_model, headers=auth)) == [404] * 8

    refused = "gateway_requests_refused_total"
    for _ in range(10):
        series, _ = scrape_on_a_fresh_connection(gateway)
        assert total(series, refused, endpoint="embeddings", status="401", code="invalid_api_key") == 12
        assert total(series, refused, endpoint="embeddings", status="404", code="model_not_found") == 8
        assert total(series, "gateway_requests_total", model="embed") == 0  # none reached an upstream


def test_shared_state_is_reported_once_not_once_per_worker(gateway: GatewayProcess, team: Team) -> None:
    auth = {"authorization": f"Bearer {team.key}"}
    url = gateway.base_url + "/v1/chat/completions"
    for batch in ("gauge-a", "gauge-b", "gauge-c"):
        headers = auth | {"x-gateway-batch": batch}
        assert on_fresh_connections(4, lambda c, h=headers: c.post(url, json=CHAT, headers=h)) == [200] * 4
    pins = int(redis.Redis.from_url(REDIS_URL).zcard(RedisPinStore.INDEX))
    assert pins >= 3
    for _ in range(10):
        series, _ = scrape_on_a_fresh_connection(gateway)
        assert series[("gateway_active_batch_pins", ())] == pins  # one value, not one per worker
        assert series[("gateway_open_circuits", ())] == 0
        assert ("gateway_metering_backlog", ()) in series
        assert total(series, "gateway_queue_depth") == 0  # summed over both: nothing waits


def test_each_workers_process_is_reported_by_its_pid(gateway: GatewayProcess) -> None:
    expected = {str(pid) for pid in wait_for_workers(gateway, 2)}
    series, _ = scrape_on_a_fresh_connection(gateway)
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"):
        assert {dict(labels)["pid"] for n, labels in series if n == name} == expected
        assert all(value > 0 for (n, _), value in series.items() if n == name)
    assert len([n for n, _ in series if n == "python_info"]) == 1
    assert total(series, "python_gc_collections_total") > 0


def server_lines(gateway: GatewayProcess) -> list[dict[str, object]]:
    """Every line `gateway serve` wrote (stdout and stderr), each a JSON object, bar the one line
    for the person who started it."""
    lines = [line for line in gateway.logs().splitlines() if not line.startswith("gateway: serving on ")]
    return [msgspec.json.decode(line) for line in lines]  # a line of any other format fails here


def test_the_servers_own_lines_are_the_gateways_json_lines(gateway: GatewayProcess) -> None:
    assert gateway.process is not None
    events = {(e.get("logger"), e["event"]) for e in server_lines(gateway)}
    assert ("uvicorn.error", f"Started parent process [{gateway.process.pid}]") in events
    for pid in wait_for_workers(gateway, 2):
        assert ("uvicorn.error", f"Started server process [{pid}]") in events
    assert ("uvicorn.error", "Application startup complete.") in events


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


def test_after_a_worker_died_its_counts_stay_and_its_process_goes(gateway: GatewayProcess) -> None:
    """After the test above: the dead worker's requests are still in every scrape's totals."""
    running = {str(pid) for pid in wait_for_workers(gateway, 2)}
    for _ in range(10):
        series, _ = scrape_on_a_fresh_connection(gateway)
        assert total(series, "gateway_requests_total", model="chat-azure") == SPREAD
        assert {
            dict(labels)["pid"] for n, labels in series if n == "process_resident_memory_bytes"
        } == running
    assert any(
        "died" in str(e["event"]) and e.get("logger") == "uvicorn.error" for e in server_lines(gateway)
    )
