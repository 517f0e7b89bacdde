"""Sending one line of a batch job: its request through the jobs' proxy, and what came of it.

A line either has an outcome to store (it succeeded, or the request itself was refused) or the
job must wait (the pinned deployment is at fault). Each line carries a cache key, so that the
scheduler's replica affinity keeps the lines sharing a prompt prefix on one replica.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

from gateway.auth.principal import Principal
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    PinnedProviderUnavailable,
    QueueTimeout,
    RateLimited,
    ServiceUnavailable,
    UpstreamError,
    UpstreamRejected,
    UpstreamTooLarge,
)
from gateway.jobs import ledger
from gateway.jobs.ledger import LineOutcome, PendingLine
from gateway.limits import Reservations
from gateway.metering.events import UsageEvent
from gateway.providers.base import Endpoint
from gateway.providers.cache_hints import derive_cache_key
from gateway.proxy.request import ParsedRequest, parse_request
from gateway.proxy.service import ProxyContext, ProxyService
from gateway.routing.directives import Directives, Priority
from gateway.scheduling.ticket import Ticket


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
    return f"pinned deployment failing: {exc.code or type(exc).__name__}"


def line_cache_key(team_id: str, parsed: ParsedRequest, prefix_key: str) -> str | None:
    """The cache key a line's directives carry: its prefix key within its team (two teams never
    share a key, as keys derived from breakpoints do not), unless the body brings its own (a
    `prompt_cache_key`, or `cache_control` breakpoints), which the proxy then reads instead."""
    if parsed.prompt_cache_key is not None:
        return None
    if parsed.chat is not None and derive_cache_key(team_id, parsed.chat) is not None:
        return None
    return hashlib.sha256(f"{team_id}\x00{prefix_key}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class LineRun:
    """One send of a line: an outcome to store, or (outcome None) why the job must wait."""

    outcome: LineOutcome | None
    event: UsageEvent | None = None
    paused: str | None = None


@dataclass(frozen=True, slots=True)
class LineSender:
    """Sends one line of a job through the jobs' proxy and says what came of it."""

    proxy: ProxyService
    usage: LineUsage
    reservations: Reservations
    max_messages: int

    async def send(
        self, job_id: str, line: PendingLine, principal: Principal, directives: Directives
    ) -> LineRun:
        request_id = f"{job_id}-{line.line_no}"  # the line's one usage record, however often it runs
        try:
            ctx = self._context(request_id, line, principal, directives)
        except InvalidRequest as exc:  # never sent: nothing to meter
            return LineRun(_failed(line, request_id, exc, attempts=0))
        try:
            completed = await self.proxy.complete(ctx)
        except GatewayError as exc:
            event = self.usage.take(request_id)
            if not refuses_line(exc):
                return LineRun(None, paused=pause_reason(exc))
            return LineRun(_failed(line, request_id, exc, ctx.attempts.count), event)
        except BaseException:
            self.usage.take(request_id)  # a cancelled send leaves nothing behind
            raise
        body = completed.response.body.decode()
        done = LineOutcome(line.line_no, ledger.SUCCEEDED, 200, body, request_id, ctx.attempts.count)
        return LineRun(done, self.usage.take(request_id))

    def _context(
        self, request_id: str, line: PendingLine, principal: Principal, directives: Directives
    ) -> ProxyContext:
        raw = line.body.encode()
        parsed = parse_request(raw, Endpoint.CHAT, self.max_messages)
        if parsed.stream:
            raise InvalidRequest("A batch request cannot stream", param="stream")
        allowed = self.reservations.tokens(len(raw), parsed.max_output_tokens, parsed.choices)
        ticket = Ticket(
            principal.team_id,
            principal.team_weight,
            Priority.BATCH,
            allowed.prompt_tokens,
            allowed.prompt_tokens + allowed.completion_tokens,
        )
        cache_key = line_cache_key(principal.team_id, parsed, line.prefix_key)
        line_directives = dataclasses.replace(directives, cache_key=cache_key)
        return ProxyContext(request_id, principal, parsed, line_directives, ticket)


def _failed(line: PendingLine, request_id: str, exc: GatewayError, attempts: int) -> LineOutcome:
    """A refused line: the error file shows its status and the error body, as the API would."""
    return LineOutcome(line.line_no, ledger.FAILED, exc.status, exc.to_json().decode(), request_id, attempts)
