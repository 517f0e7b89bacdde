"""The pipeline's admission: what a request reserves, and its reservation given back when no
upstream was reached (an error before dispatch, or a request cancelled while it waited)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from gateway.auth.principal import Principal
from gateway.errors import NoRoute, QuotaExceeded, RateLimited
from gateway.limits import MemoryLimiter, Reservations
from gateway.metrics.instruments import Metrics
from gateway.providers.base import Endpoint
from gateway.proxy.exchange import ProxyExchange, ProxyPipeline
from gateway.proxy.service import ProxyContext
from tests.unit.routing.catalog import TABLE, principal

BODY = b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}'


@dataclass
class Keys:
    who: Principal

    async def authenticate(self, authorization: str | None) -> Principal:
        return self.who


@dataclass
class Proxy:
    """Fails before any upstream is reached: `error`, or waits until cancelled."""

    error: BaseException | None = None
    contexts: list[ProxyContext] | None = None

    def schedule(self, ctx: ProxyContext, priority: Any, prompt_tokens: int, tokens: int) -> None:
        pass

    async def complete(self, ctx: ProxyContext) -> Any:
        (self.contexts if self.contexts is not None else []).append(ctx)
        if self.error is not None:
            raise self.error
        await asyncio.Event().wait()


def pipeline(who: Principal, proxy: Proxy, limiter: MemoryLimiter) -> ProxyPipeline:
    return ProxyPipeline(Keys(who), limiter, proxy, Metrics(), 100, Reservations(TABLE, 4096))  # type: ignore[arg-type]


async def body() -> bytes:
    return BODY


async def run(pipe: ProxyPipeline) -> None:
    await pipe.run(ProxyExchange(), {}, body, Endpoint.CHAT)


async def test_a_request_refused_before_any_upstream_gives_its_tokens_back() -> None:
    who = principal(team_tpm=150)
    limiter = MemoryLimiter()
    pipe = pipeline(who, Proxy(error=NoRoute("nowhere to go")), limiter)

    for _ in range(3):  # each reserves ~120 of 150 tokens: only one would fit if none came back
        with pytest.raises(NoRoute):
            await run(pipe)


async def test_a_request_cancelled_before_any_upstream_gives_its_hold_back() -> None:
    who = principal(team_tpm=150)
    limiter = MemoryLimiter()
    pipe = pipeline(who, Proxy(), limiter)
    waiting = asyncio.ensure_future(run(pipe))
    await asyncio.sleep(0.01)
    with pytest.raises(RateLimited):
        await run(pipeline(who, Proxy(error=NoRoute("x")), limiter))  # the window is held

    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting

    with pytest.raises(NoRoute):
        await run(pipeline(who, Proxy(error=NoRoute("x")), limiter))  # admitted again


async def test_the_request_carries_its_admission_to_the_settle() -> None:
    contexts: list[ProxyContext] = []
    limiter = MemoryLimiter()
    with pytest.raises(NoRoute):
        await run(pipeline(principal(team_budget_usd=Decimal(1)), Proxy(NoRoute("x"), contexts), limiter))

    (ctx,) = contexts
    assert ctx.admission is not None
    assert ctx.admission.reservation.tokens == (len(BODY) + 3) // 4 + 100


async def test_a_zero_budget_refuses_before_anything_is_sent() -> None:
    contexts: list[ProxyContext] = []
    with pytest.raises(QuotaExceeded):
        await run(pipeline(principal(team_budget_usd=Decimal(0)), Proxy(contexts=contexts), MemoryLimiter()))

    assert contexts == []
