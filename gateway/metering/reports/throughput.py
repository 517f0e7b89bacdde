"""A batch's throughput, computed from its usage records: span, requests, tokens, cache hit ratio,
prefill and decode rates and time-to-first-token percentiles, overall and per prompt-length bucket.

`throughput(records)` is pure (records in, figures out); `batch_throughput` fetches the few
columns it reads. The definitions are documented in docs/batches.md ("Batch throughput"). Both
rates are over the batch's time at the upstream (the union of its requests' intervals from
dispatch to end), as a server's own tokens/s is: a continuous-batching server prefills and decodes
in the same steps, so splitting the time at each request's first token would leave the batch's
decode-only tail out of the prefill time and overstate the rate (by 15-20% on the reference
512-request batch) against the server's own counters. Percentiles are computed here rather than in SQL: SQLite has
no percentile function, and nearest-rank over the sorted values is what PostgreSQL's
`percentile_disc` gives.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

import msgspec
from sqlalchemy import Float, Table, cast, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import UsageRecord

SUCCEEDED = 200
# Upper bounds (exclusive) of the prompt-length buckets in prompt tokens (k = 1024); the last is open.
BUCKETS: tuple[tuple[str, float], ...] = (
    ("0-2k", 2048),
    ("2-8k", 8192),
    ("8-32k", 32768),
    ("32k+", math.inf),
)

_records: Table = UsageRecord.__table__  # type: ignore[assignment]


class TimedRecord(NamedTuple):
    """The columns of one usage record that throughput reads (in this order from the query)."""

    created_at: float  # unix seconds, when the request reached the gateway
    status: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    latency_ms: float
    ttft_ms: float | None
    queue_ms: float | None = None  # None (records from before it was kept): no wait


# A stretch of wall-clock time, (start, end) in unix seconds: a plain tuple, as there are two a record.
Interval = tuple[float, float]


def covered_s(intervals: Iterable[Interval]) -> float:
    """The time covered by at least one of the intervals (their union's length), in seconds."""
    total = 0.0
    start = end = -math.inf
    for next_start, next_end in sorted(intervals):
        if next_start > end:  # a gap: the stretch so far is complete
            total += end - start if end > start else 0.0
            start, end = next_start, next_end
        elif next_end > end:
            end = next_end
    return total + (end - start if end > start else 0.0)


class RequestCounts(msgspec.Struct, kw_only=True):
    succeeded: int
    failed: int


class TokenCounts(msgspec.Struct, kw_only=True):
    prompt: int
    cached: int
    completion: int


class TtftPercentiles(msgspec.Struct, kw_only=True):
    p50: float | None
    p90: float | None
    p99: float | None


class Figures(msgspec.Struct, kw_only=True):
    """The figures of one set of records (a whole batch, or one prompt-length bucket of it)."""

    span_s: float
    requests: RequestCounts
    tokens: TokenCounts
    cache_hit_ratio: float | None  # None without prompt tokens
    prefill_tokens_per_s: float | None  # None when no request has a TTFT (or they took no time)
    decode_tokens_per_s: float | None
    requests_without_ttft: int  # succeeded requests left out of the rates and percentiles
    ttft_ms: TtftPercentiles


class BucketFigures(Figures, kw_only=True):
    prompt_tokens: str  # the bucket: "0-2k", "2-8k", "8-32k" or "32k+"


class Throughput(Figures, kw_only=True):
    by_prompt_length: list[BucketFigures]  # empty buckets left out


F = TypeVar("F", bound=Figures)


def bucket_of(prompt_tokens: int) -> str:
    return next(name for name, upper in BUCKETS if prompt_tokens < upper)


def nearest_rank(ordered: Sequence[float], percent: float) -> float | None:
    """The smallest value with at least `percent`% of the values at or below it (None if empty)."""
    if not ordered:
        return None
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(slots=True)
class _Tally:
    """Running sums over records, so the records themselves need not be kept."""

    first_start: float = math.inf
    last_end: float = -math.inf
    succeeded: int = 0
    failed: int = 0
    prompt: int = 0
    cached: int = 0
    completion: int = 0
    without_ttft: int = 0
    prefill_tokens: int = 0  # uncached prompt tokens of the requests with a TTFT
    decode_tokens: int = 0  # completion tokens of the requests with a TTFT
    served: list[Interval] = field(default_factory=list)  # each of them, from its send upstream to its end
    ttfts: list[float] = field(default_factory=list)

    def add(self, record: TimedRecord) -> None:
        self.first_start = min(self.first_start, record.created_at)
        self.last_end = max(self.last_end, record.created_at + record.latency_ms / 1000)
        self.prompt += record.prompt_tokens
        self.cached += record.cached_tokens
        self.completion += record.completion_tokens
        if record.status != SUCCEEDED:
            self.failed += 1  # a failed request's timings say nothing about the upstream's speed
            return
        self.succeeded += 1
        if record.ttft_ms is None:
            self.without_ttft += 1
            return
        self.prefill_tokens += max(record.prompt_tokens - record.cached_tokens, 0)
        self.decode_tokens += record.completion_tokens
        dispatched = record.created_at + (record.queue_ms or 0.0) / 1000
        ended = max(record.created_at + record.latency_ms / 1000, dispatched + record.ttft_ms / 1000)
        self.served.append((dispatched, ended))
        self.ttfts.append(record.ttft_ms)

    def figures(self, kind: type[F], **labels: Any) -> F:
        self.ttfts.sort()
        served_s = covered_s(self.served)
        return kind(
            span_s=round(max(self.last_end - self.first_start, 0.0), 3),
            requests=RequestCounts(succeeded=self.succeeded, failed=self.failed),
            tokens=TokenCounts(prompt=self.prompt, cached=self.cached, completion=self.completion),
            cache_hit_ratio=_ratio(self.cached, self.prompt),
            prefill_tokens_per_s=_ratio(self.prefill_tokens, served_s),
            decode_tokens_per_s=_ratio(self.decode_tokens, served_s),
            requests_without_ttft=self.without_ttft,
            ttft_ms=TtftPercentiles(
                p50=nearest_rank(self.ttfts, 50),
                p90=nearest_rank(self.ttfts, 90),
                p99=nearest_rank(self.ttfts, 99),
            ),
            **labels,
        )


def _ratio(part: float, whole: float) -> float | None:
    return None if whole <= 0 else round(part / whole, 4)


def throughput(records: Iterable[TimedRecord]) -> Throughput | None:
    """The figures of these records, overall and per prompt-length bucket; None without records."""
    overall = _Tally()
    buckets = {name: _Tally() for name, _ in BUCKETS}
    for record in records:
        overall.add(record)
        buckets[bucket_of(record.prompt_tokens)].add(record)
    if overall.succeeded + overall.failed == 0:
        return None
    by_length = [
        tally.figures(BucketFigures, prompt_tokens=name)
        for name, tally in buckets.items()
        if tally.succeeded + tally.failed
    ]
    return overall.figures(Throughput, by_prompt_length=by_length)


async def batch_throughput(
    session: AsyncSession, team_id: str, batch_id: str, since: datetime | None
) -> Throughput | None:
    """The throughput of a batch's records (those since `since`, when given): eight columns a
    record, read in one pass and summed as they come; only the TTFTs and the prefill and decode
    intervals are kept, to sort."""
    c = _records.c
    statement = select(
        c.created_at,
        c.status,
        c.prompt_tokens,
        c.cached_tokens,
        c.completion_tokens,
        cast(c.latency_ms, Float),  # a float, not a Decimal per row: these are measurements
        cast(c.ttft_ms, Float),
        cast(c.queue_ms, Float),
    ).where(c.team_id == team_id, c.batch_id == batch_id)
    if since is not None:
        statement = statement.where(c.created_at >= since.astimezone(UTC))
    result = await session.execute(statement)
    return throughput(
        TimedRecord(_unix(created), status, prompt, cached, completion, latency, ttft, queue)
        for created, status, prompt, cached, completion, latency, ttft, queue in result
    )


def _unix(moment: datetime) -> float:
    """Unix seconds; a naive datetime (SQLite gives those back) is UTC already."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
