"""Sending one line of a batch job: admitted by the key's limits, its run written down before it
goes out, its request through the jobs' proxy, and what came of it.

A line either has an outcome to store (it succeeded, the request itself was refused, or its budget
is spent), or the job must wait (the pinned deployment is at fault: a pause; a rate window is full:
pacing), or the send broke (an error the gateway did not expect; the runner counts it against the
line). A line that shares a prompt prefix with others carries a cache key, so that the
scheduler's replica affinity keeps those lines on one replica (a line sharing nothing is placed by
its own leading blocks). With telemetry on, each line's span is a child in its job's
trace (`gateway.telemetry.recorder.job_context`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

from gateway.auth.principal import Principal
from gateway.dispatch.executor import Attempts
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    PinnedProviderUnavailable,
    QueueTimeout,
    QuotaExceeded,
    RateLimited,
    ServiceUnavailable,
    UpstreamError,
    UpstreamRejected,
    UpstreamTooLarge,
)
from gateway.jobs import ledger
from gateway.jobs.ledger import Attempt, LineOutcome, PendingLine
from gateway.limits import Admission, Limiter, Reservation, Reservations
from gateway.metering.events import UsageEvent, UsageSource, usage_event
from gateway.providers.base import Endpoint, TokenUsage, estimated_tokens
from gateway.providers.cache_hints import derive_cache_key
from gateway.proxy.request import ParsedRequest, parse_request
from gateway.proxy.service import ProxyContext, ProxyService
from gateway.routing.deployment import Deployment
from gateway.routing.directives import Directives, Priority
from gateway.schemas.openai import ChatCompletionRequest

# The status and code of a run whose process died (or lost the job) before it stored anything:
# its record is an estimate, as for a client that left (499).
LOST_STATUS, LOST_CODE = 499, "attempt_lost"
LINE_BROKE_STATUS, LINE_BROKE_CODE = 500, "line_failed"


class LineUsage:
    """The usage sink of the jobs' proxy: holds each line's event until its outcome is stored
    with it (`ledger.record_outcome`), instead of buffering it for the usage writer."""

    def __init__(self) -> None:
        self._events: dict[str, UsageEvent] = {}

    async def append(self, event: UsageEvent) -> None:
        self._events[event.request_id] = event

    def take(self, request_id: str) -> UsageEvent | None:
        return self._events.pop(request_id, None)


def refuses_line(exc: GatewayError) -> bool:
    """The line itself is at fault (the upstream or the gateway refused it): asking again would
    fail again, so it is a failed line. Anything else is the deployment's trouble: the job waits."""
    if isinstance(exc, RateLimited | ServiceUnavailable):
        return False
    if isinstance(exc, UpstreamRejected | UpstreamTooLarge):
        return True
    return not isinstance(exc, UpstreamError) and 400 <= exc.status < 500


def pause_reason(exc: GatewayError) -> str:
    if isinstance(exc, PinnedProviderUnavailable):
        return "pinned deployment unavailable"
    if isinstance(exc, QueueTimeout):
        return "pinned deployment busy: queue timeout"
    if isinstance(exc, ServiceUnavailable):
        return f"limits unavailable: {exc.code}"
    return f"pinned deployment failing: {exc.code or type(exc).__name__}"


def pacing_s(exc: RateLimited) -> float | None:
    """How long a line refused by a rate window waits before it asks again; None when it can never
    fit (its reservation is larger than a whole minute's allowance)."""
    if exc.headers.get("x-should-retry") == "false":
        return None
    waited_ms = exc.headers.get("retry-after-ms")
    if waited_ms is not None and waited_ms.isdigit():
        return max(int(waited_ms), 1) / 1000
    waited = exc.headers.get("retry-after", "1")
    return float(waited) if waited.isdigit() else 1.0


def line_cache_key(team_id: str, parsed: ParsedRequest, prefix_key: str) -> str | None:
    """The cache key a line's directives carry: its prefix key within its team (two teams never
    share a key, as keys derived from breakpoints do not), unless the body brings its own (a
    `prompt_cache_key`, or `cache_control` breakpoints), which the proxy then reads instead, or
    shares nothing with its neighbours (a lone user message, no tools): one key for all such lines
    would crowd them onto one replica, where their own leading blocks spread them."""
    if parsed.prompt_cache_key is not None:
        return None
    chat = parsed.chat
    if chat is not None and (derive_cache_key(team_id, chat) is not None or _shares_nothing(chat)):
        return None
    return hashlib.sha256(f"{team_id}\x00{prefix_key}".encode()).hexdigest()[:32]


def _shares_nothing(chat: ChatCompletionRequest) -> bool:
    """No tools and nothing before the last user message (the part `input_lines.prefix_key` names)."""
    last_user = next(
        (i for i in reversed(range(len(chat.messages))) if chat.messages[i].role == "user"), None
    )
    return not chat.tools and last_user == 0


def estimated_prompt(body: str, max_messages: int, endpoint: Endpoint = Endpoint.CHAT) -> int:
    """A line's prompt tokens as the gateway counts them without the upstream's (its text, ~4 bytes
    a token); a body that cannot be read counts its bytes."""
    try:
        return parse_request(body.encode(), endpoint, max_messages).prompt_size().tokens
    except Exception:  # a line that broke its send may break this too: the bound, then
        return estimated_tokens(len(body.encode()))


@dataclass(frozen=True, slots=True)
class Begun:
    """A run written down and sent: its request id and the deployment it went to."""

    request_id: str
    deployment: Deployment
    started_at: float  # unix seconds


@dataclass(slots=True)
class LineAttempts(Attempts):
    """A line's upstream attempts, and its run once written down (`Attempts.before_send`)."""

    begun: Begun | None = None
    job_line: ClassVar[bool] = True


BeginRun = Callable[[PendingLine, str, Deployment], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class LineRun:
    """One send of a line: an outcome to store, or (outcome None) why the job must wait (`paused`,
    or `pace_s` for a full rate window), or that the send broke (`broke`, the error's kind).

    `event` is the record of its run (stored with the outcome, or alone); `admission` what the
    limiter reserved, settled once the run is stored."""

    outcome: LineOutcome | None
    event: UsageEvent | None = None
    paused: str | None = None
    pace_s: float | None = None
    broke: str | None = None
    admission: Admission | None = None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class LineSender:
    """Sends one line of a job through the jobs' proxy, admitted by the job's key's limits, and
    says what came of it. Nothing it sends raises: whatever breaks is a `LineRun` too."""

    proxy: ProxyService
    usage: LineUsage
    reservations: Reservations
    limiter: Limiter
    max_messages: int

    async def send(
        self, job_id: str, line: PendingLine, principal: Principal, directives: Directives, begin: BeginRun
    ) -> LineRun:
        request_id = ledger.line_request_id(job_id, line.line_no, line.runs + 1)
        try:
            return await self._send(request_id, line, principal, directives, begin)
        except ledger.LeaseLost:
            raise
        except Exception as exc:  # the gateway's own fault: the runner counts it against the line
            return LineRun(None, broke=type(exc).__name__, request_id=request_id)

    async def _send(
        self,
        request_id: str,
        line: PendingLine,
        principal: Principal,
        directives: Directives,
        begin: BeginRun,
    ) -> LineRun:
        try:
            ctx = self._context(request_id, line, principal, directives)
        except InvalidRequest as exc:  # never sent: nothing to meter
            return LineRun(_failed(line, request_id, exc, attempts=0))
        try:
            reservation = self._reservation(principal, ctx.parsed, len(line.body.encode()))
            ctx.admission = await self.limiter.admit(principal, reservation)
        except QuotaExceeded as exc:  # the budget is spent: the line fails, as OpenAI's batches do
            return LineRun(_failed(line, request_id, exc, attempts=0))
        except RateLimited as exc:
            wait_s = pacing_s(exc)
            if wait_s is None:  # it can never fit a window: as a refused request
                return LineRun(_failed(line, request_id, exc, attempts=0))
            return LineRun(None, pace_s=wait_s)
        except ServiceUnavailable as exc:  # a budget's counter cannot be rebuilt: wait for it
            return LineRun(None, paused=pause_reason(exc))
        return await self._dispatch(ctx, line, begin)

    async def _dispatch(self, ctx: ProxyContext, line: PendingLine, begin: BeginRun) -> LineRun:
        request_id, attempts = ctx.request_id, ctx.attempts
        assert isinstance(attempts, LineAttempts)

        async def begun(deployment: Deployment) -> None:
            await begin(line, request_id, deployment)
            attempts.begun = Begun(request_id, deployment, ctx.created_at)

        attempts.before_send = begun
        if self.proxy.telemetry is not None:  # the line's span, a child in its job's trace
            ctx.trace_with(
                self.proxy.telemetry.job_line(request_id, ctx.principal, ctx.parsed, ctx.directives)
            )
        try:
            completed = await self.proxy.complete(ctx)
        except GatewayError as exc:
            event = self.usage.take(request_id)
            if not refuses_line(exc):
                return LineRun(None, event, paused=pause_reason(exc), admission=ctx.admission)
            return LineRun(_failed(line, request_id, exc, attempts.count), event, admission=ctx.admission)
        except BaseException as exc:
            self.usage.take(request_id)  # a cancelled send leaves its run to be recovered
            if ctx.trace is not None:
                ctx.trace.fail(exc)
            if not isinstance(exc, Exception) or isinstance(exc, ledger.LeaseLost):
                raise
            # Whether the request went out before it broke is not known: once its run began, the
            # upstream may have served it, so it has an (estimated) record.
            event = None if attempts.begun is None else self._lost(ctx, line, attempts.begun)
            return LineRun(
                None, event, broke=type(exc).__name__, admission=ctx.admission, request_id=request_id
            )
        body = completed.response.body.decode()
        done = LineOutcome(line.line_no, ledger.SUCCEEDED, 200, body, request_id, attempts.count)
        return LineRun(done, self.usage.take(request_id), admission=ctx.admission)

    def _reservation(self, principal: Principal, parsed: ParsedRequest, body_bytes: int) -> Reservation:
        """What admission holds back for the line, as for any request (`gateway.proxy.exchange`)."""
        if principal.unlimited:
            return Reservation()  # nothing binds this caller: nothing to hold back
        allowed = self.reservations.tokens(body_bytes, parsed.max_output_tokens, parsed.choices)
        return self.reservations.priced(parsed.model, allowed, parsed.service_tier)

    def _lost(self, ctx: ProxyContext, line: PendingLine, begun: Begun) -> UsageEvent:
        return run_event(
            begun.request_id,
            (ctx.principal.team_id, ctx.principal.key_id),
            begun.deployment,
            ctx.directives.batch,
            begun.started_at,
            estimated_prompt(line.body, self.max_messages, line.endpoint),
            LINE_BROKE_STATUS,
            LINE_BROKE_CODE,
            latency_ms=(time.time() - begun.started_at) * 1000,
            endpoint=line.endpoint,
        )

    async def settle(self, principal: Principal, run: LineRun) -> None:
        """Once its run is stored: its real cost replaces what admission reserved (a run recovered
        from a dead process reserved nothing here), or the reservation is given back when no
        upstream was reached."""
        if run.event is not None:
            await self.limiter.settle(principal, run.event, run.admission)
        elif run.admission is not None:
            await self.limiter.release(principal, run.admission)

    async def release(self, principal: Principal, run: LineRun) -> None:
        """The run was not stored (the job was lost): its reservation goes back."""
        if run.admission is not None:
            await self.limiter.release(principal, run.admission)

    def _context(
        self, request_id: str, line: PendingLine, principal: Principal, directives: Directives
    ) -> ProxyContext:
        raw = line.body.encode()
        parsed = parse_request(raw, line.endpoint, self.max_messages)
        if parsed.stream:
            raise InvalidRequest("A batch request cannot stream", param="stream")
        allowed = self.reservations.tokens(len(raw), parsed.max_output_tokens, parsed.choices)
        cache_key = line_cache_key(principal.team_id, parsed, line.prefix_key)
        line_directives = dataclasses.replace(directives, cache_key=cache_key)
        ctx = ProxyContext(request_id, principal, parsed, line_directives, attempts=LineAttempts())
        tokens = allowed.prompt_tokens + allowed.completion_tokens
        self.proxy.schedule(ctx, Priority.BATCH, allowed.prompt_tokens, tokens)
        return ctx


def run_event(
    request_id: str,
    owner: tuple[str, str],
    deployment: Deployment,
    batch_id: str | None,
    started_at: float,
    prompt_tokens: int,
    status: int,
    error_code: str,
    *,
    latency_ms: float = 0.0,
    endpoint: Endpoint = Endpoint.CHAT,
) -> UsageEvent:
    """The estimated record of a run that produced no answer to meter: the prompt as the gateway
    counts it, no completion, priced at the deployment's price. `owner`: (team id, key id)."""
    team_id, key_id = owner
    return usage_event(
        request_id,
        created_at=started_at,
        team_id=team_id,
        key_id=key_id,
        deployment=deployment,
        endpoint=endpoint.value,
        status=status,
        usage=TokenUsage(prompt_tokens=prompt_tokens),
        source=UsageSource.ESTIMATED,
        tariff=deployment.tariff,
        batch_id=batch_id,
        latency_ms=round(max(latency_ms, 0.0), 3),
        error_code=error_code,
    )


def orphan_event(
    attempt: Attempt,
    owner: tuple[str, str],
    job_id: str,
    deployments: tuple[Deployment, ...],
    max_messages: int,
    *,
    endpoint: Endpoint = Endpoint.CHAT,
) -> UsageEvent | None:
    """The record of a run whose process died (or lost the job) before it stored anything: estimated
    from the line's body (how long it ran is not known), at the price of the deployment it went
    to, the first of `deployments` with its id, else the first of them (the catalog changed);
    None when there is none."""
    deployment = next((d for d in deployments if d.id == attempt.deployment), None)
    deployment = deployment or (deployments[0] if deployments else None)
    if deployment is None:
        return None
    return run_event(
        attempt.request_id,
        owner,
        deployment,
        job_id,
        attempt.started_at.timestamp(),
        estimated_prompt(attempt.body, max_messages, endpoint),
        LOST_STATUS,
        LOST_CODE,
        endpoint=endpoint,
    )


def _failed(line: PendingLine, request_id: str, exc: GatewayError, attempts: int) -> LineOutcome:
    """A refused line: the error file shows its status and the error body, as the API would."""
    return LineOutcome(line.line_no, ledger.FAILED, exc.status, exc.to_json().decode(), request_id, attempts)


def broken_outcome(line_no: int, request_id: str, broke: str, failures: int) -> LineOutcome:
    """A line whose send broke `failures` times: failed alone, its error naming what broke (the
    kind of error, never its text), so that the job goes on without it."""
    error = GatewayError(
        f"The gateway could not send this request: it failed {failures} times ({broke}).",
        code=LINE_BROKE_CODE,
    )
    return LineOutcome(line_no, ledger.FAILED, error.status, error.to_json().decode(), request_id, 0)
