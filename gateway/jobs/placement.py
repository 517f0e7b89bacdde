"""Placement by deadline and price: a Batch API job that asks for it
(`metadata.gateway_placement`: `cheapest`, `fastest` or `by_deadline`) is quoted when it is
created (`gateway.jobs.quotes`), and the lane its rule picks is recorded on it (`BatchJob.placement`,
with the quote) and pins it: the job's provider directive names the lane's provider, and its
`deployment` the lane's deployment. The runner then reads the lane's execution mode (the gateway
sends the lines, or the provider's Batch API runs them) and service tier from here; once the job
runs, its pin holds as any job's.

A placed job may ask a completion window shorter than OpenAI's 24h (`1h` to `24h`): its deadline,
which `by_deadline` places it by and which expires it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import timedelta

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth.principal import Principal
from gateway.db.models import BatchJob, BatchLine
from gateway.errors import InvalidRequest
from gateway.jobs.input_lines import InputLine
from gateway.jobs.ledger import PendingLine
from gateway.jobs.quotes.lanes import GATEWAY
from gateway.jobs.quotes.quote import RULES, Quoter, pick, window_of
from gateway.routing.directives import Directives
from gateway.schemas.quotes import JobPlacement

PLACEMENT_KEY = "gateway_placement"


def placement_rule(metadata: Mapping[str, str] | None) -> str | None:
    """The rule a create's metadata asks for, None when it asks none; a 400 for an unknown one."""
    rule = (metadata or {}).get(PLACEMENT_KEY)
    if rule is not None and rule not in RULES:
        raise InvalidRequest(
            f"metadata.{PLACEMENT_KEY} must be one of: {', '.join(RULES)}.", param=f"metadata.{PLACEMENT_KEY}"
        )
    return rule


def placed_window(window: str) -> timedelta:
    """A placed job's completion window (1h to 24h), else a 400."""
    span = window_of(window)
    if span is None:
        raise InvalidRequest(
            "completion_window must be 1h to 24h for a job with a gateway_placement.",
            param="completion_window",
        )
    return span


async def place_job(
    session: AsyncSession,
    job: BatchJob,
    rule: str,
    principal: Principal,
    directives: Directives,
    quoter: Quoter,
) -> JobPlacement:
    """Quote the job's stored lines, pick the rule's lane and pin the job to it (in the caller's
    transaction)."""
    rows = await session.execute(
        select(BatchLine.custom_id, BatchLine.body, BatchLine.prefix_key)
        .where(BatchLine.job_id == job.id)
        .order_by(BatchLine.line_no)
    )
    lines = [InputLine(custom_id, body, prefix) for custom_id, body, prefix in rows]
    quote = await quoter.quote(
        session,
        principal,
        directives,
        lines,
        model=job.model or "",
        endpoint=job.endpoint,
        window=job.completion_window,
    )
    chosen = pick(quote.lanes, rule)
    if chosen is None:  # quote_lanes raises before this when the model has no deployment
        raise InvalidRequest("No lane can run this batch.", param="metadata")
    placement = JobPlacement(
        rule=rule,
        lane=chosen.id,
        deployment=chosen.deployment,
        execution=chosen.execution,
        service_tier=chosen.service_tier,
        quote=quote,
    )
    job.placement = msgspec.to_builtins(placement)
    job.deployment = chosen.deployment
    kept = dict(job.directives or {})
    kept["provider"] = chosen.provider
    job.directives = kept
    await session.flush()
    return placement


def job_placement(job: BatchJob) -> JobPlacement | None:
    return None if job.placement is None else msgspec.convert(job.placement, JobPlacement)


def runs_lines(job: BatchJob) -> bool:
    """The job was placed on a lane where the gateway sends its lines (whatever its provider's
    `batch_execution`)."""
    return job.placement is not None and job.placement.get("execution") == GATEWAY


def with_tier(lines: Sequence[PendingLine], job: BatchJob) -> list[PendingLine]:
    """The lines with their placed lane's service tier in their bodies (as is without one)."""
    tier = None if job.placement is None else job.placement.get("service_tier")
    if not isinstance(tier, str):
        return list(lines)
    tiered = []
    for line in lines:
        body = msgspec.json.decode(line.body)
        body["service_tier"] = tier
        tiered.append(dataclasses.replace(line, body=msgspec.json.encode(body).decode()))
    return tiered
