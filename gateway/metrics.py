"""Prometheus metrics: one registry per app.

The series every request moves (requests, tokens, latency, time to first token, overhead) are
plain numbers that the event loop adds to, without prometheus_client's lock per increment and
its bucket scan per observation; a collector turns them into Prometheus families when `/metrics`
is scraped. Everything that runs in a worker runs on its one event loop thread, so there is no
concurrent writer. The rare series (upstream errors) and the gauges set at scrape time stay
prometheus_client's own.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gateway.metering.events import UsageEvent
from gateway.routing.directives import Priority
from gateway.scheduling.scheduler import Scheduler

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
_LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
_QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)


class Buckets:
    """One histogram series: a count per bucket (the last one +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "les", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.les: list[str] = [floatToGoString(b) for b in (*bounds, float("inf"))]  # type: ignore[no-untyped-call]
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bound >= value: `le` semantics
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        total, buckets = 0, []
        for le, count in zip(self.les, self.counts, strict=True):
            total += count
            buckets.append((le, float(total)))
        return buckets


@dataclass(slots=True)
class Route:
    """What the requests of one (model, provider, status) moved."""

    latency: Buckets  # shared by every route of the provider
    ttft: Buckets
    requests: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._routes: dict[tuple[str, str, int], Route] = {}
        self._latency: dict[str, Buckets] = {}  # by provider
        self._ttft: dict[str, Buckets] = {}
        self.overhead = Buckets(_OVERHEAD_BUCKETS)
        self.loop_lag = Buckets(_LOOP_LAG_BUCKETS)
        self._queue_wait: dict[tuple[str, str], Buckets] = {}  # by provider and priority class
        self.registry.register(_RequestSeriesCollector(self))
        self.upstream_errors = Counter(
            "gateway_upstream_errors",
            "Requests that ended in an upstream error",
            ["provider", "code"],
            registry=self.registry,
        )
        self.open_circuits = Gauge(
            "gateway_open_circuits", "Deployments with an open circuit", registry=self.registry
        )
        self.active_pins = Gauge("gateway_active_batch_pins", "Live batch pins", registry=self.registry)
        self.metering_backlog = Gauge(
            "gateway_metering_backlog", "Usage events buffered, not yet written", registry=self.registry
        )
        self.metering_oldest_unwritten = Gauge(
            "gateway_metering_oldest_unwritten_seconds",
            "Age of the oldest usage event not yet written (0 when none waits)",
            registry=self.registry,
        )
        self.requests_shed = Counter(
            "gateway_requests_shed",
            "Requests refused while waiting for capacity, never sent (queue_full, queue_timeout)",
            ["provider", "reason"],
            registry=self.registry,
        )
        self.usage_dead_letters = Gauge(
            "gateway_usage_dead_letters",
            "Usage events the database refused, kept in usage_dead_letters for an operator",
            registry=self.registry,
        )

    def observe_event(self, event: UsageEvent) -> None:
        route = self._routes.get((event.model, event.provider, event.status))
        if route is None:
            route = self._route(event.model, event.provider, event.status)
        route.requests += 1
        route.prompt += event.prompt_tokens
        route.completion += event.completion_tokens
        route.cached += event.cached_tokens
        route.latency.observe(event.latency_ms / 1000)
        if event.ttft_ms is not None:
            route.ttft.observe(event.ttft_ms / 1000)
        if event.error_code is not None and event.status >= 500:
            self.upstream_errors.labels(event.provider, event.error_code).inc()

    def _route(self, model: str, provider: str, status: int) -> Route:
        latency = self._latency.setdefault(provider, Buckets(_LATENCY_BUCKETS))
        ttft = self._ttft.setdefault(provider, Buckets(_LATENCY_BUCKETS))
        route = self._routes[(model, provider, status)] = Route(latency, ttft)
        return route

    def observe_overhead(self, seconds: float) -> None:
        self.overhead.observe(seconds)

    def observe_queue_wait(self, provider: str, priority: str, seconds: float) -> None:
        buckets = self._queue_wait.get((provider, priority))
        if buckets is None:
            buckets = self._queue_wait[(provider, priority)] = Buckets(_QUEUE_WAIT_BUCKETS)
        buckets.observe(seconds)

    def watch_scheduler(self, scheduler: Scheduler) -> None:
        """Queue depths and what is in flight at each replica, read from `scheduler` at scrape time."""
        self.registry.register(_SchedulerCollector(scheduler))

    def observe_loop_lag(self, seconds: float) -> None:
        self.loop_lag.observe(seconds)

    def render(self, gauges: Callable[[], None] | None = None) -> bytes:
        if gauges is not None:
            gauges()
        return generate_latest(self.registry)

    def families(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "gateway_requests", "Requests that reached an upstream", labels=["model", "provider", "status"]
        )
        tokens: dict[tuple[str, str, str], int] = {}  # by model and provider, whatever the status
        for (model, provider, status), route in list(self._routes.items()):
            requests.add_metric([model, provider, str(status)], route.requests)
            for kind, count in (
                ("prompt", route.prompt),
                ("completion", route.completion),
                ("cached", route.cached),
            ):
                tokens[(model, provider, kind)] = tokens.get((model, provider, kind), 0) + count
        yield requests
        by_kind = CounterMetricFamily(
            "gateway_tokens", "Metered tokens", labels=["model", "provider", "kind"]
        )
        for labels, count in tokens.items():
            by_kind.add_metric(list(labels), count)
        yield by_kind
        yield _histogram("gateway_request_latency_seconds", "End-to-end request latency", self._latency)
        yield _histogram("gateway_upstream_ttft_seconds", "Upstream time to first byte/token", self._ttft)
        overhead = HistogramMetricFamily(
            "gateway_overhead_seconds", "Time spent in the gateway itself, upstream excluded"
        )
        overhead.add_metric([], self.overhead.cumulative(), self.overhead.sum)
        yield overhead
        lag = HistogramMetricFamily(
            "gateway_event_loop_lag_seconds",
            "How late the worker's event loop ran a timer: the time requests wait for its CPU",
        )
        lag.add_metric([], self.loop_lag.cumulative(), self.loop_lag.sum)
        yield lag
        wait = HistogramMetricFamily(
            "gateway_queue_wait_seconds",
            "Time requests waited for a replica's capacity (0 for those that did not wait)",
            labels=["provider", "priority"],
        )
        for (provider, priority), buckets in list(self._queue_wait.items()):
            wait.add_metric([provider, priority], buckets.cumulative(), buckets.sum)
        yield wait


@dataclass(frozen=True)
class _SchedulerCollector(Collector):
    scheduler: Scheduler

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "gateway_queue_depth", "Requests waiting for capacity", labels=["provider", "priority"]
        )
        in_flight = GaugeMetricFamily(
            "gateway_replica_in_flight", "Requests this process has in flight", labels=["provider", "replica"]
        )
        tokens = GaugeMetricFamily(
            "gateway_replica_tokens_in_flight",
            "Tokens (prompt + allowed output) this process has in flight",
            labels=["provider", "replica"],
        )
        for name, queue in self.scheduler.providers.items():
            for priority in Priority:
                depth.add_metric([name, priority.value], queue.queued(priority))
            for gate in queue.gates:
                in_flight.add_metric([name, gate.url], gate.in_flight)
                tokens.add_metric([name, gate.url], gate.tokens_in_flight)
            for replica in queue.unlimited if not queue.limited else ():
                in_flight.add_metric([name, replica.url], replica.in_flight)
        yield depth
        yield in_flight
        yield tokens


def _histogram(name: str, documentation: str, by_provider: dict[str, Buckets]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=["provider"])
    for provider, buckets in list(by_provider.items()):
        family.add_metric([provider], buckets.cumulative(), buckets.sum)
    return family


@dataclass(frozen=True)
class _RequestSeriesCollector(Collector):
    """Hands the registry the series `Metrics` counts itself, when `/metrics` is scraped."""

    metrics: Metrics

    def collect(self) -> Iterator[Metric]:
        return self.metrics.families()
