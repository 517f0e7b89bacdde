"""Requests metered without upstream counts, on every endpoint: an answer without usage and a
stream the client leaves are billed from the gateway's estimate (the prompt from the request's
text, the completion from what the answer held), marked estimated, never free.

The real executor in front of the fake provider served in-process: the seam where an upstream talks.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
import pytest

from gateway.dispatch.executor import Executor
from gateway.dispatch.httpx_bridge import HttpxUpstream
from gateway.metering.events import UsageEvent, UsageSource
from gateway.providers.base import Endpoint, estimated_tokens
from gateway.proxy.request import parse_request
from gateway.proxy.service import ProxyContext, ProxyService
from gateway.routing.deployment import DeploymentTable
from gateway.routing.directives import Directives
from gateway.routing.health import HealthBoard
from gateway.routing.pins import MemoryPinStore
from gateway.settings import CircuitSettings, RetrySettings
from mock_upstream.behaviour import MockBehaviour
from mock_upstream.transport import InProcessMockTransport
from tests.support.catalogs import base_url, catalog, deployment, model, provider
from tests.unit.proxy.usage_sink import Sink
from tests.unit.routing.catalog import principal

PROMPT = "the quarterly report, paragraph after paragraph. " * 200  # ~10 KB: ~2,500 tokens
PROMPT_TOKENS = estimated_tokens(len(PROMPT.encode()))
PRICE = {"input": 1, "output": 2}
# (provider kind, responses_api): how an endpoint is served there
OPENAI, OPENAI_NATIVE, ANTHROPIC = ("openai", "chat"), ("openai", "native"), ("anthropic", "auto")


def body(endpoint: Endpoint, stream: bool = False) -> dict[str, Any]:
    """A request whose whole prompt is PROMPT, in the endpoint's wire format."""
    message = [{"role": "user", "content": PROMPT}]
    fields: dict[Endpoint, dict[str, Any]] = {
        Endpoint.CHAT: {"messages": message},
        Endpoint.COMPLETIONS: {"prompt": PROMPT},
        Endpoint.EMBEDDINGS: {"input": PROMPT},
        Endpoint.RESPONSES: {"input": PROMPT},
        Endpoint.MESSAGES: {"messages": message, "max_tokens": 64},
    }
    return {"model": "m", **fields[endpoint], **({"stream": True} if stream else {})}


@dataclass
class Proxy:
    service: ProxyService
    sink: Sink
    executor: Executor

    def context(self, endpoint: Endpoint, stream: bool = False) -> ProxyContext:
        parsed = parse_request(msgspec.json.encode(body(endpoint, stream)), endpoint, 100)
        return ProxyContext(f"req-{random.random()}", principal(), parsed, Directives())

    @property
    def event(self) -> UsageEvent:
        [event] = self.sink.events
        return event


@pytest.fixture
async def proxies() -> AsyncIterator[Callable[..., Proxy]]:
    made: list[Proxy] = []

    def make(
        served_as: tuple[str, str], transport: httpx.AsyncBaseTransport | None = None, **behaviour: Any
    ) -> Proxy:
        """A proxy in front of `transport`, else of the fake provider with this behaviour."""
        kind, responses_api = served_as
        up = provider("up", kind, region="us-east", base_url=base_url(kind), responses_api=responses_api)
        served = catalog(
            up, models=[model("m", deployment(up, "up-m", price=PRICE))], retry=RetrySettings(max_attempts=1)
        )
        table = DeploymentTable.from_catalog(served)
        health = HealthBoard([d.id for d in table.all()], CircuitSettings(failure_threshold=100))
        transport = transport or InProcessMockTransport(MockBehaviour(**behaviour))
        executor = Executor(served, health, HttpxUpstream(transport))
        sink = Sink()
        service = ProxyService(table, MemoryPinStore(60), health, executor, sink, served.retry)
        made.append(Proxy(service, sink, executor))
        return made[-1]

    yield make
    for proxy in made:
        await proxy.executor.aclose()


WITHOUT_USAGE = [
    (Endpoint.CHAT, OPENAI),
    (Endpoint.CHAT, ANTHROPIC),
    (Endpoint.COMPLETIONS, OPENAI),
    (Endpoint.EMBEDDINGS, OPENAI),
    (Endpoint.RESPONSES, OPENAI_NATIVE),
    (Endpoint.RESPONSES, OPENAI),
    (Endpoint.RESPONSES, ANTHROPIC),
    (Endpoint.MESSAGES, OPENAI),
    (Endpoint.MESSAGES, ANTHROPIC),
]


@pytest.mark.parametrize(("endpoint", "served_as"), WITHOUT_USAGE)
async def test_an_answer_without_usage_is_billed_from_the_estimate(
    proxies: Callable[..., Proxy], endpoint: Endpoint, served_as: tuple[str, str]
) -> None:
    proxy = proxies(served_as, omit_usage=True, completion_tokens=40)

    completed = await proxy.service.complete(proxy.context(endpoint))

    event = proxy.event
    assert (event.status, event.usage_source) == (200, UsageSource.ESTIMATED)
    assert event.prompt_tokens == PROMPT_TOKENS
    if endpoint is Endpoint.EMBEDDINGS:
        assert event.completion_tokens == 0  # a vector is no output to bill
    else:  # the answer's words (~6 bytes each), not its envelope
        assert 0 < event.completion_tokens < 100
    assert event.cost > 0
    assert completed.cost is None  # the reply says no cost it does not know


STREAMED = [
    (Endpoint.CHAT, OPENAI),
    (Endpoint.COMPLETIONS, OPENAI),
    (Endpoint.RESPONSES, OPENAI_NATIVE),
    (Endpoint.RESPONSES, OPENAI),
    (Endpoint.MESSAGES, OPENAI),
]


async def _abandon(proxy: Proxy, ctx: ProxyContext, frames_read: int) -> None:
    """Read a few frames of the stream, then leave, as a client that closes its connection."""
    relay = proxy.service.relay(ctx, await proxy.service.open_stream(ctx))
    try:
        async with contextlib.aclosing(relay.frames()) as frames:
            async for _ in frames:
                frames_read -= 1
                if frames_read == 0:
                    break
    finally:
        await relay.close()


@pytest.mark.parametrize(("endpoint", "served_as"), STREAMED)
async def test_an_abandoned_stream_bills_its_whole_prompt(
    proxies: Callable[..., Proxy], endpoint: Endpoint, served_as: tuple[str, str]
) -> None:
    """The usage would have come at the end: the stream is billed the prompt and what it sent."""
    proxy = proxies(served_as, completion_tokens=400, chunks=200)

    await _abandon(proxy, proxy.context(endpoint, stream=True), frames_read=8)

    event = proxy.event
    assert (event.status, event.error_code) == (499, "client_disconnected")
    assert event.usage_source is UsageSource.ESTIMATED
    assert event.prompt_tokens == PROMPT_TOKENS
    assert 0 < event.completion_tokens < 200
    assert event.cost > 0


@pytest.mark.parametrize(
    ("endpoint", "served_as"),
    [*STREAMED, (Endpoint.CHAT, ANTHROPIC), (Endpoint.RESPONSES, ANTHROPIC), (Endpoint.MESSAGES, ANTHROPIC)],
)
async def test_a_stream_without_usage_is_billed_from_the_estimate(
    proxies: Callable[..., Proxy], endpoint: Endpoint, served_as: tuple[str, str]
) -> None:
    proxy = proxies(served_as, omit_usage=True, completion_tokens=40)
    ctx = proxy.context(endpoint, stream=True)

    relay = proxy.service.relay(ctx, await proxy.service.open_stream(ctx))
    try:
        async with contextlib.aclosing(relay.frames()) as frames:
            [frame async for frame in frames]
    finally:
        await relay.close()

    event = proxy.event
    assert (event.status, event.usage_source) == (200, UsageSource.ESTIMATED)
    assert event.prompt_tokens == PROMPT_TOKENS
    assert event.completion_tokens > 0 and event.cost > 0


def answering(document: dict[str, Any]) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(200, json=document))


UNTRUE = [
    (
        Endpoint.RESPONSES,
        OPENAI_NATIVE,
        {"id": "resp_1", "object": "response", "status": "completed", "model": "up-m",
         "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": "Fine.", "annotations": []}]}],
         "usage": {"input_tokens": -5, "output_tokens": 2, "total_tokens": -3}},
    ),
    (
        Endpoint.MESSAGES,
        ANTHROPIC,
        {"id": "msg_1", "type": "message", "role": "assistant", "model": "up-m", "stop_reason": "end_turn",
         "content": [{"type": "text", "text": "Fine."}], "usage": {"input_tokens": 2**40, "output_tokens": 2}},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("endpoint", "served_as", "answer"), UNTRUE)
async def test_counts_that_cannot_be_true_are_replaced_by_the_whole_prompts_estimate(
    proxies: Callable[..., Proxy], endpoint: Endpoint, served_as: tuple[str, str], answer: dict[str, Any]
) -> None:
    proxy = proxies(served_as, transport=answering(answer))

    await proxy.service.complete(proxy.context(endpoint))

    event = proxy.event
    assert (event.usage_source, event.prompt_tokens) == (UsageSource.ESTIMATED, PROMPT_TOKENS)
    assert event.completion_tokens == estimated_tokens(len("Fine."))
    assert event.cost > 0
