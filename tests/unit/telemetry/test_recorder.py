"""A request's telemetry through the real pipeline, executor and in-process fake provider: with
telemetry on, a SERVER span and a CLIENT span per attempt, and the GenAI metrics; off, no code of
OpenTelemetry (or of gateway.telemetry) runs for a request at all. A job's lines share one trace.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import opentelemetry
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

import gateway.telemetry
from gateway.auth.principal import Principal
from gateway.dispatch.executor import Executor
from gateway.dispatch.httpx_bridge import HttpxUpstream
from gateway.errors import RateLimited
from gateway.limits import MemoryLimiter, Reservations
from gateway.metrics.instruments import Metrics
from gateway.providers.base import Endpoint
from gateway.proxy.exchange import ProxyExchange, ProxyPipeline
from gateway.proxy.service import ProxyService
from gateway.routing.deployment import DeploymentTable
from gateway.routing.health import HealthBoard
from gateway.routing.pins import MemoryPinStore
from gateway.settings import CircuitSettings, RetrySettings
from gateway.telemetry import Telemetry
from gateway.telemetry.recorder import job_context
from mock_upstream.behaviour import MockBehaviour
from mock_upstream.transport import InProcessMockTransport
from tests.support.catalogs import catalog, deployment, model, provider
from tests.unit.proxy.usage_sink import Sink
from tests.unit.routing.catalog import principal

CATALOG = catalog(
    provider("up", base_url="http://up.invalid/v1"),
    models=[model("m", deployment("up", "up-m", price={"input": 1}))],
    retry=RetrySettings(max_attempts=1),
)
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "a private prompt"}]}'
TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@dataclass
class Keys:
    who: Principal

    async def authenticate(self, authorization: str | None) -> Principal:
        return self.who


@dataclass
class Recorded:
    telemetry: Telemetry
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader


def recorded() -> Recorded:
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    meters = MeterProvider(metric_readers=[metrics])
    return Recorded(Telemetry(tracers.get_tracer("test"), meters.get_meter("test")), spans, metrics)


@pytest.fixture
async def pipelines() -> AsyncIterator[Callable[[Telemetry | None], ProxyPipeline]]:
    executors: list[Executor] = []

    def make(telemetry: Telemetry | None) -> ProxyPipeline:
        table = DeploymentTable.from_catalog(CATALOG)
        health = HealthBoard([d.id for d in table.all()], CircuitSettings(failure_threshold=100))
        upstream = HttpxUpstream(InProcessMockTransport(MockBehaviour(prompt_tokens=9, completion_tokens=4)))
        executor = Executor(CATALOG, health, upstream)
        executors.append(executor)
        service = ProxyService(
            table, MemoryPinStore(60), health, executor, Sink(), CATALOG.retry, telemetry=telemetry
        )
        return ProxyPipeline(
            Keys(principal()),  # type: ignore[arg-type]
            MemoryLimiter(),
            service,
            Metrics(),
            100,
            Reservations(table, 4096),
            telemetry=telemetry,
        )

    yield make
    for executor in executors:
        await executor.aclose()


async def send(pipeline: ProxyPipeline, headers: dict[str, str] | None = None) -> str:
    async def body() -> bytes:
        return BODY

    exchange = ProxyExchange()
    await pipeline.run(exchange, headers or {}, body, Endpoint.CHAT)
    return exchange.request_id


OTEL_CODE = (str(Path(opentelemetry.__path__[0])), str(Path(gateway.telemetry.__path__[0])))


async def calls_into_telemetry(run: Callable[[], Any]) -> list[str]:
    """The functions of OpenTelemetry and of gateway.telemetry that run while `run()` is awaited."""
    called: list[str] = []

    def probe(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(OTEL_CODE):
            called.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(probe)
    try:
        await run()
    finally:
        sys.setprofile(None)
    return called


async def test_off_no_telemetry_code_runs_for_a_request(
    pipelines: Callable[[Telemetry | None], ProxyPipeline],
) -> None:
    off, on = pipelines(None), pipelines(recorded().telemetry)
    traced = {"traceparent": f"00-{TRACE}-{PARENT}-01"}
    await send(off, traced), await send(on, traced)  # warm: imports and first-use caches

    async def twenty(pipeline: ProxyPipeline) -> None:
        for _ in range(20):
            await send(pipeline, traced)

    assert await calls_into_telemetry(lambda: twenty(off)) == []
    called_on = await calls_into_telemetry(lambda: twenty(on))
    assert called_on  # the probe sees telemetry when there is some
    print(f"\ncalls into OpenTelemetry for 20 requests: off 0, on {len(called_on)}")


async def test_a_request_is_a_server_span_with_its_attempt_under_the_clients_trace(
    pipelines: Callable[[Telemetry | None], ProxyPipeline],
) -> None:
    record = recorded()
    request_id = await send(pipelines(record.telemetry), {"traceparent": f"00-{TRACE}-{PARENT}-01"})

    server, attempt = sorted(record.spans.get_finished_spans(), key=lambda s: s.kind != SpanKind.SERVER)
    assert server.kind is SpanKind.SERVER and attempt.kind is SpanKind.CLIENT
    assert format_trace_id(server.context.trace_id) == TRACE
    assert server.parent is not None and format_span_id(server.parent.span_id) == PARENT
    assert attempt.parent is not None and attempt.parent.span_id == server.context.span_id
    assert server.attributes is not None and attempt.attributes is not None
    assert server.attributes["gateway.request.id"] == request_id
    assert server.attributes["gen_ai.usage.input_tokens"] == 9
    assert server.attributes["gen_ai.usage.output_tokens"] == 4
    assert attempt.attributes["gen_ai.provider.name"] == "openai"
    assert attempt.attributes["server.address"] == "up.invalid"
    exported = repr([(s.attributes, [e.attributes for e in s.events]) for s in (server, attempt)])
    assert "private prompt" not in exported


async def test_the_token_usage_histogram_counts_each_type(
    pipelines: Callable[[Telemetry | None], ProxyPipeline],
) -> None:
    record = recorded()
    pipeline = pipelines(record.telemetry)
    await send(pipeline), await send(pipeline)

    data = record.metrics.get_metrics_data()
    assert data is not None
    [usage] = [
        metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "gen_ai.client.token.usage"
    ]
    sums = {p.attributes["gen_ai.token.type"]: p.sum for p in usage.data.data_points}  # type: ignore[union-attr, index]
    assert sums == {"input": 18, "output": 8}


async def test_a_request_refused_at_admission_is_a_span_with_its_status(
    pipelines: Callable[[Telemetry | None], ProxyPipeline],
) -> None:
    record = recorded()
    pipeline = pipelines(record.telemetry)
    refusing = dataclasses.replace(pipeline, keys=Keys(principal(team_tpm=1)))  # can never fit

    with pytest.raises(RateLimited):
        await send(refusing)

    [server] = record.spans.get_finished_spans()
    assert server.kind is SpanKind.SERVER and server.attributes is not None
    assert server.attributes["http.response.status_code"] == 429
    assert server.attributes["error.type"] == RateLimited.code
    assert server.status.status_code is StatusCode.UNSET  # a 4xx is the client's, not the server's error


def test_a_jobs_lines_share_a_trace_of_their_own() -> None:
    def trace_of(job_id: str) -> int:
        from opentelemetry.trace import get_current_span

        return get_current_span(job_context(job_id)).get_span_context().trace_id

    assert trace_of("batch_a1") == trace_of("batch_a1")
    assert trace_of("batch_a1") != trace_of("batch_b2")
