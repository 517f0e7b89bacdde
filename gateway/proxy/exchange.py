"""One proxied request from its headers and body to the answer's parts: `ProxyPipeline.run`.

Run by the ASGI front (`gateway.api.front.proxy`), which serves every proxied request. The pipeline
is built where services are wired (`gateway.services`).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from gateway.auth.key_cache import KeyCache
from gateway.auth.principal import Principal
from gateway.dialects.responses.adapter import dropped_tools_header
from gateway.dispatch.stream import OpenStream
from gateway.errors import GatewayError, QueueFull, QueueTimeout
from gateway.limits import Limiter, Reservation, Reservations
from gateway.metrics.instruments import Metrics
from gateway.providers.base import Endpoint
from gateway.proxy.correlation import read_correlation
from gateway.proxy.relay import FrameSource, KeyStreams
from gateway.proxy.request import parse_request
from gateway.proxy.service import Completed, ProxyContext, ProxyService
from gateway.routing.deployment import Deployment
from gateway.routing.directives import parse_directives
from gateway.schemas.responses import ResponsesRequest
from gateway.settings import LimitSettings
from gateway.telemetry import Telemetry

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class RequestIds:
    """`req_` + 16 random hex digits drawn once per process + a counter: unique across processes and
    restarts like a random id, without a `getrandom` call per request. A forked child draws anew."""

    def __init__(self) -> None:
        self.draw()

    def draw(self) -> None:
        self._prefix = "req_" + os.urandom(8).hex()
        self._counter = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):x}"


new_request_id = RequestIds()
os.register_at_fork(after_in_child=new_request_id.draw)


def gateway_headers(
    request_id: str, deployment: Deployment, overhead_s: float, queue_s: float
) -> dict[str, str]:
    return {
        "x-request-id": request_id,
        "x-gateway-provider": deployment.provider.name,
        "x-gateway-region": deployment.region,
        "x-gateway-upstream-model": deployment.upstream_model,
        "x-gateway-overhead-ms": f"{overhead_s * 1000:.3f}",
        "x-gateway-queue-ms": f"{queue_s * 1000:.3f}",
    }


def queue_header(queue_s: float) -> dict[str, str]:
    """How long a request waited for capacity, on an error reply too."""
    return {"x-gateway-queue-ms": f"{queue_s * 1000:.3f}"}


def _authorization(headers: Mapping[str, str], endpoint: Endpoint) -> str | None:
    """The bearer credential; the Messages API's clients (the `anthropic` SDK) send theirs as
    `x-api-key`."""
    authorization = headers.get("authorization")
    if authorization is None and endpoint is Endpoint.MESSAGES:
        api_key = headers.get("x-api-key")
        return None if api_key is None else f"Bearer {api_key}"
    return authorization


@dataclass(slots=True)
class ProxyExchange:
    """Who and what one proxied request is, as far as it got: error replies and logs read it."""

    request_id: str = field(default_factory=new_request_id)
    principal: Principal | None = None


@dataclass(frozen=True, slots=True)
class ProxyResult:
    headers: dict[str, str]
    body: bytes = b""
    # an SSE stream instead of a body: a StreamRelay, or a keyed stream (gateway.idempotency)
    stream: FrameSource | None = None
    status: int = 200  # another only for a kept error replayed (gateway.idempotency)


@dataclass(frozen=True, slots=True)
class ProxyPipeline:
    """Authenticate, read the body, parse, admit, then proxy: what every front runs for a proxied
    request."""

    keys: KeyCache
    limiter: Limiter
    proxy: ProxyService
    metrics: Metrics
    max_messages: int
    reservations: Reservations  # what admission reserves for a request (gateway.limits.reservation)
    # the streams each key has in flight at this process (limits.max_streams_per_key)
    streams: KeyStreams = field(default_factory=lambda: KeyStreams(LimitSettings().max_streams_per_key))
    telemetry: Telemetry | None = None  # traces and GenAI metrics (gateway.telemetry); None: off

    async def run(
        self,
        exchange: ProxyExchange,
        headers: Mapping[str, str],
        read_body: Callable[[], Awaitable[bytes]],
        endpoint: Endpoint,
    ) -> ProxyResult:
        """One proxied request, from its headers (lower-case names) and body to the answer's parts.

        The key is checked from the headers before `read_body` is awaited: a request refused for
        its key costs no upload, and the client is never told to send its body (`100 Continue`)."""
        principal = exchange.principal = await self.authenticate(headers, endpoint)
        return await self.answer(exchange, headers, principal, await read_body(), endpoint)

    async def authenticate(self, headers: Mapping[str, str], endpoint: Endpoint) -> Principal:
        """The caller's key, checked (what `run` does first), for a front that needs the team
        before it runs the request (an idempotent one, gateway.idempotency)."""
        return await self.keys.authenticate(_authorization(headers, endpoint))

    async def answer(
        self,
        exchange: ProxyExchange,
        headers: Mapping[str, str],
        principal: Principal,
        raw: bytes,
        endpoint: Endpoint,
    ) -> ProxyResult:
        """The request of an authenticated `principal`, from its body on: parse, admit, proxy."""
        parsed = parse_request(raw, endpoint, self.max_messages)
        directives = parse_directives(headers, parsed.gateway_object)
        allowed = self.reservations.tokens(len(raw), parsed.max_output_tokens, parsed.choices)
        reservation = (
            Reservation()  # nothing binds this caller: nothing to hold back
            if principal.unlimited
            else self.reservations.priced(parsed.model, allowed, parsed.service_tier)
        )
        correlation = read_correlation(headers)
        trace = None
        if self.telemetry is not None:  # off: nothing of OpenTelemetry is made for a request
            trace = self.telemetry.request(exchange.request_id, principal, parsed, directives, correlation)
        try:
            admission = await self.limiter.admit(principal, reservation)
        except BaseException as exc:
            if trace is not None:
                trace.fail(exc)
            raise
        ctx = ProxyContext(
            exchange.request_id,
            principal,
            parsed,
            directives,
            admission=admission,
            correlation=correlation,
            anthropic_beta=headers.get("anthropic-beta") if endpoint is Endpoint.MESSAGES else None,
        )
        self.proxy.schedule(
            ctx,
            directives.priority_class,
            allowed.prompt_tokens,
            allowed.prompt_tokens + allowed.completion_tokens,
        )
        ctx.trace_with(trace)
        outcome: OpenStream | Completed
        slot = None  # a stream's place among its key's streams in flight, until its relay closes
        try:
            if parsed.stream:
                slot = self.streams.open(principal.key_id)  # past the key's bound: 429, nothing sent
                outcome = await self.proxy.open_stream(ctx)
            else:
                outcome = await self.proxy.complete(ctx)
        except BaseException as exc:  # a cancelled request too: its reservation must not linger
            if slot is not None:
                slot.release()
            if isinstance(exc, GatewayError):
                exc.headers = admission.headers | queue_header(ctx.attempts.queue_s) | exc.headers
                if ctx.deployment is not None:  # routed: where it was to be served
                    exc.headers["x-gateway-upstream-model"] = ctx.deployment.upstream_model
            if isinstance(exc, (QueueFull, QueueTimeout)) and ctx.deployment is not None:
                self.metrics.requests_shed.labels(ctx.deployment.provider.name, exc.code).inc()
            if trace is not None:  # ended here unless its usage event ended it
                trace.fail(exc)
            if ctx.attempts.count == 0:  # never reached an upstream: no usage event will settle it
                await self.limiter.release(principal, admission)
            raise
        overhead = time.perf_counter() - ctx.started - ctx.attempts.upstream_s - ctx.attempts.queue_s
        self.metrics.observe_overhead(overhead)  # a stream's: up to its first frames
        answer = gateway_headers(exchange.request_id, outcome.deployment, overhead, ctx.attempts.queue_s)
        if isinstance(parsed.typed, ResponsesRequest) and parsed.typed.tools:  # built-in tools left out
            answer |= dropped_tools_header(parsed.typed, outcome.deployment.provider)
        if isinstance(outcome, OpenStream):
            relay = self.proxy.relay(ctx, outcome)
            relay.slot = slot
            return ProxyResult(answer | SSE_HEADERS | admission.headers, stream=relay)
        if outcome.cost is not None:  # (a stream's headers go out before its cost is known)
            answer["x-gateway-cost"] = outcome.cost
        return ProxyResult(answer | admission.headers, body=outcome.response.body)
