"""What one request leaves in OpenTelemetry: its SERVER span, a CLIENT span per upstream attempt
(whose context is the `traceparent` the upstream receives), each wait for capacity as an event, and
the GenAI client metrics once its usage event is known.

Nothing here reads a prompt or an answer: spans and metrics carry counts, names and ids only.
The proxy holds a `RequestTrace` only while telemetry is on (`ProxyContext.attempts.trace`); off,
none is made and each point that would call it is one `is None` test.
"""

from __future__ import annotations

import dataclasses
import hashlib
from asyncio import CancelledError
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from opentelemetry.context import Context
from opentelemetry.metrics import Histogram, Meter
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    format_trace_id,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway.auth.principal import Principal
from gateway.errors import GatewayError
from gateway.metering.events import UsageEvent, UsageSource
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.routing.deployment import Deployment
from gateway.routing.directives import Directives
from gateway.scheduling.gate import Grant
from gateway.telemetry import conventions as sc

T = TypeVar("T")
Attributes = dict[str, AttributeValue]


class TracedRequest(Protocol):
    """What a trace reads of a parsed request (`gateway.proxy.request.ParsedRequest`); declared
    here so that telemetry sits below the proxy that calls it."""

    @property
    def endpoint(self) -> Endpoint: ...
    @property
    def model(self) -> str: ...
    @property
    def stream(self) -> bool: ...
    @property
    def max_output_tokens(self) -> int | None: ...
    @property
    def choices(self) -> int: ...


class TracedCorrelation(Protocol):
    """The client's trace context and request id (`gateway.proxy.correlation.Correlation`)."""

    @property
    def upstream_headers(self) -> dict[str, str] | None: ...
    @property
    def client_request_id(self) -> str | None: ...


_PROPAGATOR = TraceContextTextMapPropagator()  # W3C traceparent/tracestate, read and written
# the buckets the GenAI conventions advise for token counts and for durations in seconds
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
SECONDS_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


def job_context(job_id: str) -> Context:
    """The trace of a Batch API job: its id and its root's span id derived from the job's id, so
    that every line of the job, in whichever process and run sends it, is a child in one trace.
    The root itself is not exported (a job outlives any one process): tools show the lines under
    a root they never received."""
    digest = hashlib.sha256(f"gateway.batch-job\x00{job_id}".encode()).digest()
    root = SpanContext(
        int.from_bytes(digest[:16]),
        int.from_bytes(digest[16:24]),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return set_span_in_context(NonRecordingSpan(root))


def _error_type(exc: BaseException) -> str:
    if isinstance(exc, GatewayError):
        return exc.code or exc.type
    return type(exc).__name__


def _fail(span: Span, exc: BaseException, *, server: bool = False) -> None:
    """The error's kind and status on a span, and the span ended; never the error's text, which
    may quote the request. A SERVER span is in error for a 5xx only (the HTTP conventions: a 4xx
    is the client's), a CLIENT span for any failure."""
    span.set_attribute(sc.ERROR, _error_type(exc))
    status = exc.status if isinstance(exc, GatewayError) else 499 if isinstance(exc, CancelledError) else 500
    span.set_attribute(sc.HTTP_STATUS, status)
    if not server or status >= 500:
        span.set_status(Status(StatusCode.ERROR))
    span.end()


def _milliseconds(seconds: float) -> float:
    return round(seconds * 1_000_000) / 1000


class GenAiInstruments:
    """The GenAI client metrics: tokens by type, operation duration, time to the first chunk."""

    def __init__(self, meter: Meter) -> None:
        self.token_usage: Histogram = meter.create_histogram(
            sc.TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.duration: Histogram = meter.create_histogram(
            sc.OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.first_chunk: Histogram = meter.create_histogram(
            sc.TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk of the answer.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )

    def record(self, event: UsageEvent, attributes: Attributes) -> None:
        if event.usage_source is not UsageSource.NONE:
            self.token_usage.record(event.prompt_tokens, attributes | {sc.TOKEN_TYPE: sc.TOKEN_INPUT})
            self.token_usage.record(event.completion_tokens, attributes | {sc.TOKEN_TYPE: sc.TOKEN_OUTPUT})
        if event.error_code is not None:
            attributes = attributes | {sc.ERROR: event.error_code}
        self.duration.record(event.latency_ms / 1000, attributes)
        if event.ttft_ms is not None:
            self.first_chunk.record(event.ttft_ms / 1000, attributes)


class AttemptSpan:
    """The CLIENT span of one upstream attempt; a failed attempt ends it, the answering one stays
    open until the request's end (a stream's, after its last frame)."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def call(self, call: UpstreamCall) -> UpstreamCall:
        """The call with this attempt's trace context for the upstream (the client's tracestate
        kept): the upstream's own spans are the attempt's children."""
        headers: dict[str, str] = {}
        _PROPAGATOR.inject(headers, context=set_span_in_context(self.span))
        return dataclasses.replace(call, trace_headers=headers or call.trace_headers)

    async def run(
        self, once: Callable[[Grant, UpstreamCall], Awaitable[T]], grant: Grant, call: UpstreamCall
    ) -> T:
        try:
            return await once(grant, self.call(call))
        except BaseException as exc:
            _fail(self.span, exc)
            raise


class RequestTrace:
    """One request's spans and, once it has ended, its metrics. Ends once: `finish` with the
    request's usage event, or `fail` when it ended without one."""

    __slots__ = ("_attempt", "_ended", "_instruments", "_operation", "_request_model", "_span", "_tracer")

    def __init__(
        self,
        tracer: Tracer | None,
        span: Span | None,
        instruments: GenAiInstruments | None,
        operation: str,
        request_model: str,
    ) -> None:
        self._tracer = tracer
        self._span = span
        self._instruments = instruments
        self._operation = operation
        self._request_model = request_model
        self._attempt: AttemptSpan | None = None
        self._ended = False

    def trace_id(self, client_trace_id: str | None) -> str | None:
        """The trace the request's spans are in (the client's, or the one they started), for the
        log line; the client's when traces are not exported."""
        if self._span is None:
            return client_trace_id
        return format_trace_id(self._span.get_span_context().trace_id)

    def attempt(self, deployment: Deployment, number: int, grant: Grant) -> AttemptSpan | None:
        """The span of an attempt that has its permit, after the wait for it (an event on the
        request's span); None when traces are not exported."""
        if self._tracer is None or self._span is None:
            return None
        self._span.add_event(
            sc.QUEUE_WAIT_EVENT, {sc.ATTEMPT: number, sc.QUEUE_MS: _milliseconds(grant.queue_s)}
        )
        provider = deployment.provider
        span = self._tracer.start_span(
            f"{self._operation} {deployment.upstream_model}",
            context=set_span_in_context(self._span),
            kind=SpanKind.CLIENT,
            attributes={
                sc.OPERATION: self._operation,
                sc.PROVIDER: sc.PROVIDER_NAMES[provider.kind],
                sc.REQUEST_MODEL: deployment.upstream_model,
                sc.PROVIDER_ID: provider.name,
                sc.DEPLOYMENT: deployment.id,
                sc.REGION: deployment.region,
                sc.ATTEMPT: number,
                sc.UPSTREAM_HOST: _host(grant.base_url),
            },
        )
        self._attempt = AttemptSpan(span)
        return self._attempt

    def finish(self, event: UsageEvent, deployment: Deployment) -> None:
        """The request has its usage event: its counts, cost and outcome on the spans, which end,
        and in the metrics."""
        if self._ended:
            return
        self._ended = True
        provider = sc.PROVIDER_NAMES[deployment.provider.kind]
        if self._instruments is not None:
            self._instruments.record(
                event,
                {
                    sc.OPERATION: self._operation,
                    sc.PROVIDER: provider,
                    sc.REQUEST_MODEL: self._request_model,
                    sc.RESPONSE_MODEL: event.upstream_model,
                },
            )
        if self._span is None:
            return
        usage = _usage(event)
        answered = self._attempt
        if answered is not None and answered.span.is_recording():  # the attempt that answered
            answered.span.set_attributes(usage | {sc.HTTP_STATUS: event.status})
            _end(answered.span, event)
        self._span.set_attributes(usage | _outcome(event, provider))
        _end(self._span, event)

    def fail(self, exc: BaseException) -> None:
        """The request ended without a usage event (refused, or no upstream reached)."""
        if self._ended:
            return
        self._ended = True
        if self._attempt is not None and self._attempt.span.is_recording():
            _fail(self._attempt.span, exc)
        if self._span is not None:
            _fail(self._span, exc, server=True)


def _host(base_url: str) -> str:
    rest = base_url.partition("://")[2] or base_url
    return rest.partition("/")[0].rpartition("@")[2]


def _usage(event: UsageEvent) -> Attributes:
    return {
        sc.RESPONSE_MODEL: event.upstream_model,
        sc.INPUT_TOKENS: event.prompt_tokens,
        sc.OUTPUT_TOKENS: event.completion_tokens,
        sc.CACHE_READ_TOKENS: event.cached_tokens,
        sc.CACHE_CREATION_TOKENS: event.cache_write_tokens,
        sc.USAGE_SOURCE: event.usage_source.value,
    }


def _outcome(event: UsageEvent, provider: str) -> Attributes:
    outcome: Attributes = {
        sc.PROVIDER: provider,
        sc.PROVIDER_ID: event.provider,
        sc.DEPLOYMENT: event.deployment,
        sc.REGION: event.region,
        sc.HTTP_STATUS: event.status,
        sc.COST: float(event.cost),
        sc.LATENCY_MS: event.latency_ms,
    }
    if event.queue_ms is not None:
        outcome[sc.QUEUE_MS] = event.queue_ms
    if event.ttft_ms is not None:
        outcome[sc.TTFT_MS] = event.ttft_ms
    if event.response_id is not None:
        outcome[sc.RESPONSE_ID] = event.response_id
    return outcome


def _end(span: Span, event: UsageEvent) -> None:
    if event.error_code is not None:
        span.set_attribute(sc.ERROR, event.error_code)
        if event.status >= 500:
            span.set_status(Status(StatusCode.ERROR))
    span.end()


class Telemetry:
    """A process's tracer and GenAI instruments (`gateway.telemetry.otlp.open_telemetry`): starts
    each request's trace. `tracer` None: only metrics are exported; `meter` None: only traces."""

    def __init__(
        self, tracer: Tracer | None, meter: Meter | None, shutdown: Callable[[], None] = lambda: None
    ) -> None:
        self._tracer = tracer
        self._instruments = None if meter is None else GenAiInstruments(meter)
        self._shutdown = shutdown

    def request(
        self,
        request_id: str,
        principal: Principal,
        parsed: TracedRequest,
        directives: Directives,
        correlation: TracedCorrelation,
    ) -> RequestTrace:
        """A proxied request's trace: a child of the client's `traceparent` when it sent a valid one."""
        trace_headers = correlation.upstream_headers
        parent = Context() if trace_headers is None else _PROPAGATOR.extract(trace_headers)
        attributes = _request_attributes(request_id, principal, parsed, directives)
        if correlation.client_request_id is not None:
            attributes[sc.CLIENT_REQUEST_ID] = correlation.client_request_id
        return self._start(parent, parsed, attributes)

    def job_line(
        self, request_id: str, principal: Principal, parsed: TracedRequest, directives: Directives
    ) -> RequestTrace:
        """A Batch API line's trace: a child in its job's (`directives.batch`, the job's id)."""
        parent = Context() if directives.batch is None else job_context(directives.batch)
        return self._start(parent, parsed, _request_attributes(request_id, principal, parsed, directives))

    def _start(self, parent: Context, parsed: TracedRequest, attributes: Attributes) -> RequestTrace:
        operation = sc.OPERATIONS[parsed.endpoint]
        span = None
        if self._tracer is not None:
            span = self._tracer.start_span(
                f"{operation} {parsed.model}",
                context=parent,
                kind=SpanKind.SERVER,
                attributes=attributes | {sc.OPERATION: operation},
            )
        return RequestTrace(self._tracer, span, self._instruments, operation, parsed.model)

    def shutdown(self) -> None:
        """Export what is left and stop the exporters (blocking: call it off the event loop)."""
        self._shutdown()


def _request_attributes(
    request_id: str, principal: Principal, parsed: TracedRequest, directives: Directives
) -> Attributes:
    attributes: Attributes = {
        sc.REQUEST_MODEL: parsed.model,
        sc.REQUEST_STREAM: parsed.stream,
        sc.REQUEST_ID: request_id,
        sc.TEAM_ID: principal.team_id,
        sc.KEY_ID: principal.key_id,
        sc.PRIORITY: directives.priority_class.value,
    }
    if parsed.max_output_tokens is not None:
        attributes[sc.REQUEST_MAX_TOKENS] = parsed.max_output_tokens
    if parsed.choices != 1:
        attributes[sc.REQUEST_CHOICES] = parsed.choices
    if directives.batch is not None:
        attributes[sc.BATCH_ID] = directives.batch
        attributes[sc.SESSION_ID] = directives.batch
    return attributes
