"""The proxy service: request -> directives -> route plan -> dispatch -> response, and a usage event.

Batch semantics live here: a batched request is bound to its pinned deployment; the pin may move
once, only while no request of the batch has succeeded; unbatched requests fall back to the next
eligible deployment before their first byte unless `fallback: never`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

import structlog

from gateway.auth.principal import Principal
from gateway.dialects.messages.errors import error_event
from gateway.dispatch.executor import Attempts, UpstreamAnswerTooLarge
from gateway.dispatch.stream import OpenStream
from gateway.errors import (
    GatewayError,
    PinnedProviderUnavailable,
    UpstreamError,
    UpstreamTooLarge,
)
from gateway.limits.limiter import Admission
from gateway.logs import log_request
from gateway.metering.events import UsageEvent, UsageSource, usage_event
from gateway.providers.base import (
    Endpoint,
    TokenUsage,
    UpstreamCall,
    UpstreamResponse,
    estimated_tokens,
    stream_cost,
)
from gateway.providers.cache_hints import derive_cache_key
from gateway.proxy.answer_text import answer_bytes
from gateway.proxy.correlation import NO_CORRELATION, Correlation
from gateway.proxy.relay import StreamRelay
from gateway.proxy.request import ParsedRequest
from gateway.responses_store.continuation import StoredResponses, StreamKeeper, refuse_continuation
from gateway.responses_store.owners import ResponseOwners
from gateway.routing.batch_pin import BatchPin, PinStoreUnavailable
from gateway.routing.conversations import (
    Conversation,
    Conversations,
    Placement,
    answer_id,
    conversation_key,
    next_turn_key,
    scoped,
)
from gateway.routing.deployment import Deployment, DeploymentTable
from gateway.routing.directives import Directives, Priority
from gateway.routing.health import HealthBoard
from gateway.routing.pins import PinStore
from gateway.routing.placement import move_batch, place_batch
from gateway.routing.policy import RoutePlan, eligible_deployments, plan_route
from gateway.routing.prefix import NO_PREFIX, prompt_prefix
from gateway.scheduling.ticket import UNSCHEDULED, Ticket
from gateway.settings import RetrySettings, SchedulingSettings
from gateway.telemetry import RequestTrace, Telemetry

log = structlog.get_logger("gateway.proxy")


def milliseconds(seconds: float) -> float:
    """Seconds as milliseconds to the microsecond: the float `round(seconds * 1000, 3)` gives
    (but in a half-way case), without formatting the number as decimal text and reading it back."""
    return round(seconds * 1_000_000) / 1000


def _distrust(ctx: ProxyContext, deployment: Deployment, reason: str) -> None:
    # The reason names the count and its value, never any text of the request or answer.
    log.warning(
        "upstream_usage_untrusted", request_id=ctx.request_id, deployment=deployment.id, reason=reason
    )


class UsageSink(Protocol):
    async def append(self, event: UsageEvent) -> None: ...


class Dispatcher(Protocol):
    """What the service asks of the executor (`gateway.dispatch.executor.Executor`)."""

    async def send(
        self,
        deployment: Deployment,
        call: UpstreamCall,
        attempts: Attempts,
        max_attempts: int,
        ticket: Ticket,
    ) -> UpstreamResponse: ...

    async def open_stream(
        self,
        deployment: Deployment,
        call: UpstreamCall,
        attempts: Attempts,
        max_attempts: int,
        ticket: Ticket,
    ) -> OpenStream: ...


@dataclass(slots=True)
class ProxyContext:
    """One client request as it travels through the gateway."""

    request_id: str
    principal: Principal
    parsed: ParsedRequest
    directives: Directives
    ticket: Ticket = UNSCHEDULED  # what the scheduler is asked for at each attempt (`schedule`)
    cache_key: str | None = None  # given by the client, or derived from a breakpoint (`schedule`)
    conversation: Conversation | None = None  # the conversation it names, and where it was last
    admission: Admission | None = None  # what the limiter reserved; the usage event settles it
    created_at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.perf_counter)
    attempts: Attempts = field(default_factory=Attempts)
    deployment: Deployment | None = None
    moved: bool = False  # this request has followed its batch's pin to a new deployment
    correlation: Correlation = NO_CORRELATION  # the client's own request id and trace context
    anthropic_beta: str | None = None  # a Messages client's anthropic-beta header, for Anthropic
    trace: RequestTrace | None = None  # the request's spans, while telemetry is on

    def trace_with(self, trace: RequestTrace | None) -> None:
        """Trace this request: its own spans here, its attempts' through the executor."""
        self.trace = self.attempts.trace = trace


@dataclass(frozen=True, slots=True)
class Completed:
    deployment: Deployment
    response: UpstreamResponse
    cost: str | None = None  # the record's cost as a decimal string, when the counts were the upstream's


class ProxyService:
    def __init__(
        self,
        table: DeploymentTable,
        pins: PinStore,
        health: HealthBoard,
        executor: Dispatcher,
        usage: UsageSink,
        retry: RetrySettings,
        rng: random.Random | None = None,
        on_event: Callable[[UsageEvent], None] | None = None,
        settle: Callable[[Principal, UsageEvent, Admission | None], Awaitable[None]] | None = None,
        response_owners: ResponseOwners | None = None,
        telemetry: Telemetry | None = None,
        stored_responses: StoredResponses | None = None,
        scheduling: SchedulingSettings | None = None,
    ) -> None:
        self._table = table
        self._pins = pins
        self._health = health
        self._executor = executor
        self._usage = usage
        self._retry = retry
        self._rng = rng or random.Random()
        self._on_event = on_event
        self._settle = settle
        self._response_owners = response_owners  # who may name a stored Response (None: anyone)
        # the Responses kept for their team, and the continuations of them (None: none kept)
        self._stored_responses = stored_responses
        self.telemetry = telemetry  # the process's traces and GenAI metrics (None: off)
        self.pins_degraded = False
        scheduling = scheduling or SchedulingSettings()
        # A prompt's prefix chooses among replicas and counts once at a capped replica: with
        # neither in the catalog, the hashing (8-22 us a request) would buy nothing.
        placed = any(d.provider.capacity is not None or len(d.provider.urls) > 1 for d in table.all())
        self._prefix_window = scheduling.prefix_affinity_tokens if placed else 0
        self.conversations = Conversations(scheduling.conversation_ttl_s)  # this process's memory

    def schedule(self, ctx: ProxyContext, priority: Priority, prompt_tokens: int, tokens: int) -> None:
        """What the scheduler will be asked for, derived once from the parsed request before it is
        routed: its ticket (`tokens` it holds, its prompt's prefix), its cache key, its conversation.

        The ticket's prefix is the cache key (scoped by team) where there is one, sized by the
        prompt's part up to its last breakpoint (else before its last user message); without a
        key, the digest of that shared part itself."""
        team, parsed = ctx.principal.team_id, ctx.parsed
        cache_key = ctx.directives.cache_key or parsed.prompt_cache_key
        if cache_key is None and parsed.chat is not None:
            cache_key = derive_cache_key(team, parsed.chat)
        leading = prompt_prefix(team, parsed.typed, self._prefix_window) if self._prefix_window else NO_PREFIX
        conversation = None
        if ctx.directives.batch is None:  # a batch follows its pin, not its conversations
            conversation = self.conversations.find(conversation_key(team, parsed.typed))
        ctx.cache_key, ctx.conversation = cache_key, conversation
        ctx.ticket = Ticket(
            team,
            ctx.principal.team_weight,
            priority,
            prompt_tokens,
            tokens,
            prefix=scoped(team, cache_key) if cache_key is not None else leading.shared,
            prefix_tokens=leading.shared_tokens,
            leading=leading if leading.blocks else None,
            replica=conversation.then.replica if conversation is not None and conversation.then else None,
        )

    # --- routing ----------------------------------------------------------------------------

    async def _plan(self, ctx: ProxyContext) -> tuple[RoutePlan, BatchPin | None]:
        directives, team = ctx.directives, ctx.principal.team_id
        eligible = eligible_deployments(ctx.parsed.model, directives, ctx.principal, self._table)
        open_circuits = self._health.open_circuits()
        if directives.batch is None:
            then = ctx.conversation.then if ctx.conversation is not None else None
            preferred = then.deployment if then is not None else None
            return plan_route(eligible, directives, open_circuits, None, self._rng, preferred), None
        placed = await place_batch(
            self._pins, team, directives.batch, eligible, directives, open_circuits, ctx.created_at
        )
        if placed.pin is None and not self.pins_degraded:
            log.warning("batch_pins_degraded", reason="pin store unreachable; using rendezvous hashing")
        self.pins_degraded = placed.pin is None
        return plan_route(eligible, directives, open_circuits, placed.deployment, self._rng), placed.pin

    async def _replacement(
        self, ctx: ProxyContext, pin: BatchPin, failed: Deployment
    ) -> tuple[BatchPin, Deployment] | None:
        """Move a batch whose first placement failed before any success; None if it must stay.

        Concurrent requests of the batch race to move it; the store lets one win and the others
        follow the pin wherever it now is.
        """
        if pin.confirmed or pin.moves > 0 or ctx.moved:
            return None
        eligible = eligible_deployments(ctx.parsed.model, ctx.directives, ctx.principal, self._table)
        others = [d for d in eligible if d.id != failed.id]
        moved = await move_batch(self._pins, pin, others, ctx.directives, self._health.open_circuits())
        if moved is None:
            return None  # nowhere healthy to go, or no store to agree through: the pin stays
        target = next((d for d in eligible if d.id == moved.deployment and d.id != failed.id), None)
        ctx.moved = target is not None
        return None if target is None else (moved, target)

    def _call(self, ctx: ProxyContext, deployment: Deployment) -> UpstreamCall:
        parsed = ctx.parsed
        return UpstreamCall(
            endpoint=parsed.endpoint,
            body=parsed.body,
            upstream_model=deployment.upstream_model,
            stream=parsed.stream,
            client_wants_usage=parsed.client_wants_usage,
            team_id=ctx.principal.team_id,
            chat=parsed.chat,
            cache_key=ctx.cache_key,
            tariff=deployment.tariff.tier(parsed.service_tier),
            trace_headers=ctx.correlation.upstream_headers,
            anthropic_beta=ctx.anthropic_beta,
        )

    # --- dispatch ---------------------------------------------------------------------------

    async def _dispatch(self, ctx: ProxyContext, attempt: Callable[..., Any]) -> Any:
        plan, pin = await self._plan(ctx)
        candidates = list(plan.deployments)
        last_error: UpstreamError | None = None
        while candidates:
            deployment = candidates.pop(0)
            ctx.deployment = deployment
            bound = plan.pinned or not candidates
            max_attempts = self._retry.max_attempts if bound else 1
            try:
                call = self._call(ctx, deployment)
                if call.endpoint is Endpoint.RESPONSES:
                    call = await self._responses_call(ctx, deployment, call)
                result = await attempt(deployment, call, ctx.attempts, max_attempts, ctx.ticket)
            except UpstreamError as exc:
                last_error = exc
                if not exc.retryable:
                    raise
                moved = None if pin is None or candidates else await self._replacement(ctx, pin, deployment)
                if moved is not None:  # at most once per request (ctx.moved)
                    pin, moved_to = moved
                    log.info("batch_moved", batch=pin.batch_id, to=moved_to.id, request_id=ctx.request_id)
                    candidates = [moved_to]
                continue
            if pin is not None and not pin.confirmed:
                with contextlib.suppress(PinStoreUnavailable):  # the batch's next success retries it
                    await self._pins.confirm(pin.team_id, pin.batch_id, deployment.id)
            return result
        assert last_error is not None
        if plan.batch is not None:
            retry_after = last_error.headers.get("retry-after")  # the upstream's 429, an open circuit
            raise PinnedProviderUnavailable(
                f"The deployment pinned for batch '{plan.batch}' is unavailable after "
                f"{ctx.attempts.count} attempt(s) ({last_error.message}); the pin stays. "
                "Retry later or start a new batch.",
                headers={"retry-after": retry_after} if retry_after is not None else None,
            ) from last_error
        raise last_error

    async def _responses_call(
        self, ctx: ProxyContext, deployment: Deployment, call: UpstreamCall
    ) -> UpstreamCall:
        """The Responses call as `deployment` is sent it: a continuation passed through or rebuilt
        (gateway.responses_store.continuation), a stored object of another team's refused."""
        team_id = ctx.principal.team_id
        if self._stored_responses is not None:
            body = await self._stored_responses.prepare(deployment.provider, team_id, call.body)
            return call if body is call.body else dataclasses.replace(call, body=body)
        refuse_continuation(deployment.provider, call.body)
        if self._response_owners is not None:
            await self._response_owners.check(deployment.provider, team_id, call.body)
        return call

    async def complete(self, ctx: ProxyContext) -> Completed:
        try:
            response: UpstreamResponse = await self._dispatch(ctx, self._executor.send)
        except GatewayError as exc:
            await self._meter_failure(ctx, exc)
            if ctx.trace is not None:  # not metered: no upstream reached
                ctx.trace.fail(exc)
            raise
        assert ctx.deployment is not None
        usage, source, cost = response.usage, UsageSource.UPSTREAM, response.cost
        if response.untrusted_usage is not None:  # counts that cannot be true
            _distrust(ctx, ctx.deployment, response.untrusted_usage)
        if usage is None:  # no counts to bill (or none believed): the gateway's own, never free
            completion = estimated_tokens(answer_bytes(ctx.parsed.endpoint, response.body))
            usage, source = self._estimate(ctx, completion), UsageSource.ESTIMATED
            cost = None  # priced from the estimate, and said in no header
        tier = response.service_tier or ctx.parsed.service_tier  # served, else asked for
        if cost is None and source is UsageSource.UPSTREAM:  # an adapter that does not price its answers
            cost = ctx.deployment.tariff.tier(tier).cost(usage)
        await self._meter(
            ctx,
            ctx.deployment,
            200,
            usage,
            source,
            cost=cost,
            response_id=response.response_id,
            service_tier=tier,
        )
        answered = response.response_id
        if answered is None and ctx.parsed.endpoint is Endpoint.RESPONSES:  # one the gateway made
            answered = answer_id(response.body)
        self._remember_conversation(ctx, ctx.deployment, answered)
        if self._stored_responses is not None and ctx.parsed.endpoint is Endpoint.RESPONSES:
            await self._stored_responses.keep_answer(
                ctx.principal.team_id, ctx.deployment.provider, ctx.parsed.body, response.body
            )
        return Completed(ctx.deployment, response, None if cost is None else format(cost, "f"))

    async def open_stream(self, ctx: ProxyContext) -> OpenStream:
        try:
            stream: OpenStream = await self._dispatch(ctx, self._executor.open_stream)
        except GatewayError as exc:
            await self._meter_failure(ctx, exc)
            if ctx.trace is not None:  # not metered: no upstream reached
                ctx.trace.fail(exc)
            raise
        return stream

    def relay(self, ctx: ProxyContext, stream: OpenStream) -> StreamRelay:
        """Relay frames as they come; meter once at the end, however the stream ends. A Responses
        stream's last Response is kept as its frame goes out, when the request asks for it."""
        keeper = None
        if self._stored_responses is not None and ctx.parsed.endpoint is Endpoint.RESPONSES:
            keeper = self._stored_responses.stream_keeper(
                ctx.principal.team_id, stream.deployment.provider, ctx.parsed.body
            )
        meter = functools.partial(self.meter_stream, ctx, keeper=keeper)
        relay = StreamRelay(ctx.request_id, stream, meter, watch=keeper)
        if ctx.parsed.endpoint is Endpoint.MESSAGES:  # an `error` event in Anthropic's envelope
            relay.error_frame = error_event
        return relay

    async def meter_stream(
        self,
        ctx: ProxyContext,
        stream: OpenStream,
        status: int,
        error_code: str | None,
        *,
        keeper: StreamKeeper | None = None,
    ) -> None:
        """The usage record of a stream that has ended: upstream counts, or estimated without them
        (from the bytes received, for a stream cut at the response cap). The Response `keeper`
        kept is shared with the other processes now."""
        if keeper is not None and keeper.kept is not None and self._stored_responses is not None:
            await self._stored_responses.store.share(keeper.kept)
        usage, source = stream.translator.usage, UsageSource.UPSTREAM
        cost = stream_cost(stream.translator)  # what its usage chunk said, for the same counts
        if stream.translator.untrusted_usage is not None:
            _distrust(ctx, stream.deployment, stream.translator.untrusted_usage)
        if usage is None:
            oversized = error_code == UpstreamTooLarge.code
            completion = estimated_tokens(stream.received) if oversized else stream.frames_sent
            usage, source, cost = self._estimate(ctx, completion), UsageSource.ESTIMATED, None
        if not stream.finished and error_code is None:
            status, error_code = 499, "client_disconnected"
        # a Responses stream passed through names the Response the upstream stores (responses_native)
        response_id = getattr(stream.translator, "response_id", None)
        # the tier a chunk said was served (OpenAI's chunks carry it), else the one asked for
        tier = getattr(stream.translator, "service_tier", None) or ctx.parsed.service_tier
        await self._meter(
            ctx, stream.deployment, status, usage, source, error_code, cost, response_id, service_tier=tier
        )
        if status == 200:
            self._remember_conversation(ctx, stream.deployment, response_id)

    def _remember_conversation(
        self, ctx: ProxyContext, deployment: Deployment, response_id: str | None
    ) -> None:
        """Where a conversation was served, for its next request: the one it named, and the one
        a Response's id starts (its next turn names it as `previous_response_id`; a translated
        stream's id is not read, so its next turn follows its prompt prefix instead)."""
        placement = Placement(deployment.id, ctx.attempts.replica)
        if ctx.conversation is not None:
            self.conversations.remember(ctx.conversation.key, placement)
        if response_id is not None and ctx.directives.batch is None:
            self.conversations.remember(next_turn_key(ctx.principal.team_id, response_id), placement)

    # --- metering ---------------------------------------------------------------------------

    @staticmethod
    def _estimate(ctx: ProxyContext, completion_tokens: int) -> TokenUsage:
        """Without upstream counts: the prompt read from the request's text on every endpoint
        (gateway.proxy.prompt_text, ~4 bytes a token), counted only now that it is needed; the
        completion as the caller counted it (~1 token a streamed chunk, or ~4 bytes of the
        answer's output a token)."""
        prompt_tokens = ctx.parsed.prompt_size().tokens
        return TokenUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)

    async def _meter_failure(self, ctx: ProxyContext, exc: GatewayError) -> None:
        if ctx.deployment is None or ctx.attempts.count == 0:
            return  # never reached an upstream: nothing to bill, nothing to record
        usage, source = None, UsageSource.NONE
        if isinstance(exc, UpstreamAnswerTooLarge):  # the upstream did the work: it is billed
            usage, source = exc.usage, UsageSource.UPSTREAM
            if usage is None:
                usage, source = (
                    self._estimate(ctx, estimated_tokens(exc.received_bytes)),
                    UsageSource.ESTIMATED,
                )
        await self._meter(ctx, ctx.deployment, exc.status, usage, source, exc.code)
        exc.logged = True

    async def _meter(
        self,
        ctx: ProxyContext,
        deployment: Deployment,
        status: int,
        usage: TokenUsage | None,
        source: UsageSource,
        error_code: str | None = None,
        cost: Decimal | None = None,
        response_id: str | None = None,
        *,
        service_tier: str | None = None,
    ) -> None:
        """Record the request's usage event, and log its line. `cost`: what the answer already
        said `usage` costs (its usage.cost), so that the record holds the very same amount.
        `response_id`: a Response the upstream stores, owned by the team from now on.
        `service_tier`: the tier served, else (None) the one the request asked for."""
        endpoint = ctx.parsed.endpoint.value
        team_id, batch_id = ctx.principal.team_id, ctx.directives.batch
        event = usage_event(
            ctx.request_id,
            created_at=ctx.created_at,
            team_id=team_id,
            key_id=ctx.principal.key_id,
            deployment=deployment,
            endpoint=endpoint,
            status=status,
            usage=usage,
            source=source,
            tariff=deployment.tariff,
            cost=cost,
            batch_id=batch_id,
            latency_ms=milliseconds(time.perf_counter() - ctx.started),
            ttft_ms=milliseconds(ctx.attempts.ttft_s) if ctx.attempts.ttft_s is not None else None,
            error_code=error_code,
            queue_ms=milliseconds(ctx.attempts.queue_s),
            client_request_id=ctx.correlation.client_request_id,
            response_id=response_id,
            service_tier=service_tier or ctx.parsed.service_tier,
        )
        if self._settle is None:
            await self._usage.append(event)
        else:  # both awaited (the spend counts before the client has its answer), and the settle is
            # queued as it is called: both commands go out in the same Redis round trip
            settled = self._settle(ctx.principal, event, ctx.admission)
            try:
                await self._usage.append(event)
            finally:
                await settled  # whatever the append did
        if response_id is not None and self._response_owners is not None:
            await self._response_owners.remember(team_id, response_id)
        if self._on_event is not None:
            self._on_event(event)
        trace_id = ctx.correlation.trace_id
        if ctx.trace is not None:
            ctx.trace.finish(event, deployment)
            trace_id = ctx.trace.trace_id(trace_id)
        log_request(
            {
                "request_id": ctx.request_id,
                "key": ctx.principal.key_prefix,
                "team": team_id,
                "model": deployment.model,
                "provider": event.provider,
                "region": event.region,
                "batch": batch_id,
                "endpoint": endpoint,
                "stream": ctx.parsed.stream,
                "status": status,
                "attempts": ctx.attempts.count,
                "prompt_tokens": event.prompt_tokens,
                "completion_tokens": event.completion_tokens,
                "latency_ms": event.latency_ms,
                "error": error_code,
                "client_request_id": ctx.correlation.client_request_id,
                "trace_id": trace_id,
            }
        )
