"""Prometheus metrics: one registry per app, reporting the whole process group with several workers.

The series every request moves (requests, tokens, latency, time to first token, overhead, queue
wait, loop lag) are numbers the event loop adds to in a `SeriesStore` (`gateway.metrics.store`),
without prometheus_client's lock per increment and its bucket scan per observation. One worker:
`families` turns them into Prometheus families when `/metrics` is scraped. Several workers
(`shared_dir`, the metrics directory of `gateway serve`): each worker's numbers are in files of its
own, and a scrape, whichever worker answers it, reads every worker's (`gateway.metrics.group`).
Everything that runs in a worker runs on its one event loop thread: there is no concurrent writer.

The rare series (upstream errors, shed and refused requests) and the gauges are prometheus_client's
own, which keeps them in the same directory in its multiprocess mode. The gauges that describe
shared state (circuits, pins, the metering backlog: Redis and the database) are set by the worker
that answers a scrape, and its value is the one reported (`mostrecent`); those that describe one
worker (its queues, what it has in flight) are summed over the live workers (`livesum`), each
publishing its own every second and whenever it answers a scrape.
"""

from __future__ import annotations

import asyncio
import os
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gateway.metering.events import UsageEvent
from gateway.metrics.group import GcCounts, ProcessGroupCollector, series_file
from gateway.metrics.labels import code_label, endpoint_label
from gateway.metrics.store import LocalSeries, SeriesFile, SeriesStore
from gateway.routing.directives import Priority
from gateway.scheduling.scheduler import Scheduler

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
_LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
_QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
PUBLISH_INTERVAL_S = 1.0  # how stale another worker's own gauges may be in a scrape

# (name, help) of the series kept in the store, as both the families and the files name them
REQUESTS = ("gateway_requests", "Requests that reached an upstream")
TOKENS = ("gateway_tokens", "Metered tokens")
LATENCY = ("gateway_request_latency_seconds", "End-to-end request latency")
TTFT = ("gateway_upstream_ttft_seconds", "Upstream time to first byte/token")
OVERHEAD = ("gateway_overhead_seconds", "Time spent in the gateway itself, upstream excluded")
LOOP_LAG = (
    "gateway_event_loop_lag_seconds",
    "How late the worker's event loop ran a timer: the time requests wait for its CPU",
)
QUEUE_WAIT = (
    "gateway_queue_wait_seconds",
    "Time requests waited for a replica's capacity (0 for those that did not wait)",
)


class Buckets:
    """One histogram series: a count per bucket (the last one +Inf) and the sum, in slots of a store."""

    __slots__ = ("bounds", "les", "slots", "store", "sum_slot")

    def __init__(
        self,
        store: SeriesStore,
        bounds: tuple[float, ...],
        family: tuple[str, str],
        labels: dict[str, str] | None = None,
    ) -> None:
        name, documentation = family
        labels = labels or {}
        self.store = store
        self.bounds = bounds
        self.les: list[str] = [floatToGoString(b) for b in (*bounds, float("inf"))]  # type: ignore[no-untyped-call]
        self.slots = [
            store.slot(name, f"{name}_bucket", labels | {"le": le}, documentation) for le in self.les
        ]
        self.sum_slot = store.slot(name, f"{name}_sum", labels, documentation)

    def observe(self, value: float) -> None:
        values = self.store.values
        values[self.slots[bisect_left(self.bounds, value)]] += 1  # the first bound >= value: `le` semantics
        values[self.sum_slot] += value

    @property
    def sum(self) -> float:
        return self.store.values[self.sum_slot]

    def cumulative(self) -> list[tuple[str, float]]:
        values = self.store.values
        total, buckets = 0.0, []
        for le, slot in zip(self.les, self.slots, strict=True):
            total += values[slot]
            buckets.append((le, total))
        return buckets


@dataclass(frozen=True, slots=True)
class Tokens:
    """The slots of one (model, provider)'s metered tokens, whatever the requests' status."""

    prompt: int
    completion: int
    cached: int


@dataclass(frozen=True, slots=True)
class Route:
    """Where the requests of one (model, provider, status) are counted."""

    requests: int  # a slot of the counters
    tokens: Tokens  # shared by every route of the model and provider
    latency: Buckets  # shared by every route of the provider
    ttft: Buckets


class Metrics:
    def __init__(self, shared_dir: str | None = None) -> None:
        """`shared_dir`: the metrics directory every worker of this `gateway serve` writes, which
        prometheus_client reads as PROMETHEUS_MULTIPROC_DIR; None for a process on its own."""
        # A counter's `_created` sample would be a family of its own in the text format
        # (`gateway_requests_refused_created`), beside the counter, that no dashboard reads. The
        # switch is the library's, for the whole process: set here, as the app's metrics are made.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.shared = shared_dir is not None
        self._counters, self._histograms = _stores(shared_dir)
        self._routes: dict[tuple[str, str, int], Route] = {}
        self._tokens: dict[tuple[str, str], Tokens] = {}
        self._latency: dict[str, Buckets] = {}  # by provider
        self._ttft: dict[str, Buckets] = {}
        self._queue_wait: dict[tuple[str, str], Buckets] = {}  # by provider and priority class
        self.overhead = Buckets(self._histograms, _OVERHEAD_BUCKETS, OVERHEAD)
        self.loop_lag = Buckets(self._histograms, _LOOP_LAG_BUCKETS, LOOP_LAG)
        self._scheduler: Scheduler | None = None
        self._gc = GcCounts(self._counters) if self.shared else None
        self.registry = CollectorRegistry(auto_describe=True)
        if shared_dir is None:
            self.registry.register(_RequestSeriesCollector(self))
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        else:
            self.registry.register(ProcessGroupCollector(Path(shared_dir)))
        # in multiprocess mode the library keeps these metrics' values in the directory
        self._library_series(None if self.shared else self.registry)

    def _library_series(self, registry: CollectorRegistry | None) -> None:
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
        counts = self._counters.values
        tokens = route.tokens
        counts[route.requests] += 1
        counts[tokens.prompt] += event.prompt_tokens
        counts[tokens.completion] += event.completion_tokens
        counts[tokens.cached] += event.cached_tokens
        route.latency.observe(event.latency_ms / 1000)
        if event.ttft_ms is not None:
            route.ttft.observe(event.ttft_ms / 1000)
        if event.error_code is not None and event.status >= 500:
            self.upstream_errors.labels(event.provider, event.error_code).inc()

    def _route(self, model: str, provider: str, status: int) -> Route:
        labels = {"model": model, "provider": provider}
        tokens = self._tokens.get((model, provider))
        if tokens is None:
            tokens = self._tokens[(model, provider)] = Tokens(
                prompt=self._counter_slot(TOKENS, labels | {"kind": "prompt"}),
                completion=self._counter_slot(TOKENS, labels | {"kind": "completion"}),
                cached=self._counter_slot(TOKENS, labels | {"kind": "cached"}),
            )
        latency = self._latency.get(provider)
        if latency is None:
            latency = self._latency[provider] = Buckets(
                self._histograms, _LATENCY_BUCKETS, LATENCY, {"provider": provider}
            )
        ttft = self._ttft.get(provider)
        if ttft is None:
            ttft = self._ttft[provider] = Buckets(
                self._histograms, _LATENCY_BUCKETS, TTFT, {"provider": provider}
            )
        requests = self._counter_slot(REQUESTS, labels | {"status": str(status)})
        route = self._routes[(model, provider, status)] = Route(requests, tokens, latency, ttft)
        return route

    def _counter_slot(self, family: tuple[str, str], labels: dict[str, str]) -> int:
        name, documentation = family
        return self._counters.slot(name, f"{name}_total", labels, documentation)

    def observe_overhead(self, seconds: float) -> None:
        self.overhead.observe(seconds)

    def observe_queue_wait(self, provider: str, priority: str, seconds: float) -> None:
        buckets = self._queue_wait.get((provider, priority))
        if buckets is None:
            labels = {"provider": provider, "priority": priority}
            buckets = self._queue_wait[(provider, priority)] = Buckets(
                self._histograms, _QUEUE_WAIT_BUCKETS, QUEUE_WAIT, labels
            )
        buckets.observe(seconds)

    def observe_loop_lag(self, seconds: float) -> None:
        self.loop_lag.observe(seconds)

    def count_refused(self, path: str, status: int, code: str | None) -> None:
        """A request answered with an error of the gateway's own before any upstream was tried."""
        self.requests_refused.labels(endpoint_label(path), str(status), code_label(code)).inc()

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

    def families(self) -> Iterator[Metric]:
        """The store's series of a process on its own, as Prometheus families."""
        counts = self._counters.values
        requests = CounterMetricFamily(*REQUESTS, labels=["model", "provider", "status"])
        for (model, provider, status), route in list(self._routes.items()):
            requests.add_metric([model, provider, str(status)], counts[route.requests])
        yield requests
        tokens = CounterMetricFamily(*TOKENS, labels=["model", "provider", "kind"])
        for (model, provider), slots in list(self._tokens.items()):
            for kind, slot in (
                ("prompt", slots.prompt),
                ("completion", slots.completion),
                ("cached", slots.cached),
            ):
                tokens.add_metric([model, provider, kind], counts[slot])
        yield tokens
        yield _histogram(LATENCY, ["provider"], [((p,), b) for p, b in list(self._latency.items())])
        yield _histogram(TTFT, ["provider"], [((p,), b) for p, b in list(self._ttft.items())])
        yield _histogram(OVERHEAD, [], [((), self.overhead)])
        yield _histogram(LOOP_LAG, [], [((), self.loop_lag)])
        yield _histogram(QUEUE_WAIT, ["provider", "priority"], list(self._queue_wait.items()))


def _stores(shared_dir: str | None) -> tuple[SeriesStore, SeriesStore]:
    """The counters' and the histograms' numbers: in this process, or in this worker's files."""
    if shared_dir is None:
        return LocalSeries(), LocalSeries()
    directory, pid = Path(shared_dir), os.getpid()
    return SeriesFile(series_file(directory, "counter", pid)), SeriesFile(
        series_file(directory, "histogram", pid)
    )


def _shared_gauge(name: str, documentation: str, registry: CollectorRegistry | None) -> Gauge:
    """A gauge of state every worker sees alike, set at scrape time: the scraped worker's value."""
    return Gauge(name, documentation, registry=registry, multiprocess_mode="mostrecent")


def _worker_gauge(
    name: str, documentation: str, labels: list[str], registry: CollectorRegistry | None
) -> Gauge:
    """A gauge of one worker's own state: summed over the workers alive."""
    return Gauge(name, documentation, labels, registry=registry, multiprocess_mode="livesum")


def _histogram(
    family: tuple[str, str], labels: list[str], series: Iterable[tuple[tuple[str, ...], Buckets]]
) -> HistogramMetricFamily:
    histogram = HistogramMetricFamily(*family, labels=labels)
    for values, buckets in series:
        histogram.add_metric(list(values), buckets.cumulative(), buckets.sum)
    return histogram


@dataclass(frozen=True)
class _RequestSeriesCollector(Collector):
    """Hands the registry the series `Metrics` counts itself, when `/metrics` is scraped."""

    metrics: Metrics

    def collect(self) -> Iterator[Metric]:
        return self.metrics.families()
