"""What the proxy service meters from what an upstream did: answers past the response cap, and
counts that cannot be true. The real executor in front of the fake provider (served in-process)
or an httpx.MockTransport answering fixed bodies: the seams where an upstream talks."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import structlog

from gateway.dispatch.executor import Executor
from gateway.dispatch.httpx_bridge import HttpxUpstream
from gateway.errors import UpstreamTooLarge
from gateway.metering.events import UsageEvent, UsageSource
from gateway.providers.base import Endpoint
from gateway.proxy import service as service_module
from gateway.proxy.request import parse_request
from gateway.proxy.service import ProxyContext, ProxyService
from gateway.routing.deployment import DeploymentTable
from gateway.routing.directives import Directives
from gateway.routing.health import HealthBoard
from gateway.routing.pins import MemoryPinStore
from gateway.settings import CircuitSettings, LimitSettings, RetrySettings
from mock_upstream.behaviour import MockBehaviour
from mock_upstream.transport import InProcessMockTransport
from tests.support.catalogs import base_url, catalog, deployment, model, provider
from tests.unit.proxy.usage_sink import Sink
from tests.unit.routing.catalog import principal

CAP = 2048  # bytes of an upstream answer; the fake's answers below are several times that
PRICE = {"input": 1, "output": 2}


@dataclass
class Proxy:
    service: ProxyService
    sink: Sink
    executor: Executor

    def context(self, stream: bool = False, content: str = "what is the weather like") -> ProxyContext:
        body: dict[str, Any] = {"model": "chat", "messages": [{"role": "user", "content": content}]}
        if stream:
            body["stream"] = True
        parsed = parse_request(json.dumps(body).encode(), Endpoint.CHAT, 100)
        return ProxyContext(f"req-{random.random()}", principal(), parsed, Directives())

    async def streamed(self, ctx: ProxyContext) -> list[bytes]:
        relay = self.service.relay(ctx, await self.service.open_stream(ctx))
        try:
            async with contextlib.aclosing(relay.frames()) as frames:
                return [frame async for frame in frames]
        finally:
            await relay.close()

    @property
    def event(self) -> UsageEvent:
        [event] = self.sink.events
        return event


@pytest.fixture
async def proxies() -> AsyncIterator[Callable[..., Proxy]]:
    made: list[Proxy] = []

    def make(transport: httpx.AsyncBaseTransport, kind: str = "openai", cap: int = CAP) -> Proxy:
        up = provider("up", kind, region="us-east", base_url=base_url(kind))
        served = catalog(
            up,
            models=[model("chat", deployment(up, "m", price=PRICE))],
            retry=RetrySettings(max_attempts=1),
            limits=LimitSettings(max_upstream_response_bytes=cap),
        )
        table = DeploymentTable.from_catalog(served)
        health = HealthBoard([d.id for d in table.all()], CircuitSettings(failure_threshold=100))
        executor = Executor(served, health, HttpxUpstream(transport))
        sink = Sink()
        service = ProxyService(table, MemoryPinStore(60), health, executor, sink, served.retry)
        made.append(Proxy(service, sink, executor))
        return made[-1]

    yield make
    for proxy in made:
        await proxy.executor.aclose()


def fake(**behaviour: Any) -> InProcessMockTransport:
    return InProcessMockTransport(MockBehaviour(**behaviour))


# --- answers past the response cap ----------------------------------------------------------------


async def test_an_oversized_answer_is_billed_from_the_bytes_received(proxies: Callable[..., Proxy]) -> None:
    proxy = proxies(fake(completion_tokens=4000))
    ctx = proxy.context()

    with pytest.raises(UpstreamTooLarge):
        await proxy.service.complete(ctx)

    event = proxy.event
    assert (event.status, event.error_code) == (502, "upstream_too_large")
    assert event.usage_source is UsageSource.ESTIMATED
    assert event.completion_tokens == CAP // 4  # at least the cap had arrived, ~4 bytes a token
    assert event.prompt_tokens == (len("what is the weather like") + 3) // 4
    assert event.cost > 0


async def test_a_stream_cut_at_the_cap_is_billed_from_the_bytes_received(
    proxies: Callable[..., Proxy],
) -> None:
    proxy = proxies(fake(completion_tokens=4000, chunks=200))
    ctx = proxy.context(stream=True)

    frames = await proxy.streamed(ctx)

    assert b"upstream_too_large" in frames[-1]  # the client got the error in-band
    event = proxy.event
    assert (event.status, event.error_code) == (502, "upstream_too_large")
    assert event.usage_source is UsageSource.ESTIMATED
    assert event.completion_tokens > CAP // 4
    assert event.cost > 0


async def test_a_stream_past_the_cap_before_its_first_frame_is_billed(proxies: Callable[..., Proxy]) -> None:
    """One event longer than the cap: the stream fails before anything reached the client."""

    def answer(request: httpx.Request) -> httpx.Response:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        chunk["choices"] = [{"index": 0, "delta": {"content": "x" * (2 * CAP)}, "finish_reason": None}]
        body = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    proxy = proxies(httpx.MockTransport(answer))
    ctx = proxy.context(stream=True)

    with pytest.raises(UpstreamTooLarge):
        await proxy.service.open_stream(ctx)

    event = proxy.event
    assert (event.status, event.usage_source) == (502, UsageSource.ESTIMATED)
    assert event.completion_tokens >= CAP // 4
    assert event.cost > 0


async def test_a_stream_cut_at_the_cap_is_billed_from_the_usage_reported_so_far(
    proxies: Callable[..., Proxy],
) -> None:
    """Anthropic reports the prompt's counts in message_start: those are the upstream's own."""
    proxy = proxies(fake(completion_tokens=4000, chunks=200, prompt_tokens=1234), kind="anthropic")
    ctx = proxy.context(stream=True)

    await proxy.streamed(ctx)

    event = proxy.event
    assert (event.status, event.error_code) == (502, "upstream_too_large")
    assert event.usage_source is UsageSource.UPSTREAM
    assert event.prompt_tokens == 1234
    assert event.cost > 0


async def test_an_error_body_past_the_cap_bills_nothing(proxies: Callable[..., Proxy]) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, content=b"x" * (2 * CAP))

    proxy = proxies(httpx.MockTransport(answer))

    with pytest.raises(UpstreamTooLarge):
        await proxy.service.complete(proxy.context())

    assert (proxy.event.usage_source, proxy.event.cost) == (UsageSource.NONE, 0)


# --- counts that cannot be true -------------------------------------------------------------------


def completion_with(usage: dict[str, Any]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": usage,
        }
        return httpx.Response(200, json=body)

    return httpx.MockTransport(answer)


def stream_with(usage: dict[str, Any]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        chunk: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        frames = [
            {**chunk, "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": usage},
        ]
        body = b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames) + b"data: [DONE]\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx.MockTransport(answer)


UNTRUE = [
    {"prompt_tokens": 3_000_000_000, "completion_tokens": 5, "total_tokens": 3_000_000_005},
    {"prompt_tokens": -1_000_000, "completion_tokens": 5, "total_tokens": -999_995},
]


@pytest.mark.parametrize("usage", UNTRUE)
async def test_untrue_counts_are_metered_as_the_gateways_estimate(
    proxies: Callable[..., Proxy], usage: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = proxies(completion_with(usage))
    ctx = proxy.context(content="the secret prompt")

    with structlog.testing.capture_logs() as logs:
        # A fresh logger: the module's may be bound already (cached on first use) by an earlier test.
        monkeypatch.setattr(service_module, "log", structlog.get_logger("gateway.proxy"))
        completed = await proxy.service.complete(ctx)

    assert json.loads(completed.response.body)["usage"]["prompt_tokens"] == usage["prompt_tokens"]  # as sent
    event = proxy.event
    assert (event.status, event.usage_source) == (200, UsageSource.ESTIMATED)
    assert event.prompt_tokens == (len("the secret prompt") + 3) // 4
    assert 0 < event.completion_tokens < 1000
    assert 0 < event.cost < 1
    [warning] = [line for line in logs if line["event"] == "upstream_usage_untrusted"]
    assert warning["request_id"] == ctx.request_id and "prompt_tokens" in warning["reason"]
    assert "secret" not in json.dumps(logs, default=str)


@pytest.mark.parametrize("usage", UNTRUE)
async def test_untrue_counts_in_a_stream_are_metered_as_the_gateways_estimate(
    proxies: Callable[..., Proxy], usage: dict[str, Any]
) -> None:
    proxy = proxies(stream_with(usage))
    ctx = proxy.context(stream=True)

    await proxy.streamed(ctx)

    event = proxy.event
    assert (event.status, event.usage_source) == (200, UsageSource.ESTIMATED)
    assert event.prompt_tokens >= 0 and 0 < event.completion_tokens < 1000
    assert event.cost > 0
