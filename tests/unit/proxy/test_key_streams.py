"""The streams a key may have in flight at one process: refused past the bound before anything is
sent, and counted from admission until the relay closes (or the request fails before it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.auth.principal import Principal
from gateway.errors import NoRoute, TooManyStreams
from gateway.limits import MemoryLimiter, Reservations
from gateway.metrics.instruments import Metrics
from gateway.providers.base import Endpoint
from gateway.proxy.exchange import ProxyExchange, ProxyPipeline
from gateway.proxy.relay import KeyStreams
from gateway.proxy.service import ProxyContext
from tests.unit.routing.catalog import TABLE, principal

STREAM = b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": true}'


@dataclass
class Keys:
    who: Principal

    async def authenticate(self, authorization: str | None) -> Principal:
        return self.who


@dataclass
class Proxy:
    """Every stream fails before its first byte, as a request with nowhere to go does."""

    opened: list[ProxyContext] = field(default_factory=list)

    def schedule(self, ctx: ProxyContext, priority: Any, prompt_tokens: int, tokens: int) -> None:
        pass

    async def open_stream(self, ctx: ProxyContext) -> Any:
        self.opened.append(ctx)
        raise NoRoute("nowhere to go")


async def stream_body() -> bytes:
    return STREAM


def pipeline(proxy: Proxy, streams: KeyStreams, who: Principal | None = None) -> ProxyPipeline:
    keys = Keys(who or principal())
    return ProxyPipeline(keys, MemoryLimiter(), proxy, Metrics(), 100, Reservations(TABLE, 4096), streams)  # type: ignore[arg-type]


def test_a_key_past_its_bound_is_refused_with_a_retry_after() -> None:
    streams = KeyStreams(limit=2)
    held = [streams.open("key-1"), streams.open("key-1")]

    with pytest.raises(TooManyStreams) as refused:
        streams.open("key-1")

    assert (refused.value.status, refused.value.code) == (429, "too_many_streams")
    assert refused.value.headers["retry-after"] == "1"
    other = streams.open("key-2")  # another key has a bound of its own
    held[0].release()
    held[0].release()  # idempotent: gives back one place, not two
    streams.open("key-1")
    assert (streams.in_flight("key-1"), streams.in_flight("key-2")) == (2, 1)
    other.release()
    assert streams.in_flight("key-2") == 0


async def test_a_stream_refused_past_the_bound_never_reaches_the_proxy() -> None:
    proxy, streams = Proxy(), KeyStreams(limit=1)
    held = streams.open("key-1")  # a stream of this key being relayed

    with pytest.raises(TooManyStreams):
        await pipeline(proxy, streams).run(ProxyExchange(), {}, stream_body, Endpoint.CHAT)

    assert proxy.opened == []
    held.release()


async def test_a_stream_that_fails_before_its_relay_gives_its_place_back() -> None:
    proxy, streams = Proxy(), KeyStreams(limit=1)
    pipe = pipeline(proxy, streams)

    for _ in range(3):  # with the place kept, the second would be refused
        with pytest.raises(NoRoute):
            await pipe.run(ProxyExchange(), {}, stream_body, Endpoint.CHAT)

    assert len(proxy.opened) == 3
    assert streams.in_flight("key-1") == 0
