"""`/v1/files`: upload, list, read, download and delete the caller's team's files (OpenAI's Files API).

Only purpose `batch` may be uploaded: the gateway keeps files for its Batch API. An upload may be
up to OpenAI's batch input limit (`MAX_FILE_BYTES`), above the gateway's `limits.max_body_bytes`:
this route alone raises Litestar's body limit, and Litestar's streaming multipart parser spools the
file to a temporary file while it arrives. Then, in one of the process's file slots
(`files.max_concurrent`), it is copied to the store a chunk at a time (`gateway.jobs.files.store`:
S3 in parts, PostgreSQL in one streamed COPY row).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import AsyncIterator
from typing import IO, Annotated

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.datastructures import UploadFile
from litestar.params import FromPath
from litestar.response import Stream
from msgspec import UNSET

from gateway.api.idempotent_creates import created_once
from gateway.api.openapi import documented, json_schema
from gateway.api.query_params import documented_limit, documented_query, page_size, path_id, text_param
from gateway.api.team_key import PrincipalDependency
from gateway.db.models import StoredFile
from gateway.db.teams import as_utc
from gateway.errors import InvalidRequest
from gateway.idempotency import IDEMPOTENCY_HEADER
from gateway.jobs.files import repository as files
from gateway.schemas.batch_api import FileDeleted, FileList, OpenAIFile
from gateway.services import ServicesDependency

JSON = "application/json"
OCTETS = "application/octet-stream"
MAX_FILE_BYTES = 200 * 1024 * 1024  # OpenAI's limit for a batch input file
MULTIPART_SLACK_BYTES = 64 * 1024  # the boundaries and part headers around the file
UPLOAD_CHUNK_BYTES = 1024 * 1024  # read from the spooled upload at a time
UPLOAD_PURPOSES = (files.BATCH_INPUT,)
UPLOAD_FORM = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "The JSONL input of a batch."},
        "purpose": {"enum": list(UPLOAD_PURPOSES)},
    },
    "required": ["file", "purpose"],
}
MAX_FILENAME = 512  # StoredFile.filename's column
DEFAULT_PAGE = MAX_PAGE = 10_000  # OpenAI's default and maximum
_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def file_object(stored: StoredFile) -> OpenAIFile:
    return OpenAIFile(
        id=stored.id,
        bytes=stored.bytes,
        created_at=int(as_utc(stored.created_at).timestamp()),
        filename=stored.filename,
        purpose=files.wire_purpose(stored.purpose),
        expires_at=UNSET if stored.expires_at is None else int(as_utc(stored.expires_at).timestamp()),
    )


def _json(payload: object) -> Response[bytes]:
    return Response(msgspec.json.encode(payload), media_type=JSON)


def _purpose(value: object) -> str:
    if value not in UPLOAD_PURPOSES:
        raise InvalidRequest(
            f"purpose must be one of: {', '.join(UPLOAD_PURPOSES)} (the gateway stores files for batches only).",
            param="purpose",
        )
    return str(value)


def _filename(upload: UploadFile) -> str:
    name = _CONTROL.sub("", upload.filename or "").strip()
    return name[:MAX_FILENAME] or "upload.jsonl"


async def _size(upload: UploadFile) -> int:
    """The uploaded file's size (its spooled copy's), 413 past the limit; read from the start next."""
    size = await asyncio.to_thread(_spooled_size, upload.file)
    if size > MAX_FILE_BYTES:
        raise InvalidRequest(
            f"The file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB, the limit for a batch's input.",
            param="file",
            code="file_too_large",
            status=413,
        )
    return size


def _spooled_size(file: IO[bytes]) -> int:
    size = file.seek(0, os.SEEK_END)
    file.seek(0)
    return size


def _digest(file: IO[bytes]) -> str:
    """The spooled upload's SHA-256 (in a thread: up to 200 MB are read)."""
    digest = hashlib.sha256()
    file.seek(0)
    while chunk := file.read(UPLOAD_CHUNK_BYTES):
        digest.update(chunk)
    file.seek(0)
    return digest.hexdigest()


async def _chunks(upload: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await upload.read(UPLOAD_CHUNK_BYTES):
        yield chunk


@post(
    "/v1/files",
    status_code=200,
    request_max_body_size=MAX_FILE_BYTES + MULTIPART_SLACK_BYTES,
    operation_class=documented(
        body=UPLOAD_FORM, body_type="multipart/form-data", response=json_schema(OpenAIFile)
    ),
)
async def upload_file(
    request: Request, services: ServicesDependency, principal: PrincipalDependency
) -> Response[bytes]:
    """multipart/form-data: `file` and `purpose`, read once the key is checked. With an
    `Idempotency-Key`, a repeat of the upload answers the file the first one made: the same purpose,
    filename and bytes, whatever its multipart boundary (an SDK draws a new one for each retry)."""
    form = await request.form()
    try:
        purpose = _purpose(form.get("purpose"))
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest("file must be the uploaded file (multipart/form-data).", param="file")
        size = await _size(upload)
        filename = _filename(upload)

        async def store() -> bytes:
            async with services.file_slots.held(), services.sessions.begin() as session:
                stored = await files.store_upload(
                    session,
                    principal.team_id,
                    purpose,
                    filename,
                    size,
                    _chunks(upload),
                    store=services.file_store,
                )
            return msgspec.json.encode(file_object(stored))

        fields = b""  # what makes two uploads the same, read for a keyed one only
        if IDEMPOTENCY_HEADER in request.headers:
            digest = await asyncio.to_thread(_digest, upload.file)
            fields = msgspec.json.encode([purpose, filename, size, digest])
        return await created_once(request, services.idempotency, principal.team_id, fields, store)
    finally:
        for value in form.values():
            if isinstance(value, UploadFile):
                await value.close()


def _order(value: str | None) -> bool:
    """True for newest first (OpenAI's default `desc`)."""
    if value not in (None, "asc", "desc"):
        raise InvalidRequest("order must be asc or desc.", param="order")
    return value != "asc"


@get("/v1/files", operation_class=documented(response=json_schema(FileList)))
async def list_files(
    services: ServicesDependency,
    principal: PrincipalDependency,
    purpose: Annotated[str | None, documented_query("Only files of this purpose.")] = None,
    limit: Annotated[str | None, documented_limit(MAX_PAGE, DEFAULT_PAGE)] = None,
    order: Annotated[
        str | None, documented_query("By created_at: asc, or desc (the default).", enum=["asc", "desc"])
    ] = None,
    after: Annotated[str | None, documented_query("The last id of the previous page.")] = None,
) -> Response[bytes]:
    newest_first = _order(order)
    size = page_size(limit, "limit", default=DEFAULT_PAGE, maximum=MAX_PAGE)
    async with services.sessions() as session:
        rows, has_more = await files.list_files(
            session,
            principal.team_id,
            purpose=text_param(purpose, "purpose"),
            limit=size,
            after=text_param(after, "after"),
            newest_first=newest_first,
        )
    data = [file_object(row) for row in rows]
    first, last = (data[0].id, data[-1].id) if data else (None, None)
    return _json(FileList(data, first, last, has_more))


@get("/v1/files/{file_id:str}", operation_class=documented(response=json_schema(OpenAIFile)))
async def retrieve_file(
    services: ServicesDependency, principal: PrincipalDependency, file_id: FromPath[str]
) -> Response[bytes]:
    async with services.sessions() as session:
        stored = await files.get_file(session, principal.team_id, path_id(file_id, "file_id"))
    return _json(file_object(stored))


@delete(
    "/v1/files/{file_id:str}", status_code=200, operation_class=documented(response=json_schema(FileDeleted))
)
async def delete_file(
    services: ServicesDependency, principal: PrincipalDependency, file_id: FromPath[str]
) -> Response[bytes]:
    async with services.sessions.begin() as session:
        stored = await files.delete_file(
            session, principal.team_id, path_id(file_id, "file_id"), store=services.file_store
        )
    return _json(FileDeleted(stored.id))


@get(
    "/v1/files/{file_id:str}/content",
    media_type=OCTETS,
    response_description="The file's bytes",
    operation_class=documented(),
)
async def file_content(
    services: ServicesDependency, principal: PrincipalDependency, file_id: FromPath[str]
) -> Stream:
    """The bytes as the store hands them out, a chunk at a time. The first chunk is read before the
    answer starts, so that an absent file (404) or a failing store (503) is an error object; every
    read of the database is over by then."""
    async with services.sessions() as session:
        chunks = files.download_chunks(
            session, principal.team_id, path_id(file_id, "file_id"), store=services.file_store
        )
        first = await anext(chunks, b"")
    return Stream(_resumed(first, chunks), media_type=OCTETS)


async def _resumed(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk


FILE_HANDLERS = [upload_file, list_files, retrieve_file, delete_file, file_content]
