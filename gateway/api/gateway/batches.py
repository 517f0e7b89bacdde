"""`/v1/gateway/batches`: the caller's team's batches, and one batch's pin, totals and throughput.

A batch is a batch id of the team's usage records (`X-Gateway-Batch` requests), or a Batch API
job, whose lines are recorded under its id. The list holds both, ended batches too; one batch is
read while its pin is live, or, for a job, at any time (a job is placed by the runner, not by the
pin store, so it is shown without the pin's `confirmed` and `moves`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec
from litestar import Response, delete, get
from litestar.params import Parameter
from msgspec import UNSET, UnsetType
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api.openapi import documented, json_schema
from gateway.api.query_params import documented_limit, documented_query, page_size, text_param
from gateway.api.team_key import PrincipalDependency
from gateway.errors import InvalidRequest, NotFound
from gateway.jobs.repository import get_job
from gateway.metering.pricing import money_str
from gateway.metering.reports.batches import TeamBatch, batch_totals, team_batch, team_batches
from gateway.metering.reports.throughput import Throughput, batch_throughput
from gateway.routing.batch_pin import BatchPin
from gateway.routing.deployment import DeploymentTable
from gateway.routing.directives import BATCH_ID
from gateway.services import ServicesDependency

JSON = "application/json"
DEFAULT_PAGE, MAX_PAGE = 20, 100


class BatchView(msgspec.Struct, kw_only=True):
    """One batch. The pin's fields (provider to moves) are left out when no pin is live: for a job,
    provider, region, deployment and model come from its placement once it has one, and
    `last_used` is its last record's time."""

    id: str
    provider: str | UnsetType = UNSET
    region: str | UnsetType = UNSET
    deployment: str | UnsetType = UNSET
    model: str | UnsetType = UNSET
    created: int
    last_used: int | UnsetType = UNSET
    confirmed: bool | UnsetType = UNSET
    moves: int | UnsetType = UNSET
    live: bool  # a pin is in force: requests with this batch id go to its deployment
    job_status: str | UnsetType = UNSET  # a Batch API job's status
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost: str
    throughput: Throughput | None  # None before the batch has any record
    object: str = "gateway.batch"


class BatchSummary(msgspec.Struct, kw_only=True):
    id: str
    created: int
    last_used: int | None  # its last record's time; None before it has any
    requests: int  # usage records so far
    job_status: str | None  # a Batch API job's status; None for a batch of X-Gateway-Batch requests
    object: str = "gateway.batch"


class BatchSummaryList(msgspec.Struct, kw_only=True):
    data: list[BatchSummary]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: str = "list"


class BatchDeleted(msgspec.Struct):
    id: str
    deleted: bool = True
    object: str = "gateway.batch"


# `_batch_id`'s rule, for the OpenAPI document
BatchIdParam = Annotated[str, Parameter(schema_extra={"type": "string", "pattern": f"^{BATCH_ID.pattern}$"})]


def _batch_id(batch_id: str) -> str:
    if not BATCH_ID.fullmatch(batch_id):
        raise InvalidRequest("A batch id is 1-128 characters of A-Za-z0-9._:-", param="batch_id")
    return batch_id


def _unix(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def _not_found(batch_id: str) -> NotFound:
    return NotFound(
        f"No live batch or batch job '{batch_id}' for this team", param="batch_id", code="batch_not_found"
    )


def _json(payload: object) -> Response[bytes]:
    return Response(msgspec.json.encode(payload), media_type=JSON)


@get("/v1/gateway/batches", operation_class=documented(response=json_schema(BatchSummaryList)))
async def list_batches(
    services: ServicesDependency,
    principal: PrincipalDependency,
    limit: Annotated[str | None, documented_limit(MAX_PAGE, DEFAULT_PAGE)] = None,
    after: Annotated[str | None, documented_query("The last id of the previous page.")] = None,
) -> Response[bytes]:
    """The team's batches, newest first: those of its usage records and its Batch API jobs."""
    size = page_size(limit, "limit", default=DEFAULT_PAGE, maximum=MAX_PAGE)
    async with services.sessions() as session:
        rows, has_more = await team_batches(
            session, principal.team_id, limit=size, after=text_param(after, "after")
        )
    data = [
        BatchSummary(
            id=row.id,
            created=int(row.created_at.timestamp()),
            last_used=_unix(row.last_used_at),
            requests=row.requests,
            job_status=row.job_status,
        )
        for row in rows
    ]
    first, last = (data[0].id, data[-1].id) if data else (None, None)
    return _json(BatchSummaryList(data=data, first_id=first, last_id=last, has_more=has_more))


@get("/v1/gateway/batches/{batch_id:str}", operation_class=documented(response=json_schema(BatchView)))
async def get_batch(
    services: ServicesDependency, principal: PrincipalDependency, batch_id: BatchIdParam
) -> Response[bytes]:
    team_id, batch_id = principal.team_id, _batch_id(batch_id)
    pin = await services.pins.touch(team_id, batch_id, recent=False)
    async with services.sessions() as session:
        if pin is not None:
            view = _pin_fields(pin)
            listed = await team_batch(session, team_id, batch_id)
            if listed is not None and listed.job_status is not None:  # a job whose lines hold the pin
                view = msgspec.structs.replace(view, job_status=listed.job_status)
        else:
            listed = await team_batch(session, team_id, batch_id)
            if listed is None or listed.job_status is None:  # an ended batch starts anew: not found
                raise _not_found(batch_id)
            view = await _recorded_fields(session, services.table, team_id, listed)
        # A live pin's figures cover the batch since the pin was made (an id may be used again).
        since = None if pin is None else datetime.fromtimestamp(pin.created_at, UTC)
        totals = await batch_totals(session, team_id, batch_id, since)
        figures = await batch_throughput(session, team_id, batch_id, since)
    view = msgspec.structs.replace(
        view,
        requests=totals.requests,
        prompt_tokens=totals.prompt_tokens,
        completion_tokens=totals.completion_tokens,
        cached_tokens=totals.cached_tokens,
        cache_write_tokens=totals.cache_write_tokens,
        cost=money_str(totals.cost),
        throughput=figures,
    )
    return _json(view)


def _empty_view(batch_id: str, created: int, live: bool) -> BatchView:
    return BatchView(
        id=batch_id,
        created=created,
        live=live,
        requests=0,
        prompt_tokens=0,
        completion_tokens=0,
        cached_tokens=0,
        cache_write_tokens=0,
        cost="0",
        throughput=None,
    )


def _pin_fields(pin: BatchPin) -> BatchView:
    return msgspec.structs.replace(
        _empty_view(pin.batch_id, int(pin.created_at), live=True),
        provider=pin.provider,
        region=pin.region,
        deployment=pin.deployment,
        model=pin.model,
        last_used=int(pin.last_used_at),
        confirmed=pin.confirmed,
        moves=pin.moves,
    )


async def _recorded_fields(
    session: AsyncSession, table: DeploymentTable, team_id: str, listed: TeamBatch
) -> BatchView:
    """A job, shown from its row and its records."""
    view = _empty_view(listed.id, int(listed.created_at.timestamp()), live=False)
    if listed.last_used_at is not None:
        view = msgspec.structs.replace(view, last_used=int(listed.last_used_at.timestamp()))
    job = await get_job(session, team_id, listed.id)
    view = msgspec.structs.replace(view, job_status=job.status)
    placed = next((d for d in table.all() if d.id == job.deployment), None)
    if placed is None:  # not placed yet, or on a deployment the catalog no longer has
        return view if job.model is None else msgspec.structs.replace(view, model=job.model)
    return msgspec.structs.replace(
        view,
        provider=placed.provider.name,
        region=placed.region,
        deployment=placed.id,
        model=placed.model,
    )


@delete(
    "/v1/gateway/batches/{batch_id:str}",
    status_code=200,
    operation_class=documented(response=json_schema(BatchDeleted)),
)
async def delete_batch(
    services: ServicesDependency, principal: PrincipalDependency, batch_id: BatchIdParam
) -> Response[bytes]:
    if not await services.pins.delete(principal.team_id, _batch_id(batch_id)):
        raise NotFound(f"No live batch '{batch_id}' for this team", param="batch_id", code="batch_not_found")
    return _json(BatchDeleted(batch_id))


BATCH_HANDLERS = [list_batches, get_batch, delete_batch]
