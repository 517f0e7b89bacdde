"""Prometheus metrics: one registry per app, reporting the whole process group with several workers.

Every series of the gateway's own is one of prometheus_client's instruments. One worker: they are
in the app's registry, in the process's memory. Several workers (`shared_dir`, the metrics
directory of `gateway serve`, which prometheus_client reads as PROMETHEUS_MULTIPROC_DIR when it is
imported): the library's multiprocess mode keeps each worker's values in files of its own there,
and a scrape, whichever worker answers it, reads every worker's (`gateway.metrics.group`).

The series every request moves (requests, tokens, latency, time to first token) are moved through
label children made once per route and kept (`Route`): a request finds its children in one dict,
where `labels()` would take the library's lock and build a key for each series it moves.

The gauges that describe shared state (circuits, pins, the metering backlog: Redis and the
database) are set by the worker that answers a scrape, and its value is the one reported
(`mostrecent`); those that describe one worker (its queues, what it has in flight) are summed over
the live workers (`livesum`), each publishing its own every second and whenever it answers a scrape.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from gateway.metering.events import UsageEvent
from gateway.metrics.group import GcCounts, ProcessGroupCollector
from gateway.metrics.labels import code_label, endpoint_label
from gateway.routing.directives import Priority
from gateway.scheduling.scheduler import Scheduler

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
_LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
_QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
PUBLISH_INTERVAL_S = 1.0  # how stale another worker's own gauges may be in a scrape


class Reconciled(Protocol):
    """One measure of a reconciled day (a `gateway.reconciliation.comparison.Finding`)."""

    @property
    def day(self) -> date: ...
    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def measure(self) -> str: ...
    @property
    def difference(self) -> Decimal: ...
    @property
    def share(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Route:
    """The children the requests of one (model, provider, status) move."""

    requests: Counter
    prompt_tokens: Counter  # the token children are shared by every route of the model and provider
    completion_tokens: Counter
    cached_tokens: Counter
    latency: Histogram  # shared by every route of the provider
    ttft: Histogram


class Metrics:
    def __init__(self, shared_dir: str | None = None) -> None:
        """`shared_dir`: the metrics directory every worker of this `gateway serve` writes, which
        prometheus_client reads as PROMETHEUS_MULTIPROC_DIR; None for a process on its own."""
        # A counter's `_created` sample would be a family of its own in the text format
        # (`gateway_requests_refused_created`), beside the counter, that no dashboard reads. The
        # switch is the library's, for the whole process: set here, as the app's metrics are made.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.shared = shared_dir is not None
        self._routes: dict[tuple[str, str, int], Route] = {}
        self._queue_wait: dict[tuple[str, str], Histogram] = {}  # by provider and priority class
        self._scheduler: Scheduler | None = None
        self._gc = GcCounts() if self.shared else None
        self.registry = CollectorRegistry(auto_describe=True)
        if shared_dir is None:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        else:
            self.registry.register(ProcessGroupCollector(Path(shared_dir)))
        # in multiprocess mode the library keeps the values in the directory, read by the collector
        registry = None if self.shared else self.registry
        self._request_series(registry)
        self._rare_series(registry)
        self._gauges(registry)

    def _request_series(self, registry: CollectorRegistry | None) -> None:
        self.requests = Counter(
            "gateway_requests",
            "Requests that reached an upstream",
            ["model", "provider", "status"],
            registry=registry,
        )
        self.tokens = Counter(
            "gateway_tokens", "Metered tokens", ["model", "provider", "kind"], registry=registry
        )
        self.latency = Histogram(
            "gateway_request_latency_seconds",
            "End-to-end request latency",
            ["provider"],
            registry=registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.ttft = Histogram(
            "gateway_upstream_ttft_seconds",
            "Upstream time to first byte/token",
            ["provider"],
            registry=registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.overhead = Histogram(
            "gateway_overhead_seconds",
            "Time spent in the gateway itself, upstream excluded",
            registry=registry,
            buckets=_OVERHEAD_BUCKETS,
        )
        self.loop_lag = Histogram(
            "gateway_event_loop_lag_seconds",
            "How late the worker's event loop ran a timer: the time requests wait for its CPU",
            registry=registry,
            buckets=_LOOP_LAG_BUCKETS,
        )
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "Time requests waited for a replica's capacity (0 for those that did not wait)",
            ["provider", "priority"],
            registry=registry,
            buckets=_QUEUE_WAIT_BUCKETS,
        )

    def _rare_series(self, registry: CollectorRegistry | None) -> None:
        self.upstream_errors = Counter(
            "gateway_upstream_errors",
            "Requests that ended in an upstream error",
            ["provider", "code"],
            registry=registry,
        )
        self.requests_shed = Counter(
            "gateway_requests_shed",
            "Requests refused while waiting for capacity, never sent (queue_full, queue_timeout)",
            ["provider", "reason"],
            registry=registry,
        )
        self.requests_refused = Counter(
            "gateway_requests_refused",
            "Requests the gateway answered with an error of its own before any upstream was tried",
            ["endpoint", "status", "code"],
            registry=registry,
        )
        self.idempotent_requests = Counter(
            "gateway_idempotent_requests",
            "Requests with an Idempotency-Key, by what became of them (first, replayed, conflict, "
            "store_unavailable)",
            ["outcome"],
            registry=registry,
        )

    def _gauges(self, registry: CollectorRegistry | None) -> None:
        self.open_circuits = _shared_gauge(
            "gateway_open_circuits", "Deployments with an open circuit", registry
        )
        self.active_pins = _shared_gauge("gateway_active_batch_pins", "Live batch pins", registry)
        self.metering_backlog = _shared_gauge(
            "gateway_metering_backlog", "Usage events buffered, not yet written", registry
        )
        self.metering_oldest_unwritten = _shared_gauge(
            "gateway_metering_oldest_unwritten_seconds",
            "Age of the oldest usage event not yet written (0 when none waits)",
            registry,
        )
        self.usage_dead_letters = _shared_gauge(
            "gateway_usage_dead_letters",
            "Usage events the database refused, kept in usage_dead_letters for an operator",
            registry,
        )
        reconciled = ["provider", "model", "tier", "measure"]
        self.reconciliation_ratio = _shared_gauge(
            "gateway_reconciliation_difference_ratio",
            "A provider's own report less the gateway's records, over the larger of the two, on its "
            "latest reconciled day (measure: input, cached_input, output, cost)",
            registry,
            reconciled,
        )
        self.reconciliation_difference = _shared_gauge(
            "gateway_reconciliation_difference",
            "A provider's own report less the gateway's records on its latest reconciled day "
            "(tokens; USD for cost)",
            registry,
            reconciled,
        )
        self.reconciliation_day = _shared_gauge(
            "gateway_reconciliation_day_timestamp_seconds",
            "The start (UTC) of the latest day reconciled with the provider's own reports",
            registry,
            ["provider"],
        )
        self.queue_depth = _worker_gauge(
            "gateway_queue_depth", "Requests waiting for capacity", ["provider", "priority"], registry
        )
        self.replica_in_flight = _worker_gauge(
            "gateway_replica_in_flight",
            "Requests in flight at the replica",
            ["provider", "replica"],
            registry,
        )
        self.replica_tokens_in_flight = _worker_gauge(
            "gateway_replica_tokens_in_flight",
            "Tokens (prompt + allowed output) in flight at the replica",
            ["provider", "replica"],
            registry,
        )

    def observe_event(self, event: UsageEvent) -> None:
        route = self._routes.get((event.model, event.provider, event.status))
        if route is None:
            route = self._route(event.model, event.provider, event.status)
        route.requests.inc()
        route.prompt_tokens.inc(event.prompt_tokens)
        route.completion_tokens.inc(event.completion_tokens)
        if event.cached_tokens:  # most requests have none: spare the library's lock
            route.cached_tokens.inc(event.cached_tokens)
        route.latency.observe(event.latency_ms / 1000)
        if event.ttft_ms is not None:
            route.ttft.observe(event.ttft_ms / 1000)
        if event.error_code is not None and event.status >= 500:
            self.upstream_errors.labels(event.provider, event.error_code).inc()

    def _route(self, model: str, provider: str, status: int) -> Route:
        route = self._routes[(model, provider, status)] = Route(
            requests=self.requests.labels(model, provider, str(status)),
            prompt_tokens=self.tokens.labels(model, provider, "prompt"),
            completion_tokens=self.tokens.labels(model, provider, "completion"),
            cached_tokens=self.tokens.labels(model, provider, "cached"),
            latency=self.latency.labels(provider),
            ttft=self.ttft.labels(provider),
        )
        return route

    def observe_overhead(self, seconds: float) -> None:
        self.overhead.observe(seconds)

    def observe_queue_wait(self, provider: str, priority: str, seconds: float) -> None:
        child = self._queue_wait.get((provider, priority))
        if child is None:
            child = self._queue_wait[(provider, priority)] = self.queue_wait.labels(provider, priority)
        child.observe(seconds)

    def observe_loop_lag(self, seconds: float) -> None:
        self.loop_lag.observe(seconds)

    def count_refused(self, path: str, status: int, code: str | None) -> None:
        """A request answered with an error of the gateway's own before any upstream was tried."""
        self.requests_refused.labels(endpoint_label(path), str(status), code_label(code)).inc()

    def count_idempotent(self, outcome: str) -> None:
        self.idempotent_requests.labels(outcome).inc()

    def show_reconciliation(self, findings: Iterable[Reconciled]) -> None:
        """Each provider's latest reconciled day (gateway.reconciliation), in place of the last shown."""
        if not self.shared:  # a worker's files keep their series: the newer values replace them
            self.reconciliation_ratio.clear()
            self.reconciliation_difference.clear()
        for finding in findings:
            labels = (finding.provider, finding.model, finding.tier, str(finding.measure))
            self.reconciliation_ratio.labels(*labels).set(finding.share)
            self.reconciliation_difference.labels(*labels).set(float(finding.difference))
            day_start = datetime.combine(finding.day, time.min, UTC).timestamp()
            self.reconciliation_day.labels(finding.provider).set(day_start)

    def watch_scheduler(self, scheduler: Scheduler) -> None:
        """Queue depths and what is in flight at each replica, read from `scheduler` when published."""
        self._scheduler = scheduler

    def publish(self) -> None:
        """This worker's own gauges as they are now (its queues, what it has in flight) and, with
        several workers, its garbage collector's counts."""
        if self._scheduler is not None:
            for name, queue in self._scheduler.providers.items():
                for priority in Priority:
                    self.queue_depth.labels(name, priority.value).set(queue.queued(priority))
                for gate in queue.gates:
                    self.replica_in_flight.labels(name, gate.url).set(gate.in_flight)
                    self.replica_tokens_in_flight.labels(name, gate.url).set(gate.tokens_in_flight)
                for replica in queue.unlimited if not queue.limited else ():
                    self.replica_in_flight.labels(name, replica.url).set(replica.in_flight)
        if self._gc is not None:
            self._gc.publish()

    async def publish_every(self, interval_s: float = PUBLISH_INTERVAL_S) -> None:
        """With several workers: keep this worker's own gauges current for the scrapes that another
        worker answers. Runs until cancelled."""
        while True:
            self.publish()
            await asyncio.sleep(interval_s)

    def render(self, gauges: Callable[[], None] | None = None) -> bytes:
        if gauges is not None:
            gauges()
        self.publish()
        return generate_latest(self.registry)


def _shared_gauge(
    name: str, documentation: str, registry: CollectorRegistry | None, labels: Sequence[str] = ()
) -> Gauge:
    """A gauge of state every worker sees alike, set at scrape time (or when the state changes):
    the value set last, by whichever worker."""
    return Gauge(name, documentation, labels, registry=registry, multiprocess_mode="mostrecent")


def _worker_gauge(
    name: str, documentation: str, labels: list[str], registry: CollectorRegistry | None
) -> Gauge:
    """A gauge of one worker's own state: summed over the workers alive."""
    return Gauge(name, documentation, labels, registry=registry, multiprocess_mode="livesum")
