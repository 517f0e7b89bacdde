"""`/v1/batches`: create, list, retrieve and cancel the caller's team's batch jobs (OpenAI's Batch API).

A create reads and checks its whole input file, so it takes one of the process's file slots
(`files.max_concurrent`), as an upload does.

Cancelling a job already `cancelling` or `cancelled` answers the batch unchanged, as OpenAI does;
one past cancelling (`finalizing`, `completed`, `failed`, `expired`) is a 409 `conflict`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath
from msgspec import UNSET, UnsetType

from gateway.api.admin.body import decode_body
from gateway.api.gateway.quotes import quoter
from gateway.api.idempotent_creates import created_once
from gateway.api.openapi import DIRECTIVE_HEADERS, documented, json_schema
from gateway.api.query_params import documented_limit, documented_query, page_size, path_id, text_param
from gateway.api.team_key import PrincipalDependency
from gateway.auth.principal import Principal
from gateway.db.models import BatchJob
from gateway.db.teams import as_utc
from gateway.jobs import repository as batches
from gateway.jobs.placement import job_placement, place_job, placement_rule
from gateway.schemas.batch_api import (
    Batch,
    BatchCreate,
    BatchError,
    BatchErrors,
    BatchList,
    BatchUsage,
    GatewayPlacement,
    InputTokensDetails,
    OutputTokensDetails,
    RequestCounts,
    present,
)
from gateway.services import Services, ServicesDependency

JSON = "application/json"
DEFAULT_PAGE, MAX_PAGE = 20, 100  # OpenAI's
_PIN_HEADERS = [h for h in DIRECTIVE_HEADERS if h["name"] in ("X-Gateway-Region", "X-Gateway-Provider")]


def _create_body() -> dict[str, Any]:
    """BatchCreate's schema with the endpoints, windows and metadata bounds the jobs module holds to."""
    schema = json_schema(BatchCreate)
    fields = schema["properties"]
    fields["endpoint"] = {"enum": sorted(batches.ENDPOINTS)}
    fields["completion_window"] = {"enum": list(batches.COMPLETION_WINDOWS)}
    fields["metadata"] = {
        "anyOf": [
            {
                "type": "object",
                "maxProperties": batches.MAX_METADATA_PAIRS,
                "propertyNames": {"maxLength": batches.MAX_METADATA_KEY},
                "additionalProperties": {"type": "string", "maxLength": batches.MAX_METADATA_VALUE},
            },
            {"type": "null"},
        ]
    }
    return schema


def _unix(moment: datetime | None) -> int | UnsetType:
    return UNSET if moment is None else int(as_utc(moment).timestamp())


def _errors(job: BatchJob) -> BatchErrors | UnsetType:
    if not job.errors:
        return UNSET
    return BatchErrors([msgspec.convert(item, BatchError) for item in job.errors])


def batch_object(job: BatchJob) -> Batch:
    return Batch(
        id=job.id,
        endpoint=job.endpoint,
        input_file_id=job.input_file_id,
        completion_window=job.completion_window,
        status=job.status,
        created_at=int(as_utc(job.created_at).timestamp()),
        expires_at=int(as_utc(job.expires_at).timestamp()),
        request_counts=RequestCounts(job.request_total, job.request_completed, job.request_failed),
        usage=BatchUsage(
            input_tokens=job.prompt_tokens,
            output_tokens=job.completion_tokens,
            total_tokens=job.prompt_tokens + job.completion_tokens,
            input_tokens_details=InputTokensDetails(job.cached_tokens),
            output_tokens_details=OutputTokensDetails(),
        ),
        gateway=GatewayPlacement(job.deployment, job.paused_reason, present(job_placement(job))),
        model=present(job.model),
        errors=_errors(job),
        output_file_id=present(job.output_file_id),
        error_file_id=present(job.error_file_id),
        in_progress_at=_unix(job.in_progress_at),
        finalizing_at=_unix(job.finalizing_at),
        completed_at=_unix(job.completed_at),
        failed_at=_unix(job.failed_at),
        expired_at=_unix(job.expired_at),
        cancelling_at=_unix(job.cancelling_at),
        cancelled_at=_unix(job.cancelled_at),
        metadata=job.metadata_,
    )


def _json(payload: object) -> Response[bytes]:
    return Response(msgspec.json.encode(payload), media_type=JSON)


@post(
    "/v1/batches",
    status_code=200,
    operation_class=documented(body=_create_body(), response=json_schema(Batch), headers=_PIN_HEADERS),
)
async def create_batch(
    request: Request, services: ServicesDependency, principal: PrincipalDependency
) -> Response[bytes]:
    """A bad input file still makes a batch: `failed`, its `errors` naming the lines. A job asking
    for a placement is quoted and placed before the create answers (`gateway.jobs.placement`). With
    an `Idempotency-Key`, a repeat of the create answers the batch it made (gateway.idempotency)."""
    raw = await request.body()

    async def create() -> bytes:
        return msgspec.json.encode(await _create(raw, request, services, principal))

    return await created_once(request, services.idempotency, principal.team_id, raw, create)


async def _create(raw: bytes, request: Request, services: Services, principal: Principal) -> Batch:
    spec = decode_body(raw, BatchCreate)
    batches.check_metadata(spec.metadata)
    directives = batches.job_directives(request.headers, spec.metadata)
    rule = placement_rule(spec.metadata)
    async with services.file_slots.held(), services.sessions.begin() as session:
        job = await batches.create_job(
            session,
            batches.JobRequest(principal, spec, directives),
            services.table,
            store=services.file_store,
        )
        if rule is not None and job.status != "failed":
            await place_job(session, job, rule, principal, directives, quoter(services))
    services.job_created()
    return batch_object(job)


@get("/v1/batches", operation_class=documented(response=json_schema(BatchList)))
async def list_batches(
    services: ServicesDependency,
    principal: PrincipalDependency,
    limit: Annotated[str | None, documented_limit(MAX_PAGE, DEFAULT_PAGE)] = None,
    after: Annotated[str | None, documented_query("The last id of the previous page.")] = None,
) -> Response[bytes]:
    size = page_size(limit, "limit", default=DEFAULT_PAGE, maximum=MAX_PAGE)
    async with services.sessions() as session:
        rows, has_more = await batches.list_jobs(
            session, principal.team_id, limit=size, after=text_param(after, "after")
        )
    data = [batch_object(row) for row in rows]
    first, last = (data[0].id, data[-1].id) if data else (None, None)
    return _json(BatchList(data, first, last, has_more))


@get("/v1/batches/{batch_id:str}", operation_class=documented(response=json_schema(Batch)))
async def retrieve_batch(
    services: ServicesDependency, principal: PrincipalDependency, batch_id: FromPath[str]
) -> Response[bytes]:
    async with services.sessions() as session:
        job = await batches.get_job(session, principal.team_id, path_id(batch_id, "batch_id"))
    return _json(batch_object(job))


@post(
    "/v1/batches/{batch_id:str}/cancel",
    status_code=200,
    operation_class=documented(response=json_schema(Batch)),
)
async def cancel_batch(
    services: ServicesDependency, principal: PrincipalDependency, batch_id: FromPath[str]
) -> Response[bytes]:
    async with services.sessions.begin() as session:
        job = await batches.cancel_job(session, principal.team_id, path_id(batch_id, "batch_id"))
    return _json(batch_object(job))


BATCH_JOB_HANDLERS = [create_batch, list_batches, retrieve_batch, cancel_batch]
