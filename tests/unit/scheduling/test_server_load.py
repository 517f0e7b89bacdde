"""Back-pressure from a replica's /metrics: parsing vLLM's exposition, the dispatch rule on readings
served through httpx.MockTransport, and `run()` against the simulated vLLM over real HTTP."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn
from structlog.testing import capture_logs

from gateway.routing.directives import Priority
from gateway.scheduling.server_load import (
    GROWTH_ROOM,
    LoadReading,
    ServerLoad,
    metrics_url_for,
    parse_load,
)
from gateway.scheduling.ticket import Ticket
from gateway.settings import SchedulingSettings
from mock_upstream.vllm.app import create_simulator_app
from mock_upstream.vllm.engine import EngineConfig
from mock_upstream.vllm.tokens import prompt_blocks

METRICS_URL = "http://vllm-0:8000/metrics"
HISTOGRAM_NOISE = "".join(
    f'vllm:e2e_request_latency_seconds_bucket{{engine="0",le="{le}",model_name="a"}} 7.0\n'
    for le in ("0.3", "0.5", "1.0", "+Inf")
)


def vllm_text(
    waiting: float, running: float, kv: float | None = None, *, kv_name: str = "vllm:kv_cache_usage_perc"
) -> str:
    """A vLLM-style exposition for one model, with the HELP and TYPE lines and a histogram around it."""
    text = (
        "# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency.\n"
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        f"{HISTOGRAM_NOISE}"
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="a"}} {running}\n'
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="a"}} {waiting}\n'
    )
    if kv is not None:
        text += f"# TYPE {kv_name} gauge\n" + f'{kv_name}{{engine="0",model_name="a"}} {kv}\n'
    return text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class MetricsEndpoint:
    """What the replica's /metrics answers now: a text, a status, or a connection failure."""

    def __init__(self) -> None:
        self.text = vllm_text(0, 0, 0.0)
        self.status = 200
        self.refuse = False
        self.reads = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.reads += 1
        if self.refuse:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(self.status, text=self.text)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def endpoint() -> MetricsEndpoint:
    return MetricsEndpoint()


@pytest.fixture
async def client(endpoint: MetricsEndpoint) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(endpoint.handle)) as client:
        yield client


def server_load(
    client: httpx.AsyncClient,
    clock: Clock,
    *,
    url: str = METRICS_URL,
    on_change: Callable[[], None] = lambda: None,
    **settings: Any,
) -> ServerLoad:
    return ServerLoad(url, SchedulingSettings(**settings), client, clock=clock, on_change=on_change)


def dispatch_all(load: ServerLoad, most: int = 1000) -> int:
    """Dispatch while allowed (at most `most`): how many went."""
    sent = 0
    while sent < most and load.may_dispatch():
        load.dispatched()
        sent += 1
    return sent


# metrics_url_for


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/metrics"),
        ("http://10.0.0.5:8000/v1/", "http://10.0.0.5:8000/metrics"),
        ("http://sim:9000/r1/v1", "http://sim:9000/r1/metrics"),
        ("http://10.0.0.5:8000", "http://10.0.0.5:8000/metrics"),
        ("http://vllm.internal/v10", "http://vllm.internal/v10/metrics"),
    ],
)
def test_the_metrics_url_defaults_to_the_base_url_without_v1(base_url: str, expected: str) -> None:
    assert metrics_url_for(base_url, None) == expected


def test_a_configured_metrics_url_wins() -> None:
    assert metrics_url_for("http://10.0.0.5:8000/v1", "http://10.0.0.5:9100/m") == "http://10.0.0.5:9100/m"


# parse_load


async def test_parse_load_reads_the_simulators_own_metrics() -> None:
    app = create_simulator_app(EngineConfig(max_num_seqs=1, time_scale=0.0))
    engine = app.replicas[0].engine
    for question in ("one", "two", "three"):
        engine.add(question, prompt_blocks("m", question * 200, engine.config.block_size), 8)
    engine.step()  # admits one: it runs, two wait, and its prompt holds blocks
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        text = (await client.get("/metrics")).text
        truth = msgspec.json.decode((await client.get("/_sim/stats")).content)
    await app.close()

    reading = parse_load(text, read_at=5.0)

    size = engine.config.num_gpu_blocks * engine.config.block_size
    assert reading == LoadReading(
        waiting=2,
        running=1,
        kv_usage=truth["kv_cache_usage"],
        read_at=5.0,
        kv_tokens=size,
        block_size=engine.config.block_size,
        preemptions=truth["preemptions"],
    )
    assert (truth["waiting"], truth["running"]) == (2, 1)
    assert reading.kv_usage is not None and reading.kv_usage > 0


def test_parse_load_sums_the_series_and_takes_the_highest_usage() -> None:
    text = (
        vllm_text(2, 1, 0.25)
        + 'vllm:num_requests_running{engine="0",model_name="b \\"quoted\\""} 4.0\n'
        + 'vllm:num_requests_waiting{engine="0",model_name="b \\"quoted\\""} 3.0\n'
        + 'vllm:kv_cache_usage_perc{engine="0",model_name="b \\"quoted\\""} 0.75\n'
    )
    assert parse_load(text, read_at=1.0) == LoadReading(waiting=5, running=5, kv_usage=0.75, read_at=1.0)


def test_parse_load_reads_the_older_kv_cache_name() -> None:
    text = vllm_text(0, 3, 0.5, kv_name="vllm:gpu_cache_usage_perc")
    assert parse_load(text, read_at=1.0) == LoadReading(waiting=0, running=3, kv_usage=0.5, read_at=1.0)


def test_parse_load_without_a_kv_series_has_no_usage() -> None:
    assert parse_load(vllm_text(1, 2), read_at=1.0) == LoadReading(1, 2, None, 1.0)


def test_parse_load_ignores_series_that_only_share_a_prefix() -> None:
    text = vllm_text(1, 2) + 'vllm:num_requests_waiting_by_reason{reason="capacity"} 40.0\n'
    assert parse_load(text, read_at=1.0) == LoadReading(1, 2, None, 1.0)


def test_parse_load_skips_values_that_are_not_numbers() -> None:
    text = vllm_text(1, 2, 0.5) + 'vllm:num_requests_waiting{engine="1",model_name="a"} NaN\n'
    assert parse_load(text, read_at=1.0) == LoadReading(1, 2, 0.5, 1.0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# HELP process_cpu_seconds_total CPU time.\n# TYPE process_cpu_seconds_total counter\n"
        "process_cpu_seconds_total 12.5\n",
        'vllm:num_requests_waiting{model_name="a"} 1.0\n',  # no running series
        '<html><body>vllm:num_requests_running{model_name="a"} 1</body></html>\n',
        'vllm:num_requests_running{model_name="a"} 1\nvllm:num_requests_waiting{model_name="a"} many\n',
    ],
    ids=["empty", "not vllm", "half", "html", "garbled"],
)
def test_parse_load_without_vllm_load_is_none(text: str) -> None:
    assert parse_load(text, read_at=1.0) is None


CACHE_CONFIG = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
    'gpu_memory_utilization="0.9",num_gpu_blocks="8600"} 1.0\n'
)
PREEMPTIONS = (
    "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
    "# TYPE vllm:num_preemptions_total counter\n"
    'vllm:num_preemptions_total{engine="0",model_name="a"} 7.0\n'
)


def test_parse_load_reads_the_kv_size_and_the_preemption_counter() -> None:
    reading = parse_load(vllm_text(0, 3, 0.5) + CACHE_CONFIG + PREEMPTIONS, read_at=1.0)
    assert reading == LoadReading(0, 3, 0.5, 1.0, kv_tokens=8600 * 16, block_size=16, preemptions=7.0)


def test_parse_load_sums_the_kv_size_of_each_engine() -> None:
    second = CACHE_CONFIG.replace('num_gpu_blocks="8600"', 'engine="1",num_gpu_blocks="400"')
    reading = parse_load(vllm_text(0, 3, 0.5) + CACHE_CONFIG + second.split("\n", 2)[2], read_at=1.0)
    assert reading is not None and reading.kv_tokens == 9000 * 16


@pytest.mark.parametrize("blocks", ["None", "0", "many", ""])
def test_parse_load_without_a_kv_size_has_none(blocks: str) -> None:
    text = vllm_text(0, 3, 0.5) + CACHE_CONFIG.replace('"8600"', f'"{blocks}"')
    reading = parse_load(text, read_at=1.0)
    assert reading is not None and reading.kv_tokens is None and reading.preemptions is None


async def test_a_server_that_publishes_its_size_is_filled_by_the_learned_capacity(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    """The size decides, not the burst: the old rule would hold at once (usage above 0.8)."""
    endpoint.text = vllm_text(0, 0, 0.85) + CACHE_CONFIG + PREEMPTIONS
    load = server_load(client, clock, kv_cache_high=1.0)
    await load.read()
    one = Ticket("t", 1.0, Priority.BATCH, 1000, 1100)
    sent = 0
    while load.may_dispatch(one):
        load.in_flight.hold(one)
        sent += 1
    assert sent == 8600 * 16 // 1108  # each at its peak, its last block half empty
    capacity = load.snapshot()["capacity"]
    assert capacity["kv_tokens"] == 8600 * 16 and capacity["shares_prefix"] is False

    endpoint.text = endpoint.text.replace("} 7.0", "} 9.0")  # it preempted
    await load.read()
    assert not load.may_dispatch(one) and load.capacity.fill < 1

    clock.now += 10  # stale: the caps alone hold
    assert load.may_dispatch(one)


# the rule


async def test_never_read_allows_everything(client: httpx.AsyncClient, clock: Clock) -> None:
    load = server_load(client, clock)
    assert dispatch_all(load) == 1000
    assert load.snapshot() == {
        "waiting": None,
        "running": None,
        "kv_usage": None,
        "age_s": None,
        "stale": True,
        "held": False,
        "capacity": None,
    }


async def test_a_saturated_server_keeps_its_queue_at_the_target(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    endpoint.text = vllm_text(waiting=2, running=8, kv=0.5)
    load = server_load(client, clock, target_waiting=4)
    await load.read()

    assert dispatch_all(load) == 2  # 2 waiting + 2 sent reaches the target of 4
    load.completed()  # one ended: a waiting one runs in its place
    assert dispatch_all(load) == 1
    assert load.snapshot()["held"] is True


async def test_a_server_with_its_queue_at_the_target_is_held_until_one_ends(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    endpoint.text = vllm_text(waiting=1, running=8, kv=0.5)
    load = server_load(client, clock, target_waiting=1)
    await load.read()

    assert not load.may_dispatch()
    load.completed()
    assert dispatch_all(load) == 1


async def test_a_high_kv_cache_takes_only_replacements_and_the_target(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    endpoint.text = vllm_text(waiting=0, running=30, kv=0.9)
    load = server_load(client, clock, target_waiting=1, kv_cache_high=0.9 + GROWTH_ROOM)
    await load.read()

    assert dispatch_all(load) == 1  # it waits at the server: the target queue
    load.completed()
    load.completed()
    assert dispatch_all(load) == 2  # into the blocks the ended two gave back


async def test_a_server_with_room_takes_a_burst_per_read(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    endpoint.text = vllm_text(waiting=0, running=10, kv=0.1)
    load = server_load(client, clock, target_waiting=1, kv_cache_high=0.9 + GROWTH_ROOM)
    await load.read()

    assert dispatch_all(load) == 12  # max(10, 4) + 1 + 1: the KV cache has room for 80 more
    load.completed()
    assert dispatch_all(load) == 1
    assert load.snapshot() == {
        "waiting": 0,
        "running": 10,
        "kv_usage": 0.1,
        "age_s": 0.0,
        "stale": False,
        "held": True,
        "capacity": None,  # the server does not say its size
    }

    endpoint.text = vllm_text(waiting=0, running=23, kv=0.5)
    await load.read()  # a new read starts a new count
    assert dispatch_all(load) == 19  # room for int(0.4 / (0.5 / 23)) = 18 below 0.9, plus 1

    endpoint.text = vllm_text(waiting=0, running=10, kv=0.89)
    await load.read()  # nearly full: the burst shrinks to what fits, not to the doubling rule
    assert dispatch_all(load) == 1


async def test_an_idle_server_takes_the_smallest_burst(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    endpoint.text = vllm_text(waiting=0, running=0, kv=0.0)
    load = server_load(client, clock, target_waiting=2)
    await load.read()
    assert dispatch_all(load) == 7  # 4 + 2 + 1


async def test_a_stale_reading_is_ignored(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    endpoint.text = vllm_text(waiting=50, running=8, kv=1.0)
    load = server_load(client, clock, metrics_stale_s=2.0)
    await load.read()
    assert not load.may_dispatch()

    clock.now += 2.5
    assert load.may_dispatch()
    snapshot = load.snapshot()
    assert snapshot["stale"] is True and snapshot["held"] is False
    assert snapshot["age_s"] == pytest.approx(2.5)
    assert snapshot["waiting"] == 50  # the last reading is still shown, flagged stale


async def test_a_failed_read_keeps_the_last_reading_until_it_is_stale(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    endpoint.text = vllm_text(waiting=5, running=8)
    load = server_load(client, clock, metrics_stale_s=2.0)
    await load.read()
    load.dispatched()

    endpoint.status = 503
    clock.now += 1.0
    assert await load.read() is None
    assert not load.may_dispatch()  # counted since the good read: 5 + 1 waiting
    assert load.dispatched_since == 1
    clock.now += 1.5
    assert load.may_dispatch()


@pytest.mark.parametrize(
    "failure",
    [
        {"refuse": True},
        {"status": 500},
        {"status": 404},
        {"text": "<html>oops</html>"},
    ],
    ids=["refused", "500", "404", "unparseable"],
)
async def test_an_unreadable_endpoint_allows_dispatch(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint, failure: dict[str, Any]
) -> None:
    for name, value in failure.items():
        setattr(endpoint, name, value)
    load = server_load(client, clock)
    assert await load.read() is None
    assert load.reading is None
    assert dispatch_all(load) == 1000


async def test_an_outage_is_logged_once_without_credentials(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    load = server_load(client, clock, url="http://gw:s3cret@vllm-0:8000/metrics?token=t0ken")
    with capture_logs() as logs:
        endpoint.refuse = True
        for _ in range(3):
            await load.read()
        endpoint.refuse = False
        await load.read()
        endpoint.status = 500
        await load.read()
        await load.read()

    assert [(entry["event"], entry["log_level"]) for entry in logs] == [
        ("server_metrics_unreadable", "warning"),
        ("server_metrics_readable", "info"),
        ("server_metrics_unreadable", "warning"),
    ]
    assert [entry.get("error") for entry in logs] == ["ConnectError", None, "status 500"]
    assert {entry["url"] for entry in logs} == {"http://vllm-0:8000/metrics"}
    assert "s3cret" not in repr(logs) and "t0ken" not in repr(logs)


async def test_run_keeps_reading_an_unreadable_endpoint(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    endpoint.refuse = True
    changes = asyncio.Event()
    load = server_load(client, clock, on_change=changes.set, metrics_interval_s=0.001)
    task = asyncio.create_task(load.run())
    try:
        await until(changes, lambda: endpoint.reads >= 3)
        assert not task.done()
        assert load.may_dispatch()

        endpoint.refuse = False
        endpoint.text = vllm_text(waiting=3, running=2)
        await until(changes, lambda: load.reading is not None)
        assert not load.may_dispatch()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def until(changes: asyncio.Event, condition: Callable[[], bool]) -> None:
    """Wait for `on_change` calls until `condition` holds (the timeout only bounds a broken test)."""
    async with asyncio.timeout(10):
        while not condition():
            changes.clear()
            await changes.wait()


# run() against the simulated vLLM over HTTP


@pytest.fixture
def simulator() -> Iterator[str]:
    """The simulated vLLM (two replicas, one sequence running at a time) under uvicorn in a thread."""
    app = create_simulator_app(EngineConfig(max_num_seqs=1, decode_step_s=0.01), replicas=2)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    sock.close()


async def test_run_reads_the_load_a_replica_is_under(simulator: str) -> None:
    base_url = f"{simulator}/r1/v1"
    changes = asyncio.Event()
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        settings = SchedulingSettings(metrics_interval_s=0.01, target_waiting=1)
        load = ServerLoad(metrics_url_for(base_url, None), settings, client, on_change=changes.set)
        task = asyncio.create_task(load.run())
        try:
            await until(changes, lambda: load.reading is not None)
            assert load.snapshot()["waiting"] == 0 and load.may_dispatch()

            body = {"model": "m", "messages": [{"role": "user", "content": "hello " * 50}], "max_tokens": 40}
            requests = [asyncio.create_task(client.post("/chat/completions", json=body)) for _ in range(3)]
            # Requests wait there at two reads running one: that is the server's sequence limit
            await until(changes, lambda: load.capacity.slot_limit == 1)
            snapshot = load.snapshot()
            assert snapshot["running"] == 1 and snapshot["kv_usage"] > 0
            assert snapshot["held"] is True and not load.may_dispatch()

            assert [(await request).status_code for request in requests] == [200, 200, 200]
            await until(changes, lambda: load.snapshot()["running"] == 0 and load.snapshot()["waiting"] == 0)
            assert load.may_dispatch()
            assert (await client.get(f"{simulator}/_sim/stats")).json()["requests_finished"] == 0  # replica 0
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_a_server_that_takes_more_with_room_in_its_cache_is_ramped_faster(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    """What the server holds grows x8 per read while it keeps up (it started more since the read
    before than it has waiting) and its KV cache is used below half of kv_cache_high (sequences
    that share a prefix fill the sequence limit long before the cache); it doubles otherwise: past
    half the cache, or while requests wait there faster than it starts them (held by a sequence
    limit not learned yet, its own queue would grow)."""
    load = server_load(client, clock, kv_cache_high=0.9)
    reads = ((0, 4, 0.1, 2), (2, 10, 0.2, 8), (7, 14, 0.2, 2), (0, 14, 0.2, 2), (0, 20, 0.6, 2))
    for waiting, running, kv, growth in reads:
        endpoint.text = vllm_text(waiting, running, kv) + CACHE_CONFIG + PREEMPTIONS
        await load.read()
        assert dispatch_all(load) == growth * running + 1 - running - waiting, (waiting, running, kv)


async def test_a_server_that_has_not_taken_what_it_was_sent_is_only_doubled(
    client: httpx.AsyncClient, clock: Clock, endpoint: MetricsEndpoint
) -> None:
    """A read taken while a burst is still on its way shows the running count up and nothing
    waiting; that is no sign of room (a server held at four sequences was sent eight times as many
    on it), so what it holds only doubles until it holds what it was sent."""
    load = server_load(client, clock, kv_cache_high=0.9)
    endpoint.text = vllm_text(0, 0, 0.0) + CACHE_CONFIG + PREEMPTIONS
    await load.read()
    assert dispatch_all(load) == 2 * 4 + 1  # an idle server: the smallest burst, doubled

    endpoint.text = vllm_text(0, 1, 0.01) + CACHE_CONFIG + PREEMPTIONS  # 1 of the 9 arrived
    await load.read()
    assert dispatch_all(load) == 2 * 4 + 1 - 1

    endpoint.text = vllm_text(0, 9, 0.05) + CACHE_CONFIG + PREEMPTIONS  # all of them, started
    await load.read()
    assert dispatch_all(load) == 8 * 9 + 1 - 9
