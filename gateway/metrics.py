"""Prometheus metrics: one registry per app, observed on the hot path with label children cached."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.metering.events import UsageEvent

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "gateway_requests",
            "Requests that reached an upstream",
            ["model", "provider", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gateway_request_latency_seconds",
            "End-to-end request latency",
            ["provider"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ttft = Histogram(
            "gateway_upstream_ttft_seconds",
            "Upstream time to first byte/token",
            ["provider"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.overhead = Histogram(
            "gateway_overhead_seconds",
            "Time spent in the gateway itself, upstream excluded",
            buckets=_OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "gateway_tokens", "Metered tokens", ["model", "provider", "kind"], registry=self.registry
        )
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
        self._children = lru_cache(maxsize=4096)(self._label_children)

    def _label_children(self, model: str, provider: str, status: int) -> tuple[object, ...]:
        return (
            self.requests.labels(model, provider, str(status)),
            self.latency.labels(provider),
            self.tokens.labels(model, provider, "prompt"),
            self.tokens.labels(model, provider, "completion"),
            self.tokens.labels(model, provider, "cached"),
            self.ttft.labels(provider),
        )

    def observe_event(self, event: UsageEvent) -> None:
        requests, latency, prompt, completion, cached, ttft = self._children(
            event.model, event.provider, event.status
        )
        requests.inc()  # type: ignore[attr-defined]
        latency.observe(event.latency_ms / 1000)  # type: ignore[attr-defined]
        if event.prompt_tokens:
            prompt.inc(event.prompt_tokens)  # type: ignore[attr-defined]
        if event.completion_tokens:
            completion.inc(event.completion_tokens)  # type: ignore[attr-defined]
        if event.cached_tokens:
            cached.inc(event.cached_tokens)  # type: ignore[attr-defined]
        if event.ttft_ms is not None:
            ttft.observe(event.ttft_ms / 1000)  # type: ignore[attr-defined]
        if event.error_code is not None and event.status >= 500:
            self.upstream_errors.labels(event.provider, event.error_code).inc()

    def observe_overhead(self, seconds: float) -> None:
        self.overhead.observe(seconds)

    def render(self, gauges: Callable[[], None] | None = None) -> bytes:
        if gauges is not None:
            gauges()
        return generate_latest(self.registry)
