"""How long a batch would take on a deployment: the rates its recent batches were served at, the
lines already waiting there, and the lines a job keeps in flight.

Each recent batch of the deployment (its answered lines with a time to first token, gateway-run)
gives one estimate. From its records: its prefill rate (uncached prompt tokens over the time some
line waited for its first token), its decode rate (output tokens over the time some line was
generating), how many lines were generating at once on average, and how much its prefill and
decode overlapped (its span over the time the two would take one after the other). A batch of P
uncached prompt tokens and C output tokens then takes `P / prefill + C / decode`, the decode rate
scaled down when it keeps fewer lines in flight than that batch did, times that batch's overlap;
the lines ahead of it add their share. Estimated from a batch of the same shape, that is the
batch's own span. The expected duration is the median of the recent batches' estimates; its spread
their 10th to 90th percentiles, and at least `MIN_SPREAD` of the expected either side, since a
few batches say little about the spread. Without such batches it is "no history". A provider's
Batch API promises its window (`bound_s`); its expected duration is the median of the deployment's
finished provider-run jobs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Float, and_, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import BatchJob, BatchLine, UsageRecord
from gateway.metering.reports.throughput import TimedRecord, covered_s, nearest_rank
from gateway.schemas.quotes import FROM_HISTORY, FROM_WINDOW, NO_HISTORY, QuoteDuration

HISTORY_DAYS = 7
HISTORY_LINES = 20_000  # the most recent lines read for a deployment's rates
HISTORY_BATCHES = 20  # the most recent batches among them
HISTORY_JOBS = 50
MIN_SPREAD = 0.2  # the spread is at least this share of the expected duration, either side
RUNNING = ("validating", "in_progress")
SUCCEEDED = 200


@dataclass(frozen=True, slots=True)
class BatchSpeed:
    """What one recent batch was served at."""

    prefill_per_s: float  # uncached prompt tokens a second, while some line waited for its first
    decode_per_s: float  # output tokens a second, while some line was generating
    generating: float  # lines generating at once, on average
    overlap: float  # its span over prefill time plus decode time (1: none)

    def estimate(self, prompt: int, output: int, in_flight: int) -> float:
        decode = self.decode_per_s * min(1.0, in_flight / self.generating)
        return (prompt / self.prefill_per_s + output / decode) * self.overlap


def batch_speed(records: Sequence[TimedRecord]) -> BatchSpeed | None:
    """A batch's speed from its answered lines' records (each with a time to first token): its
    prefill over the time some line waited for its first token, its decode over the time some line
    was generating; None when they do not show both."""
    prompt = output = 0
    prefill: list[tuple[float, float]] = []
    decode: list[tuple[float, float]] = []
    start, end = math.inf, -math.inf
    for record in records:
        if record.status != SUCCEEDED or record.ttft_ms is None:
            continue
        dispatched = record.created_at + (record.queue_ms or 0.0) / 1000
        first_token = dispatched + record.ttft_ms / 1000
        ended = max(record.created_at + record.latency_ms / 1000, first_token)
        prompt += max(record.prompt_tokens - record.cached_tokens, 0)
        output += record.completion_tokens
        prefill.append((dispatched, first_token))
        decode.append((first_token, ended))
        start, end = min(start, record.created_at), max(end, ended)
    prefill_s, decode_s = covered_s(prefill), covered_s(decode)
    if prompt <= 0 or output <= 0 or prefill_s <= 0 or decode_s <= 0:
        return None
    generating_s = sum(stop - begin for begin, stop in decode)
    return BatchSpeed(
        prefill_per_s=prompt / prefill_s,
        decode_per_s=output / decode_s,
        generating=max(generating_s / decode_s, 1.0),
        overlap=min((end - start) / (prefill_s + decode_s), 1.0),
    )


@dataclass(frozen=True, slots=True)
class Shape:
    """What a duration is estimated for."""

    lines: int
    prompt: int  # uncached prompt tokens
    output: int
    in_flight: int  # lines of the job at once
    queue_lines: int  # lines ahead of it on the deployment


def expected(speeds: Sequence[BatchSpeed], shape: Shape) -> QuoteDuration:
    """The median of the batches' estimates, their p10-p90 (at least MIN_SPREAD either side) as
    its spread; "no history" without any."""
    if not speeds:
        return QuoteDuration(
            basis=NO_HISTORY,
            expected_s=None,
            p10_s=None,
            p90_s=None,
            bound_s=None,
            history_batches=0,
            queue_lines=shape.queue_lines,
        )
    ahead = 1 + shape.queue_lines / max(shape.lines, 1)
    estimates = sorted(
        ahead * speed.estimate(shape.prompt, shape.output, max(shape.in_flight, 1)) for speed in speeds
    )
    middle = nearest_rank(estimates, 50) or 0.0
    low = min(nearest_rank(estimates, 10) or middle, middle * (1 - MIN_SPREAD))
    high = max(nearest_rank(estimates, 90) or middle, middle * (1 + MIN_SPREAD))
    return QuoteDuration(
        basis=FROM_HISTORY,
        expected_s=round(middle, 3),
        p10_s=round(low, 3),
        p90_s=round(high, 3),
        bound_s=None,
        history_batches=len(speeds),
        queue_lines=shape.queue_lines,
    )


def within_window(durations: Sequence[float], window_s: float, queue_lines: int) -> QuoteDuration:
    """A provider Batch API's: its window as the bound, the median of past jobs as expected."""
    ordered = sorted(durations)
    return QuoteDuration(
        basis=FROM_HISTORY if ordered else FROM_WINDOW,
        expected_s=nearest_rank(ordered, 50),
        p10_s=nearest_rank(ordered, 10),
        p90_s=nearest_rank(ordered, 90),
        bound_s=window_s,
        history_batches=len(ordered),
        queue_lines=queue_lines,
    )


async def batch_history(session: AsyncSession, deployment: str, now: datetime) -> list[BatchSpeed]:
    """The speeds of the deployment's most recent batches of the last days (their answered,
    gateway-run lines: those with a time to first token)."""
    r = UsageRecord
    query = (
        select(
            r.batch_id,
            r.created_at,
            r.status,
            r.prompt_tokens,
            r.cached_tokens,
            r.completion_tokens,
            cast(r.latency_ms, Float),
            cast(r.ttft_ms, Float),
            cast(r.queue_ms, Float),
        )
        .where(
            r.deployment == deployment,
            r.batch_id.is_not(None),
            r.status == SUCCEEDED,
            r.ttft_ms.is_not(None),
            r.created_at >= now - timedelta(days=HISTORY_DAYS),
        )
        .order_by(r.created_at.desc())
        .limit(HISTORY_LINES)
    )
    batches: dict[str, list[TimedRecord]] = defaultdict(list)
    for batch_id, created, *columns in await session.execute(query):
        if batch_id in batches or len(batches) < HISTORY_BATCHES:
            batches[batch_id].append(TimedRecord(_unix(created), *columns))
    speeds = (batch_speed(records) for records in batches.values())
    return [speed for speed in speeds if speed is not None]


def _unix(moment: datetime) -> float:
    return moment.timestamp() if moment.tzinfo is not None else moment.replace(tzinfo=UTC).timestamp()


async def provider_job_durations(session: AsyncSession, deployment: str) -> list[float]:
    """Seconds from start to the last result of the deployment's recent jobs its provider ran."""
    query = (
        select(BatchJob.in_progress_at, BatchJob.finalizing_at, BatchJob.placement)
        .where(
            BatchJob.deployment == deployment,
            BatchJob.status == "completed",
            BatchJob.in_progress_at.is_not(None),
            BatchJob.finalizing_at.is_not(None),
        )
        .order_by(BatchJob.created_at.desc())
        .limit(HISTORY_JOBS)
    )
    durations = []
    for started, finalizing, placement in await session.execute(query):
        if placement is not None and placement.get("execution") != "provider":
            continue  # placed to run through the gateway
        assert started is not None and finalizing is not None  # the query's condition
        durations.append((finalizing - started).total_seconds())
    return durations


async def lines_ahead(session: AsyncSession, deployment: str) -> int:
    """Pending lines of the jobs placed on the deployment that have not ended."""
    query = (
        select(func.count())
        .select_from(BatchLine)
        .join(BatchJob, and_(BatchJob.id == BatchLine.job_id))
        .where(BatchJob.deployment == deployment, BatchJob.status.in_(RUNNING), BatchLine.state == "pending")
    )
    return int((await session.execute(query)).scalar_one())
