"""How long a batch would take on a deployment: its lines' measured speed over its recent batches,
the lines already waiting there, and the lines a job keeps in flight.

A recent line (a usage record of a batch on the deployment, answered, with a time to first token)
gives one speed: its time to first token and its time per output token after the first. A batch of
`lines` lines with `output` tokens each, `in_flight` of them at once, takes
`max(1, lines / in_flight)` times one line's time at that speed, after the lines ahead of it; the
quote's expected duration is that at the median speed, its spread at the 10th and 90th
percentiles. Without such records it is "no history". A provider's Batch API promises its window
(`bound_s`); its expected duration is the median of the deployment's finished provider-run jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Float, and_, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import BatchJob, BatchLine, UsageRecord
from gateway.metering.reports.throughput import nearest_rank
from gateway.schemas.quotes import FROM_HISTORY, FROM_WINDOW, NO_HISTORY, QuoteDuration

HISTORY_DAYS = 7
HISTORY_LINES = 5000  # the most recent lines read for a deployment's speed
HISTORY_JOBS = 50
RUNNING = ("validating", "in_progress")
SUCCEEDED = 200


@dataclass(frozen=True, slots=True)
class LineSpeed:
    """One answered line: seconds to its first token, and per output token after it."""

    ttft_s: float
    per_token_s: float

    def line_s(self, output: float) -> float:
        return self.ttft_s + self.per_token_s * max(output - 1, 0)


@dataclass(frozen=True, slots=True)
class History:
    speeds: list[LineSpeed]
    batches: int  # how many batches they came from


@dataclass(frozen=True, slots=True)
class Shape:
    """What a duration is estimated for."""

    lines: int
    output_per_line: float  # output tokens a line, on average
    in_flight: int  # lines of the job at once
    queue_lines: int  # lines ahead of it on the deployment


def speed_of(latency_ms: float, queue_ms: float | None, ttft_ms: float, completion: int) -> LineSpeed:
    served_s = max(latency_ms - (queue_ms or 0.0) - ttft_ms, 0.0) / 1000
    return LineSpeed(ttft_ms / 1000, served_s / max(completion - 1, 1))


def expected(history: History, shape: Shape) -> QuoteDuration:
    """The duration at the history's median speed, p10-p90 as its spread; "no history" without any."""
    if not history.speeds:
        return QuoteDuration(
            basis=NO_HISTORY,
            expected_s=None,
            p10_s=None,
            p90_s=None,
            bound_s=None,
            history_batches=0,
            queue_lines=shape.queue_lines,
        )
    in_flight = max(shape.in_flight, 1)
    rounds = max(1.0, shape.lines / in_flight) + shape.queue_lines / in_flight
    durations = sorted(rounds * speed.line_s(shape.output_per_line) for speed in history.speeds)

    def at(percent: float) -> float | None:
        value = nearest_rank(durations, percent)
        return None if value is None else round(value, 3)

    return QuoteDuration(
        basis=FROM_HISTORY,
        expected_s=at(50),
        p10_s=at(10),
        p90_s=at(90),
        bound_s=None,
        history_batches=history.batches,
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


async def line_history(session: AsyncSession, deployment: str, now: datetime) -> History:
    """The speeds of the deployment's most recent answered batch lines of the last days."""
    r = UsageRecord
    query = (
        select(
            r.batch_id,
            cast(r.latency_ms, Float),
            cast(r.queue_ms, Float),
            cast(r.ttft_ms, Float),
            r.completion_tokens,
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
    batches: set[str] = set()
    speeds = []
    for batch_id, latency, queue, ttft, completion in await session.execute(query):
        batches.add(batch_id)
        speeds.append(speed_of(latency, queue, ttft, completion))
    return History(speeds, len(batches))


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
