"""`Metrics` in worker processes sharing one metrics directory: a scrape in any of them sums what
every worker counted, takes a shared gauge once, sums per-worker gauges over the live workers only,
and names each live worker's process metrics by pid.

Real processes, as `gateway serve` runs its workers: prometheus_client chooses its multiprocess
mode when imported, from PROMETHEUS_MULTIPROC_DIR.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import REPO

# A worker: counts what its arguments say, then waits for a line on stdin: `count MODEL N` counts
# N more requests for MODEL, `scrape` prints the exposition it renders, anything else (or the end
# of stdin) ends it.
WORKER = """
import sys
from decimal import Decimal
from gateway.metering.events import UsageEvent, UsageSource
from gateway.metrics.instruments import Metrics

metrics = Metrics(sys.argv[1])

def observe(model, requests):
    for i in range(requests):
        metrics.observe_event(UsageEvent(
            request_id=f"req_{i}", created_at=0.0, team_id="t", key_id="k", model=model,
            provider="up", region="r", deployment="up/chat", upstream_model="u",
            endpoint="chat/completions", status=200, prompt_tokens=10, completion_tokens=2,
            usage_source=UsageSource.UPSTREAM, cost=Decimal(0), uncached_cost=Decimal(0),
            latency_ms=40.0,
        ))

requests, refused = int(sys.argv[2]), int(sys.argv[3])
observe("chat", requests)
for _ in range(refused):
    metrics.count_refused("/v1/chat/completions", 401, "invalid_api_key")
metrics.open_circuits.set(3)  # the same shared state, seen alike by every worker
metrics.queue_depth.labels("up", "batch").set(2)  # this worker's own queue
print("ready", flush=True)
for line in sys.stdin:
    command = line.split()
    if command[:1] == ["count"]:  # count MODEL REQUESTS
        observe(command[1], int(command[2]))
        print("counted", flush=True)
    elif command == ["scrape"]:
        sys.stdout.write(metrics.render().decode() + "\\n.\\n")
        sys.stdout.flush()
    else:
        break
"""

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Worker:
    def __init__(self, directory: Path, requests: int, refused: int) -> None:
        env = os.environ | {"PROMETHEUS_MULTIPROC_DIR": str(directory)}
        command = [sys.executable, "-c", WORKER, str(directory), str(requests), str(refused)]
        self.process = subprocess.Popen(
            command, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None and self.process.stdout.readline() == "ready\n"
        self.pid = self.process.pid

    def scrape(self) -> Series:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("scrape\n")
        self.process.stdin.flush()
        lines = []
        while (line := self.process.stdout.readline()) != ".\n":
            assert line, "the worker ended"
            lines.append(line)
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families("".join(lines))
            for sample in family.samples
        }

    def count(self, model: str, requests: int) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"count {model} {requests}\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline() == "counted\n"

    def end(self) -> None:
        """Ends as a worker ends when told to: on its own, with its files closed."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Worker]]:
    """Three workers for the module (the last test stops one)."""
    directory = tmp_path_factory.mktemp("metrics")
    started = [Worker(directory, 5, 1), Worker(directory, 7, 2), Worker(directory, 0, 0)]
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()


def pids(series: Series, name: str) -> set[str]:
    return {dict(labels)["pid"] for sample, labels in series if sample == name}


def test_any_worker_scraped_reports_every_workers_counts(workers: list[Worker]) -> None:
    for worker in workers:  # the third counted nothing itself
        series = worker.scrape()
        assert (
            series[("gateway_requests_total", (("model", "chat"), ("provider", "up"), ("status", "200")))]
            == 12
        )
        assert (
            series[("gateway_tokens_total", (("kind", "prompt"), ("model", "chat"), ("provider", "up")))]
            == 120
        )
        assert series[("gateway_request_latency_seconds_count", (("provider", "up"),))] == 12
        assert series[("gateway_request_latency_seconds_bucket", (("le", "0.025"), ("provider", "up")))] == 0
        assert series[("gateway_request_latency_seconds_bucket", (("le", "0.05"), ("provider", "up")))] == 12
        refused = (("code", "invalid_api_key"), ("endpoint", "chat/completions"), ("status", "401"))
        assert series[("gateway_requests_refused_total", refused)] == 3


def test_shared_state_is_reported_once_and_a_workers_own_summed(workers: list[Worker]) -> None:
    series = workers[0].scrape()
    assert series[("gateway_open_circuits", ())] == 3  # not 9
    assert series[("gateway_queue_depth", (("priority", "batch"), ("provider", "up")))] == 6


def test_each_live_workers_process_is_reported_by_pid(workers: list[Worker]) -> None:
    series = workers[1].scrape()
    expected = {str(w.pid) for w in workers}
    assert pids(series, "process_resident_memory_bytes") == expected
    assert pids(series, "process_cpu_seconds_total") == expected
    assert pids(series, "process_open_fds") == expected
    assert all(value > 0 for (name, _), value in series.items() if name == "process_start_time_seconds")
    assert len([name for name, _ in series if name == "python_info"]) == 1
    collections = series[("python_gc_collections_total", (("generation", "0"),))]
    assert collections >= 1  # summed over the workers, each at least one young collection in


def test_a_dead_workers_counts_stay_and_its_own_gauges_go(workers: list[Worker]) -> None:
    gone = workers[1]
    gone.stop()
    series = workers[2].scrape()
    assert (
        series[("gateway_requests_total", (("model", "chat"), ("provider", "up"), ("status", "200")))] == 12
    )
    assert series[("gateway_queue_depth", (("priority", "batch"), ("provider", "up")))] == 4
    assert str(gone.pid) not in pids(series, "process_resident_memory_bytes")
    assert pids(series, "process_resident_memory_bytes") == {str(workers[0].pid), str(workers[2].pid)}


def test_a_workers_counts_are_never_lost_when_another_answers(tmp_path: Path) -> None:
    """Series another worker made after this one started, moved between its scrapes, and kept once
    that worker has ended."""
    scraping, counting = Worker(tmp_path, 0, 0), Worker(tmp_path, 0, 0)
    late = ("gateway_requests_total", (("model", "late"), ("provider", "up"), ("status", "200")))
    tokens = ("gateway_tokens_total", (("kind", "completion"), ("model", "late"), ("provider", "up")))
    try:
        assert late not in scraping.scrape()
        counting.count("late", 3)
        assert scraping.scrape()[late] == 3
        counting.count("late", 2)
        series = scraping.scrape()
        assert series[late] == 5
        assert series[tokens] == 10
        counting.end()
        series = scraping.scrape()
        assert series[late] == 5
        assert series[tokens] == 10
        assert series[("gateway_request_latency_seconds_count", (("provider", "up"),))] == 5
    finally:
        scraping.stop()
        counting.stop()
