"""A batch's quote: its lines counted once per tokenizer, then per lane the cost (exact, at the
lane's tariff) and the expected duration; and the lane each placement rule picks.

`Quoter.quote` reads what it needs (the deployments' history and queues) and hands the lines to
pure functions; counting runs off the event loop, as a create's line checks do.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth.principal import Principal
from gateway.db.teams import utcnow
from gateway.errors import InvalidRequest
from gateway.jobs.files.repository import BATCH_INPUT, file_chunks, get_file
from gateway.jobs.files.store import FileStore
from gateway.jobs.input_lines import InputCheck, InputLine
from gateway.jobs.quotes import duration
from gateway.jobs.quotes.lanes import GATEWAY, Lane, quote_lanes, rate
from gateway.jobs.quotes.tokens import ESTIMATE, cached_tokens, counter_for
from gateway.metering.pricing import money_str
from gateway.providers.base import TokenUsage
from gateway.routing.deployment import Deployment, DeploymentTable
from gateway.routing.directives import Directives
from gateway.schemas.quotes import (
    COUNTED_BY_ESTIMATE,
    COUNTED_BY_TOKENIZER,
    BatchQuote,
    QuoteDuration,
    QuoteLane,
    QuotePrices,
    QuoteRequest,
    QuoteTokens,
)
from gateway.settings import Catalog

CHEAPEST, FASTEST, BY_DEADLINE = "cheapest", "fastest", "by_deadline"
RULES = (CHEAPEST, FASTEST, BY_DEADLINE)
PROVIDER_WINDOW_S = 24 * 3600.0  # a provider's Batch API finishes within 24 hours
_WINDOW = re.compile(r"([1-9]|1[0-9]|2[0-4])h")
TIER_SPEED = {"priority": 0, None: 1, "flex": 2}  # with no history: which tier is the faster


def window_of(text: str) -> timedelta | None:
    """A completion window of 1 to 24 hours (`"4h"`), None for any other text."""
    return timedelta(hours=int(text[:-1])) if _WINDOW.fullmatch(text) else None


@dataclass(frozen=True, slots=True)
class QuoteLine:
    body: dict[str, Any]
    raw: str  # the body as JSON text
    output: int  # its output allowance


def output_allowance(body: dict[str, Any], default_max_tokens: int) -> int:
    """max_completion_tokens, else max_tokens, else the default; times n."""
    allowed = body.get("max_completion_tokens", body.get("max_tokens"))
    if not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 0:
        allowed = default_max_tokens
    choices = body.get("n")
    if not isinstance(choices, int) or isinstance(choices, bool) or choices < 1:
        choices = 1
    return allowed * choices


def quote_lines(lines: Sequence[InputLine], default_max_tokens: int) -> list[QuoteLine]:
    """The lines in the order the runner sends them: by prompt prefix, in input order within one."""
    ordered = sorted(lines, key=lambda line: line.prefix_key)  # stable: input order within a prefix
    quoted = []
    for line in ordered:
        body = msgspec.json.decode(line.body)
        quoted.append(QuoteLine(body, line.body, output_allowance(body, default_max_tokens)))
    return quoted


@dataclass(frozen=True, slots=True)
class Counted:
    prompt: int
    cached: int
    tokenizer: str


def count(lines: Sequence[QuoteLine], tokenizer: str, max_messages: int) -> Counted:
    counter = counter_for(tokenizer, max_messages)
    prompts = [counter.prompt(line.body, line.raw) for line in lines]
    cached = cached_tokens(prompts, counter.cache)
    return Counted(sum(p.tokens for p in prompts), sum(cached), counter.name)


def meets(expected: QuoteDuration, window_s: float) -> bool:
    """Within the window: a lane's bound when it has one (a provider's promise), else the high end
    of its spread; a lane with no history counts as meeting it (its lines start at once)."""
    if expected.bound_s is not None:
        return expected.bound_s <= window_s
    worst = expected.p90_s if expected.p90_s is not None else expected.expected_s
    return worst is None or worst <= window_s


def lane_quote(
    lane: Lane, counted: Counted, output: int, expected: QuoteDuration, window_s: float
) -> QuoteLane:
    tariff = lane.tariff
    usage = TokenUsage(prompt_tokens=counted.prompt, completion_tokens=output, cached_tokens=counted.cached)
    deployment = lane.deployment
    return QuoteLane(
        id=lane.id,
        deployment=deployment.id,
        provider=deployment.provider.name,
        region=deployment.region,
        execution=lane.execution,
        service_tier=lane.tier,
        tokens=QuoteTokens(
            prompt=counted.prompt,
            cached=counted.cached,
            output=output,
            counted_by=COUNTED_BY_ESTIMATE if counted.tokenizer == ESTIMATE else COUNTED_BY_TOKENIZER,
            tokenizer=counted.tokenizer,
        ),
        shared_prefix_share=round(counted.cached / counted.prompt, 4) if counted.prompt else 0.0,
        prices=QuotePrices(
            input=money_str(rate(tariff, tariff.input)),
            cached_input=money_str(rate(tariff, tariff.cached_input)),
            output=money_str(rate(tariff, tariff.output)),
        ),
        cost=money_str(tariff.cost(usage)),
        uncached_cost=money_str(tariff.uncached_cost(usage)),
        duration=expected,
        meets_window=meets(expected, window_s),
    )


def _speed(lane: QuoteLane, order: int) -> tuple[int, float, float]:
    """Faster first: a known expected duration, then gateway-run lanes with no history (they start
    at once; by tier), then a provider's Batch API by its bound."""
    took = lane.duration
    if took.expected_s is not None:
        return (0, took.expected_s, order)
    if lane.execution == GATEWAY:
        return (1, TIER_SPEED.get(lane.service_tier, 1), order)
    return (2, took.bound_s or math.inf, order)


def pick(lanes: Sequence[QuoteLane], rule: str) -> QuoteLane | None:
    """The lane `rule` picks: cheapest (then the faster), fastest (then the cheaper), or by_deadline,
    the cheapest that meets the window (the fastest when none does)."""
    ranked = list(enumerate(lanes))
    if not ranked:
        return None
    cheap = min(ranked, key=lambda pair: (Decimal(pair[1].cost), _speed(pair[1], pair[0])))
    fast = min(ranked, key=lambda pair: (_speed(pair[1], pair[0]), Decimal(pair[1].cost)))
    if rule == CHEAPEST:
        return cheap[1]
    if rule == FASTEST:
        return fast[1]
    meeting = [pair for pair in ranked if pair[1].meets_window]
    if not meeting:
        return fast[1]
    return min(meeting, key=lambda pair: (Decimal(pair[1].cost), _speed(pair[1], pair[0])))[1]


class Quoter:
    """Quotes batches for this process: the catalog's lanes, the deployments' history from the
    database, and their queues (`queued(provider)`: this process's scheduler)."""

    def __init__(self, catalog: Catalog, table: DeploymentTable, queued: Callable[[str], int]) -> None:
        self._catalog, self._table, self._queued = catalog, table, queued

    async def quote(
        self,
        session: AsyncSession,
        principal: Principal,
        directives: Directives,
        lines: Sequence[InputLine],
        *,
        model: str,
        endpoint: str,
        window: str,
    ) -> BatchQuote:
        window_span = window_of(window)
        if window_span is None:
            raise InvalidRequest(
                "completion_window must be 1h to 24h, such as 24h.", param="completion_window"
            )
        window_s = window_span.total_seconds()
        lanes = quote_lanes(model, directives, principal, self._table, self._catalog)
        limits = self._catalog.limits
        ordered = await asyncio.to_thread(quote_lines, lines, limits.default_max_tokens)
        tokenizers = sorted({lane.tokenizer for lane in lanes})
        counts = await asyncio.to_thread(
            lambda: {name: count(ordered, name, limits.max_messages) for name in tokenizers}
        )
        output = sum(line.output for line in ordered)
        reads = _Reads(session, self._queued)
        quoted = []
        for lane in lanes:
            counted = counts[lane.tokenizer]
            expected = await self._duration(
                reads, lane, len(ordered), counted.prompt - counted.cached, output
            )
            quoted.append(lane_quote(lane, counted, output, expected, window_s))
        return BatchQuote(
            model=model,
            lines=len(ordered),
            endpoint=endpoint,
            completion_window=window,
            lanes=quoted,
            cheapest=_id(pick(quoted, CHEAPEST)),
            fastest=_id(pick(quoted, FASTEST)),
            by_deadline=_id(pick(quoted, BY_DEADLINE)),
        )

    async def _duration(
        self, reads: _Reads, lane: Lane, lines: int, uncached: int, output: int
    ) -> QuoteDuration:
        deployment = lane.deployment
        ahead = await reads.ahead(deployment)
        if lane.execution != GATEWAY:
            durations = await duration.provider_job_durations(reads.session, deployment.id)
            return duration.within_window(durations, PROVIDER_WINDOW_S, ahead)
        shape = duration.Shape(lines, uncached, output, self._in_flight(lane, lines), ahead)
        return duration.expected(await reads.speeds(deployment), shape)

    def _in_flight(self, lane: Lane, lines: int) -> int:
        """A job's lines at once: the runner's concurrency, bound by the replicas' capacity."""
        provider = lane.deployment.provider
        bound = self._catalog.jobs.concurrency
        if provider.capacity is not None and provider.capacity.max_concurrency is not None:
            bound = min(bound, provider.capacity.max_concurrency * max(len(provider.urls), 1))
        return max(1, min(lines, bound))


class _Reads:
    """What one quote reads of a deployment, read once however many of its lanes ask."""

    def __init__(self, session: AsyncSession, queued: Callable[[str], int]) -> None:
        self.session, self._queued = session, queued
        self._ahead: dict[str, int] = {}
        self._speeds: dict[str, list[duration.BatchSpeed]] = {}

    async def ahead(self, deployment: Deployment) -> int:
        """Its placed jobs' pending lines, and the requests waiting in this process for its provider."""
        if deployment.id not in self._ahead:
            pending = await duration.lines_ahead(self.session, deployment.id)
            self._ahead[deployment.id] = pending + self._queued(deployment.provider.name)
        return self._ahead[deployment.id]

    async def speeds(self, deployment: Deployment) -> list[duration.BatchSpeed]:
        if deployment.id not in self._speeds:
            self._speeds[deployment.id] = await duration.batch_history(self.session, deployment.id, utcnow())
        return self._speeds[deployment.id]


def _id(lane: QuoteLane | None) -> str | None:
    return None if lane is None else lane.id


async def request_lines(
    session: AsyncSession, principal: Principal, request: QuoteRequest, store: FileStore | None
) -> tuple[list[InputLine], str]:
    """The lines of an uploaded input file of the team, or given inline, checked as a batch create
    checks them (a 400 naming the first wrong line); and their model."""
    if (request.input_file_id is None) == (request.lines is None):
        raise InvalidRequest("Give either input_file_id or lines.", param="input_file_id")
    check = InputCheck(request.endpoint)
    lines: list[InputLine] = []
    async for chunk in _chunks(session, principal.team_id, request, store):
        lines += await asyncio.to_thread(check.feed, chunk)
    last, verdict = check.verdict()
    lines += last
    if verdict.errors:
        first = verdict.errors[0]
        where = "" if first.line is None else f"line {first.line}: "
        raise InvalidRequest(f"{where}{first.message}", param=first.param or "lines", code=first.code)
    if verdict.model is None:  # a file with no request is an error above: kept for the type
        raise InvalidRequest("The lines name no model.", param="lines")
    return lines, verdict.model


async def _chunks(
    session: AsyncSession, team_id: str, request: QuoteRequest, store: FileStore | None
) -> AsyncIterator[bytes]:
    if request.lines is not None:
        yield b"".join(msgspec.json.encode(line) + b"\n" for line in request.lines)
        return
    assert request.input_file_id is not None
    stored = await get_file(session, team_id, request.input_file_id, param="input_file_id")
    if stored.purpose != BATCH_INPUT:
        raise InvalidRequest(f"The file {stored.id} is not a batch input file.", param="input_file_id")
    async for chunk in file_chunks(session, team_id, stored.id, store=store):
        yield chunk
