"""`/v1/messages/batches`: Anthropic's Message Batches API, as the anthropic SDK's
`client.messages.batches` uses it: create, list, retrieve, cancel, delete and read the results of the
caller's team's batches.

A Message Batch is a Batch API job (gateway.jobs) whose lines are Messages requests: the same
ledger, pin, runner, resume and metering as an OpenAI batch, each line sent as `/v1/messages`
sends a request (translated for an OpenAI-compatible provider). Its id is the job's id. Errors
come in Anthropic's envelope (`{"type": "error", ...}`: gateway.api.front.error_replies, by path),
and the key may come as the SDK's `x-api-key`.

Anthropic moves a batch's `request_counts` only once it has ended; the gateway counts each
request as its outcome is stored, so a poll shows progress. The results are built from the
ledger when asked, one JSON line per request, in the requests' order.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.di import Provide
from litestar.params import FromPath

from gateway.api.admin.body import decode_body
from gateway.api.anthropic.messages import API_KEY_HEADER, HEADERS
from gateway.api.openapi import documented, json_schema
from gateway.api.query_params import documented_limit, documented_query, page_size, path_id, text_param
from gateway.api.team_key import PrincipalDependency, provide_messages_principal
from gateway.db.models import BatchJob
from gateway.db.teams import as_utc
from gateway.dialects.messages.errors import error_envelope
from gateway.errors import Conflict, ErrorBody, ErrorDetail, InvalidRequest
from gateway.jobs import ledger
from gateway.jobs import repository as batches
from gateway.jobs.output_files import LineRecord
from gateway.schemas.batch_api import (
    MessageBatchCreate,
    MessageBatchDeleted,
    MessageBatchList,
    MessageBatchOutcome,
    MessageBatchOutcomeLine,
    MessageBatchRequestCounts,
    ServedMessageBatch,
)
from gateway.services import ServicesDependency

JSON = "application/json"
JSONL = "application/x-jsonl"
DEFAULT_PAGE, MAX_PAGE = 20, 1000  # Anthropic's
ENDPOINT = batches.MESSAGES_ENDPOINT
_PIN_HEADERS = [h for h in HEADERS if h["name"] in ("x-api-key", "X-Gateway-Region", "X-Gateway-Provider")]
_KEY = {"principal": Provide(provide_messages_principal)}
_PROCESSING = {"cancelling": "canceling", **dict.fromkeys(batches.ENDED, "ended")}
_ENCODER = msgspec.json.Encoder()


def _rfc3339(moment: datetime | None) -> str | None:
    return None if moment is None else as_utc(moment).isoformat().replace("+00:00", "Z")


def _ended_at(job: BatchJob) -> datetime | None:
    return job.completed_at or job.failed_at or job.expired_at or job.cancelled_at


def request_counts(job: BatchJob) -> MessageBatchRequestCounts:
    """The job's lines by Anthropic's result types: those with no outcome are processing while it
    runs, and once it has ended canceled, expired, or errored (its key stopped it)."""
    unfinished = job.request_total - job.request_completed - job.request_failed
    counts = {"processing": 0, "canceled": 0, "expired": 0, "errored": job.request_failed}
    left_as = {"cancelled": "canceled", "expired": "expired", "failed": "errored"}.get(
        job.status, "processing"
    )
    counts[left_as] += unfinished
    return MessageBatchRequestCounts(succeeded=job.request_completed, **counts)


def message_batch(job: BatchJob, request: Request) -> ServedMessageBatch:
    status = _PROCESSING.get(job.status, "in_progress")
    results_url = None
    if status == "ended":
        results_url = f"{str(request.base_url).rstrip('/')}/v1/messages/batches/{job.id}/results"
    return ServedMessageBatch(
        id=job.id,
        processing_status=status,
        request_counts=request_counts(job),
        created_at=_rfc3339(job.created_at) or "",
        expires_at=_rfc3339(job.expires_at) or "",
        ended_at=_rfc3339(_ended_at(job)),
        cancel_initiated_at=_rfc3339(job.cancelling_at),
        results_url=results_url,
    )


def _json(payload: object) -> Response[bytes]:
    return Response(_ENCODER.encode(payload), media_type=JSON)


@post(
    "/v1/messages/batches",
    status_code=200,
    dependencies=_KEY,
    operation_class=documented(
        body=json_schema(MessageBatchCreate), response=json_schema(ServedMessageBatch), headers=_PIN_HEADERS
    ),
)
async def create_message_batch(
    request: Request, services: ServicesDependency, principal: PrincipalDependency
) -> Response[bytes]:
    """A request that is wrong (its custom_id, its JSON, a second model) is a 400 naming it, and no
    batch; a request the upstream refuses is an `errored` result."""
    spec = decode_body(await request.body(), MessageBatchCreate)
    directives = batches.job_directives(request.headers, None)
    async with services.sessions.begin() as session:
        job = await batches.create_message_batch(
            session, principal, spec.requests, directives, services.table
        )
    services.job_created()
    return _json(message_batch(job, request))


@get(
    "/v1/messages/batches",
    dependencies=_KEY,
    operation_class=documented(response=json_schema(MessageBatchList), headers=[API_KEY_HEADER]),
)
async def list_message_batches(
    request: Request,
    services: ServicesDependency,
    principal: PrincipalDependency,
    limit: Annotated[str | None, documented_limit(MAX_PAGE, DEFAULT_PAGE)] = None,
    after_id: Annotated[str | None, documented_query("The page after this batch (older ones).")] = None,
    before_id: Annotated[str | None, documented_query("The page before this batch (newer ones).")] = None,
) -> Response[bytes]:
    """Newest first, as Anthropic lists them."""
    size = page_size(limit, "limit", default=DEFAULT_PAGE, maximum=MAX_PAGE)
    after, before = text_param(after_id, "after_id"), text_param(before_id, "before_id")
    if after is not None and before is not None:
        raise InvalidRequest("Give after_id or before_id, not both.", param="before_id")
    async with services.sessions() as session:
        rows, has_more = await batches.list_jobs(
            session, principal.team_id, limit=size, after=after, before=before, endpoint=ENDPOINT
        )
    data = [message_batch(row, request) for row in rows]
    first, last = (data[0].id, data[-1].id) if data else (None, None)
    return _json(MessageBatchList(data, has_more, first, last))


async def _job(services: ServicesDependency, team_id: str, batch_id: str) -> BatchJob:
    async with services.sessions() as session:
        return await batches.get_job(
            session, team_id, path_id(batch_id, "message_batch_id"), endpoint=ENDPOINT
        )


@get(
    "/v1/messages/batches/{message_batch_id:str}",
    dependencies=_KEY,
    operation_class=documented(response=json_schema(ServedMessageBatch), headers=[API_KEY_HEADER]),
)
async def retrieve_message_batch(
    request: Request,
    services: ServicesDependency,
    principal: PrincipalDependency,
    message_batch_id: FromPath[str],
) -> Response[bytes]:
    return _json(message_batch(await _job(services, principal.team_id, message_batch_id), request))


@post(
    "/v1/messages/batches/{message_batch_id:str}/cancel",
    status_code=200,
    dependencies=_KEY,
    operation_class=documented(response=json_schema(ServedMessageBatch), headers=[API_KEY_HEADER]),
)
async def cancel_message_batch(
    request: Request,
    services: ServicesDependency,
    principal: PrincipalDependency,
    message_batch_id: FromPath[str],
) -> Response[bytes]:
    """`canceling` until the runner stops it; the requests that finished keep their results."""
    batch_id = path_id(message_batch_id, "message_batch_id")
    async with services.sessions.begin() as session:
        job = await batches.cancel_job(session, principal.team_id, batch_id, endpoint=ENDPOINT)
    return _json(message_batch(job, request))


@delete(
    "/v1/messages/batches/{message_batch_id:str}",
    status_code=200,
    dependencies=_KEY,
    operation_class=documented(response=json_schema(MessageBatchDeleted), headers=[API_KEY_HEADER]),
)
async def delete_message_batch(
    services: ServicesDependency, principal: PrincipalDependency, message_batch_id: FromPath[str]
) -> Response[bytes]:
    """Only an ended batch: cancel a running one first (409 until it has ended)."""
    batch_id = path_id(message_batch_id, "message_batch_id")
    async with services.sessions.begin() as session:
        await batches.delete_job(
            session, principal.team_id, batch_id, endpoint=ENDPOINT, store=services.file_store
        )
    return _json(MessageBatchDeleted(batch_id))


@get(
    "/v1/messages/batches/{message_batch_id:str}/results",
    dependencies=_KEY,
    operation_class=documented(
        content={JSONL: {"schema": json_schema(MessageBatchOutcomeLine)}}, headers=[API_KEY_HEADER]
    ),
)
async def message_batch_results(
    services: ServicesDependency, principal: PrincipalDependency, message_batch_id: FromPath[str]
) -> Response[bytes]:
    """One JSON line per request, once the batch has ended (409 before)."""
    batch_id = path_id(message_batch_id, "message_batch_id")
    async with services.sessions() as session:
        job = await batches.get_job(session, principal.team_id, batch_id, endpoint=ENDPOINT)
        if job.status not in batches.ENDED:
            raise Conflict(
                f"The batch {batch_id!r} has not ended yet: its results are ready once "
                "processing_status is ended.",
                param="message_batch_id",
            )
        lines = await ledger.line_records(session, job.id)
    return Response(results(job, lines), media_type=JSONL)


def results(job: BatchJob, lines: Sequence[LineRecord]) -> bytes:
    """The ended job's results, one line per request in the requests' order."""
    return b"".join(
        _ENCODER.encode(MessageBatchOutcomeLine(line.custom_id, _outcome(job, line))) + b"\n"
        for line in lines
    )


def _outcome(job: BatchJob, line: LineRecord) -> MessageBatchOutcome:
    if line.state == ledger.SUCCEEDED and line.response is not None:
        return MessageBatchOutcome("succeeded", message=msgspec.Raw(line.response.encode()))
    if line.state == ledger.FAILED:
        return MessageBatchOutcome("errored", error=_refusal(line))
    if job.status == "cancelled":
        return MessageBatchOutcome("canceled")
    if job.status == "expired":
        return MessageBatchOutcome("expired")
    # the job failed while it ran: its key was revoked or expired, its team deleted, its budget spent
    stopped: dict[str, Any] = (job.errors or [{}])[0]
    code = stopped.get("code")
    detail = ErrorDetail(
        message=str(stopped.get("message") or "The batch stopped before this request ran."),
        type="api_error",
        code=code,
    )
    status = 402 if code == "insufficient_quota" else 401  # Anthropic's billing and key errors
    return MessageBatchOutcome("errored", error=msgspec.Raw(error_envelope(detail, status)))


def _refusal(line: LineRecord) -> msgspec.Raw:
    """A failed line's error (stored as the gateway's error object, with the status it was
    answered with) in Anthropic's envelope, typed by that status as Anthropic types its errors."""
    try:
        detail = msgspec.json.decode(line.response or "", type=ErrorBody).error
    except msgspec.DecodeError:
        detail = ErrorDetail(message="The request failed.", type="api_error")
    return msgspec.Raw(error_envelope(detail, line.status_code or 500))


MESSAGE_BATCH_HANDLERS = [
    create_message_batch,
    list_message_batches,
    retrieve_message_batch,
    cancel_message_batch,
    delete_message_batch,
    message_batch_results,
]
