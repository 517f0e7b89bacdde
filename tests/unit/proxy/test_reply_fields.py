"""What a proxied reply tells the client, through the pipeline, the service and the real executor in
front of an `httpx.MockTransport` upstream: the alias as `model`, the upstream's model and the cost
in headers, the cost equal to the usage record's; the client's X-Request-ID on the record and the
log line; its traceparent sent upstream on every attempt, for every provider kind."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
import pytest

from gateway.auth.principal import Principal
from gateway.dispatch.executor import Executor
from gateway.dispatch.httpx_bridge import HttpxUpstream
from gateway.errors import UpstreamRejected
from gateway.limits import MemoryLimiter, Reservations
from gateway.metering.events import UsageEvent
from gateway.metrics.instruments import Metrics
from gateway.providers.base import Endpoint
from gateway.proxy import service as service_module
from gateway.proxy.exchange import ProxyExchange, ProxyPipeline, ProxyResult
from gateway.proxy.service import ProxyService
from gateway.routing.deployment import DeploymentTable
from gateway.routing.health import HealthBoard
from gateway.routing.pins import MemoryPinStore
from gateway.settings import CircuitSettings, RetrySettings
from tests.support.catalogs import base_url, catalog, deployment, model, provider
from tests.unit.proxy.usage_sink import Sink
from tests.unit.routing.catalog import principal

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
PRICE = {"input": "0.02", "output": "0.06"}  # USD / 1M: a few tokens cost less than 1e-6
RETRY = RetrySettings(max_attempts=2, backoff_base_s=0.001, backoff_max_s=0.001)
USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def openai_answer(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    head = {"id": "c", "created": 1, "model": body["model"] + "-2025-01-01"}
    choice = {"index": 0, "finish_reason": "stop", "logprobs": None}
    if not body.get("stream"):
        message = {"role": "assistant", "content": "ok"}
        reply = {**head, "object": "chat.completion", "choices": [{**choice, "message": message}]}
        return httpx.Response(200, json={**reply, "usage": USAGE})
    frames = [
        {**head, "object": "chat.completion.chunk", "choices": [{**choice, "delta": {"content": "ok"}}]},
        {**head, "object": "chat.completion.chunk", "choices": [], "usage": USAGE},
    ]
    sse = b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames) + b"data: [DONE]\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse)


def anthropic_answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "up-model-1",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 7, "output_tokens": 3},
        },
    )


@dataclass
class Upstream:
    """Answers as `answer` does, after failing the first `failures` requests with a 503."""

    answer: Callable[[httpx.Request], httpx.Response]
    failures: int = 0
    seen: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if len(self.seen) <= self.failures:
            return httpx.Response(503, json={"error": {"message": "busy"}})
        return self.answer(request)


@dataclass
class Keys:
    who: Principal

    async def authenticate(self, authorization: str | None) -> Principal:
        return self.who


@dataclass
class Gateway:
    pipeline: ProxyPipeline
    sink: Sink
    executor: Executor
    lines: list[dict[str, Any]]

    async def run(self, headers: dict[str, str], **body: Any) -> ProxyResult:
        raw = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}], **body}).encode()

        async def read() -> bytes:
            return raw

        return await self.pipeline.run(ProxyExchange(), headers, read, Endpoint.CHAT)

    @property
    def event(self) -> UsageEvent:
        [event] = self.sink.events
        return event


@pytest.fixture
async def gateways(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[..., Gateway]]:
    made: list[Gateway] = []
    lines: list[dict[str, Any]] = []
    monkeypatch.setattr(service_module, "log_request", lines.append)  # the log line's seam

    def make(upstream: Upstream, kind: str = "openai") -> Gateway:
        up = provider("up", kind, base_url=base_url(kind))
        served = catalog(up, models=[model("chat", deployment(up, "up-model-1", price=PRICE))], retry=RETRY)
        table = DeploymentTable.from_catalog(served)
        health = HealthBoard([d.id for d in table.all()], CircuitSettings(failure_threshold=100))
        executor = Executor(served, health, HttpxUpstream(httpx.MockTransport(upstream)))
        sink = Sink()
        service = ProxyService(table, MemoryPinStore(60), health, executor, sink, served.retry)
        keys = Keys(principal())
        pipeline = ProxyPipeline(keys, MemoryLimiter(), service, Metrics(), 100, Reservations(table))  # type: ignore[arg-type]
        made.append(Gateway(pipeline, sink, executor, lines))
        return made[-1]

    yield make
    for gateway in made:
        await gateway.executor.aclose()


async def test_an_answer_names_the_alias_and_carries_the_records_cost(
    gateways: Callable[..., Gateway],
) -> None:
    gateway = gateways(Upstream(openai_answer))

    result = await gateway.run({})

    document = json.loads(result.body)
    assert document["model"] == "chat"
    assert result.headers["x-gateway-upstream-model"] == "up-model-1"
    event = gateway.event
    assert event.cost == Decimal("0.00000032")  # 7 x 0.02 + 3 x 0.06, per million
    assert document["usage"]["cost"] == result.headers["x-gateway-cost"] == format(event.cost, "f")


async def test_a_stream_names_the_alias_and_its_usage_chunk_carries_the_records_cost(
    gateways: Callable[..., Gateway],
) -> None:
    gateway = gateways(Upstream(openai_answer))

    result = await gateway.run({}, stream=True, stream_options={"include_usage": True})
    assert result.stream is not None
    frames = [frame async for frame in result.stream.frames()]
    await result.stream.close()

    assert result.headers["x-gateway-upstream-model"] == "up-model-1"
    assert "x-gateway-cost" not in result.headers  # sent before the cost is known
    events = [json.loads(e[len(b"data: ") :]) for e in b"".join(frames).split(b"\n\n") if e[6:7] == b"{"]
    assert [e["model"] for e in events] == ["chat", "chat"]
    assert events[-1]["usage"]["cost"] == format(gateway.event.cost, "f") == "0.00000032"


async def test_the_client_request_id_is_on_the_record_and_the_log_line_and_the_gateways_id_answers(
    gateways: Callable[..., Gateway],
) -> None:
    gateway = gateways(Upstream(openai_answer))

    result = await gateway.run({"x-request-id": "job-7/line-12", "traceparent": TRACEPARENT})

    assert gateway.event.client_request_id == "job-7/line-12"
    assert result.headers["x-request-id"] == gateway.event.request_id != "job-7/line-12"
    [line] = gateway.lines
    assert line["client_request_id"] == "job-7/line-12"
    assert line["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"


async def test_without_ids_the_record_and_line_have_none(gateways: Callable[..., Gateway]) -> None:
    gateway = gateways(Upstream(openai_answer))

    await gateway.run({"x-request-id": "x" * 129, "traceparent": "00-bad"})

    assert gateway.event.client_request_id is None
    [line] = gateway.lines
    assert (line["client_request_id"], line["trace_id"]) == (None, None)


@pytest.mark.parametrize(
    ("kind", "answer"), [("openai", openai_answer), ("azure", openai_answer), ("anthropic", anthropic_answer)]
)
async def test_the_trace_context_goes_upstream_on_every_attempt(
    gateways: Callable[..., Gateway], kind: str, answer: Callable[[httpx.Request], httpx.Response]
) -> None:
    upstream = Upstream(answer, failures=1)
    gateway = gateways(upstream, kind)

    await gateway.run({"traceparent": TRACEPARENT, "tracestate": "rojo=00f067aa0ba902b7"})

    assert len(upstream.seen) == 2  # the 503, then the retry
    for request in upstream.seen:
        assert request.headers["traceparent"] == TRACEPARENT
        assert request.headers["tracestate"] == "rojo=00f067aa0ba902b7"


async def test_an_invalid_traceparent_is_not_sent_upstream(gateways: Callable[..., Gateway]) -> None:
    upstream = Upstream(openai_answer)
    gateway = gateways(upstream)

    await gateway.run({"traceparent": TRACEPARENT.replace("-01", "-01-more"), "tracestate": "rojo=1"})

    [request] = upstream.seen
    assert "traceparent" not in request.headers and "tracestate" not in request.headers


async def test_an_upstream_error_names_the_upstream_model(gateways: Callable[..., Gateway]) -> None:
    def refusing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "no", "type": "invalid_request_error"}})

    gateway = gateways(Upstream(refusing))

    with pytest.raises(UpstreamRejected) as refused:
        await gateway.run({})

    assert refused.value.headers["x-gateway-upstream-model"] == "up-model-1"
    assert "x-gateway-cost" not in refused.value.headers
