"""The executor: the one owner of the upstream HTTP clients. Sends, retries, streams.

Its clients are given to it where services are wired (`gateway.services`): the network pool
(`http1.UpstreamPool`) and, when the catalog has a `mock` provider, the in-process mock behind
`httpx_bridge`. Both raise only the gateway's own errors. The executor asks a provider adapter to
build each upstream request and to parse what comes back, retries retryable failures on the same
deployment with backoff (honouring `Retry-After` up to a cap), and records each outcome on the
health board (an upstream 429 is retried but never counted against the circuit). An answer past
the response cap raises `UpstreamAnswerTooLarge`, which carries what had arrived, so that the work
the upstream did is metered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypeVar

from gateway.dialects.endpoints import endpoint_adapter
from gateway.dispatch.sse import SSEDecoder
from gateway.dispatch.stream import OpenStream
from gateway.dispatch.upstream import InFlight, Reply, UpstreamClient
from gateway.errors import InvalidRequest, UpstreamError, UpstreamRateLimited, UpstreamTooLarge
from gateway.providers.base import (
    Endpoint,
    ProviderAdapter,
    TokenUsage,
    UpstreamCall,
    UpstreamRequest,
    UpstreamResponse,
)
from gateway.providers.openai.chat_assembly import ChatAssembly
from gateway.routing.deployment import Deployment
from gateway.routing.health import HealthBoard
from gateway.scheduling.gate import Grant
from gateway.scheduling.scheduler import Scheduler
from gateway.scheduling.ticket import UNSCHEDULED, Ticket
from gateway.settings import Catalog, Provider, ProviderKind, RetrySettings

T = TypeVar("T")


class AttemptSpan(Protocol):
    """One traced attempt (`gateway.telemetry.recorder.AttemptSpan`): runs it inside its span."""

    async def run(
        self, once: Callable[[Grant, UpstreamCall], Awaitable[T]], grant: Grant, call: UpstreamCall
    ) -> T: ...


class RequestTracing(Protocol):
    """A request's spans as the executor sees them (`gateway.telemetry.RequestTrace`): declared
    here so that sending knows nothing of OpenTelemetry, which sits above it."""

    def attempt(self, deployment: Deployment, number: int, grant: Grant) -> AttemptSpan | None: ...


class UpstreamAnswerTooLarge(UpstreamTooLarge):
    """A successful answer past the response cap, with what had arrived when reading stopped: the
    bytes, and the usage the upstream had reported by then (a stream's), for metering."""

    def __init__(self, message: str, received_bytes: int, usage: TokenUsage | None) -> None:
        super().__init__(message)
        self.received_bytes = received_bytes
        self.usage = usage


@dataclass(slots=True)
class Attempts:
    """What happened while sending one request: counted for logs, metering and headers."""

    count: int = 0
    upstream_s: float = 0.0  # time spent waiting on the upstream (the gateway's overhead excludes it)
    queue_s: float = 0.0  # time spent waiting for capacity (excluded from the overhead too)
    ttft_s: float | None = None  # to a stream's first frames, or a measured answer's first token
    errors: list[str] = field(default_factory=list)
    trace: RequestTracing | None = None  # the request's spans, while telemetry is on (gateway.telemetry)
    # Awaited once, when the first attempt holds its permit and is built, just before it goes out:
    # a Batch API line writes its run down there, so that a process dying from then on leaves a run
    # to record, and one dying while the line waited for capacity leaves nothing to bill.
    before_send: Callable[[Deployment], Awaitable[None]] | None = None
    replica: str | None = None  # the base URL of the replica the last attempt went to
    job_line: ClassVar[bool] = False  # a Batch API job's line (its throughput is measured by default)


class Executor:
    """Sends requests to deployments through `network`, or through `mock` for the `mock` kind."""

    def __init__(
        self,
        catalog: Catalog,
        health: HealthBoard,
        network: UpstreamClient,
        *,
        mock: UpstreamClient | None = None,
        scheduler: Scheduler | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if mock is None and any(p.kind is ProviderKind.MOCK for p in catalog.providers):
            raise ValueError("The catalog has a mock provider: give the executor its in-process client")
        self._retry = catalog.retry
        self._max_response = catalog.limits.max_upstream_response_bytes
        self._health = health
        self._rng = rng or random.Random()
        self._network = network
        self._mock = mock
        self.scheduler = scheduler or Scheduler(catalog)
        # Resolved once per provider and endpoint, the first time one is asked for.
        self._adapters: dict[tuple[str, Endpoint], ProviderAdapter] = {}

    async def aclose(self) -> None:
        await self.scheduler.aclose()
        await self._network.aclose()
        if self._mock is not None:
            await self._mock.aclose()

    def _client_for(self, provider: Provider) -> UpstreamClient:
        if provider.kind is ProviderKind.MOCK and self._mock is not None:
            return self._mock
        return self._network

    def _build(
        self, deployment: Deployment, call: UpstreamCall, grant: Grant
    ) -> tuple[ProviderAdapter, UpstreamRequest]:
        provider = deployment.provider
        adapter = self._adapters.get((provider.name, call.endpoint))
        if adapter is None:
            adapter = self._adapters[provider.name, call.endpoint] = endpoint_adapter(provider, call.endpoint)
        request = adapter.build_request(call, provider, grant.base_url)
        if call.trace_headers:  # the client's trace context, the same for every provider kind
            request = dataclasses.replace(request, headers=request.headers | call.trace_headers)
        return adapter, request

    async def _open(self, provider: Provider, request: UpstreamRequest) -> Reply:
        return await self._client_for(provider).request(
            request.method,
            request.url,
            request.headers,
            request.content,
            connect_timeout=provider.connect_timeout_s,
            read_timeout=provider.timeout_s,
        )

    async def send(
        self,
        deployment: Deployment,
        call: UpstreamCall,
        attempts: Attempts,
        max_attempts: int,
        ticket: Ticket = UNSCHEDULED,
    ) -> UpstreamResponse:
        """A non-streaming request, retried on this deployment while the failure allows."""

        measured = measures_ttft(deployment.provider, call, attempts.job_line)

        async def once(grant: Grant, call: UpstreamCall) -> UpstreamResponse:
            started = time.perf_counter()
            try:  # a request the adapter refuses to build (a 400) gives its permit back too
                adapter, request = self._build(deployment, as_stream(call) if measured else call, grant)
                if attempts.before_send is not None:  # once per request: a retry is the same run
                    before_send, attempts.before_send = attempts.before_send, None
                    await before_send(deployment)
                with self._in_flight(deployment.id):
                    if measured:
                        body, first_token = await self._assembled(
                            deployment.provider, request, adapter, grant.first_token
                        )
                        attempts.ttft_s = None if first_token is None else first_token - started
                    else:  # the time to the whole answer is no time to a first token: none is known
                        grant.first_token()  # nor will it be: batch work need not wait for it
                        body = await self._exchange(deployment.provider, request, adapter)
                response = adapter.parse_response(call, body)
            except BaseException:
                grant.release()
                raise
            grant.release(response.usage)
            return response

        return await self._retrying(deployment, call, ticket, attempts, max_attempts, once)

    async def _retrying(
        self,
        deployment: Deployment,
        call: UpstreamCall,
        ticket: Ticket,
        attempts: Attempts,
        max_attempts: int,
        once: Callable[[Grant, UpstreamCall], Awaitable[T]],
    ) -> T:
        """Run `once` until it succeeds, fails for good, or the attempts on this deployment run out.

        Each attempt first takes a permit from the scheduler (waiting for one if the replicas are
        at capacity); `once` owns it from then on and releases it when the request has ended.
        Traced, each attempt is a span, and `once` is given the call with its trace context."""
        for attempt in range(1, max_attempts + 1):
            grant = await self.scheduler.enter(deployment.provider, call.cache_key, ticket)
            attempts.queue_s += grant.queue_s
            attempts.count += 1
            attempts.replica = grant.base_url
            span = (
                None if attempts.trace is None else attempts.trace.attempt(deployment, attempts.count, grant)
            )
            started = time.perf_counter()
            try:
                result = await (once(grant, call) if span is None else span.run(once, grant, call))
            except InvalidRequest:
                # The adapter refused to build the request: nothing went upstream, so this was no
                # attempt (no usage record, the caller's reservation released).
                attempts.count -= 1
                raise
            except UpstreamError as exc:
                attempts.upstream_s += time.perf_counter() - started
                attempts.errors.append(exc.code or exc.type)
                if exc.retryable:  # the replica's trouble, not the request's: affinity avoids it
                    self.scheduler.replica_failed(deployment.provider, grant.base_url)
                await self._on_failure(deployment, exc)
                if not exc.retryable or attempt == max_attempts:
                    raise
                await asyncio.sleep(self._backoff(attempt, exc))
                continue
            attempts.upstream_s += time.perf_counter() - started
            self.scheduler.replica_succeeded(deployment.provider, grant.base_url)
            await self._health.record_success(deployment.id)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _in_flight(self, deployment_id: str, grant: Grant | None = None) -> InFlight:
        return InFlight(self._health.in_flight, deployment_id, grant)

    async def exchange(self, provider: Provider, request: UpstreamRequest, adapter: ProviderAdapter) -> bytes:
        """One request outside scheduling, retries and health, for a call that generates nothing
        (the Messages API's count_tokens): its whole body, or the adapter's error for its status."""
        return await self._exchange(provider, request, adapter)

    async def _exchange(
        self, provider: Provider, request: UpstreamRequest, adapter: ProviderAdapter
    ) -> bytes:
        reply = await self._open(provider, request)
        try:
            body = await self._whole_body(reply)
        except UpstreamTooLarge as exc:
            if reply.status >= 400:
                raise
            # Reading stops at the first piece past the cap: at least the cap had arrived.
            raise UpstreamAnswerTooLarge(exc.message, self._max_response, None) from exc
        if reply.status >= 400:
            raise adapter.classify_error(reply.status, body, reply.headers)
        return body

    async def _assembled(
        self,
        provider: Provider,
        request: UpstreamRequest,
        adapter: ProviderAdapter,
        on_first_token: Callable[[], None],
    ) -> tuple[bytes, float | None]:
        """A chat completion streamed from the upstream, assembled into one non-streaming answer,
        and the moment (perf_counter) its first token arrived, if one did (told to `on_first_token`)."""
        reply = await self._open(provider, request)
        if reply.status >= 400:
            body = await self._whole_body(reply)
            raise adapter.classify_error(reply.status, body, reply.headers)
        assembly, decoder = ChatAssembly(), SSEDecoder()
        first_token: float | None = None
        received = 0
        try:
            async for chunk in reply.chunks():
                received += len(chunk)
                if received > self._max_response:
                    raise UpstreamAnswerTooLarge(
                        "The upstream answer exceeds the gateway's size limit", self._max_response, None
                    )
                for data in decoder.feed(chunk):
                    if assembly.feed(data):
                        first_token = time.perf_counter()
                        on_first_token()
            for data in decoder.close():
                assembly.feed(data)
        finally:
            await reply.aclose()
        return assembly.body(), first_token

    async def _whole_body(self, reply: Reply) -> bytes:
        try:
            return await reply.read(self._max_response)
        finally:
            await reply.aclose()

    async def open_stream(
        self,
        deployment: Deployment,
        call: UpstreamCall,
        attempts: Attempts,
        max_attempts: int,
        ticket: Ticket = UNSCHEDULED,
    ) -> OpenStream:
        """Start a stream and read it up to its first frames; failures before then may be retried.
        The stream holds its permit until it is closed."""

        async def once(grant: Grant, call: UpstreamCall) -> OpenStream:
            started = time.perf_counter()
            stream = await self._first_frames(deployment, call, grant)
            attempts.ttft_s = time.perf_counter() - started
            grant.first_token()
            return stream

        return await self._retrying(deployment, call, ticket, attempts, max_attempts, once)

    async def _first_frames(self, deployment: Deployment, call: UpstreamCall, grant: Grant) -> OpenStream:
        in_flight = self._in_flight(deployment.id, grant)
        try:  # a request the adapter refuses to build (a 400) gives its permit back too
            adapter, request = self._build(deployment, call, grant)
            reply = await self._open(deployment.provider, request)
        except BaseException:
            in_flight.release()
            raise
        if reply.status >= 400:
            with in_flight:
                body = await self._whole_body(reply)
            raise adapter.classify_error(reply.status, body, reply.headers)
        stream = OpenStream(deployment, adapter.stream_translator(call), reply, in_flight, self._max_response)
        try:
            await stream.read_first_frames()
        except UpstreamTooLarge as exc:
            await stream.close()
            raise UpstreamAnswerTooLarge(exc.message, stream.received, stream.translator.usage) from exc
        except BaseException:
            await stream.close()
            raise
        return stream

    async def _on_failure(self, deployment: Deployment, exc: UpstreamError) -> None:
        # A 429 says the deployment is busy, not broken: counting it would open the circuit of a
        # healthy upstream and move traffic (and new batches) off it at the moment it asks for less.
        if exc.retryable and not isinstance(exc, UpstreamRateLimited):
            await self._health.record_failure(deployment.id)

    def _backoff(self, attempt: int, exc: UpstreamError) -> float:
        if exc.retry_after_s is not None:
            return min(exc.retry_after_s, self._retry.retry_after_cap_s)
        return backoff_delay(self._retry, attempt, self._rng)


def measures_ttft(provider: Provider, call: UpstreamCall, job_line: bool = False) -> bool:
    """Whether a non-streaming request is streamed from the upstream to see its first token: a chat
    completion, at a provider that measures (`Provider.measures_ttft`), unless logprobs are wanted
    (not assembled)."""
    return (
        provider.measures_ttft(job_line)
        and not call.stream
        and call.endpoint is Endpoint.CHAT
        and not call.body.get("logprobs")
    )


def as_stream(call: UpstreamCall) -> UpstreamCall:
    """The call as a stream with usage (the adapter adds `stream_options.include_usage`)."""
    return dataclasses.replace(call, body={**call.body, "stream": True}, stream=True, client_wants_usage=True)


def backoff_delay(retry: RetrySettings, attempt: int, rng: random.Random) -> float:
    """Exponential backoff with full jitter between half and all of the step."""
    step = min(retry.backoff_max_s, retry.backoff_base_s * 2.0 ** (attempt - 1))
    return float(step * (0.5 + rng.random() / 2))
