"""`S3FileStore`: the Files API's bytes in a bucket of an S3-compatible object store, over one
aiobotocore client per process.

A file goes up as it arrives, in parts of `PART_BYTES` (S3's multipart upload; a file smaller than
one part is one plain put), and comes down a chunk at a time: the store never holds a whole file.

Every failure of the store is a `ServiceUnavailable` (503): the message and the log line name
neither the endpoint nor the credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import aiohttp
import structlog
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from gateway.errors import NotFound, ServiceUnavailable
from gateway.settings import S3Settings

log = structlog.get_logger("gateway.files")
# A store that answers nothing must not hold a request for long: the caller gets a 503 instead.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
MAX_ATTEMPTS = 3  # botocore's own retries of a throttled or dropped call
MISSING_CODES = frozenset({"NoSuchKey", "404"})
PART_BYTES = 8 * 1024 * 1024  # an upload's part (S3 takes at least 5 MiB for all but the last)
READ_BYTES = 1024 * 1024  # what a reader of an object is handed at a time


class S3FileStore:
    """A bucket of an S3-compatible object store. The client is opened at the first call (it needs
    the running event loop) and closed by `aclose`."""

    def __init__(self, settings: S3Settings) -> None:
        self._settings = settings
        self._exits = contextlib.AsyncExitStack()
        self._client: Any = None  # aiobotocore's S3 client: generated at run time, untyped
        self._opening = asyncio.Lock()

    def key(self, file_id: str) -> str:
        return self._settings.prefix + file_id

    async def put(self, file_id: str, chunks: AsyncIterable[bytes]) -> None:
        """Store the chunks as the object's bytes: one put for a file under a part's size, a
        multipart upload (aborted on any failure) for a larger one."""
        async with self._call("put"):
            client = await self._opened()
            parts = _parts(chunks)
            first = await anext(parts, b"")
            second = await anext(parts, None)
            if second is None:
                await client.put_object(Bucket=self._settings.bucket, Key=self.key(file_id), Body=first)
                return
            await self._upload_parts(client, file_id, _chained((first, second), parts))

    async def _upload_parts(self, client: Any, file_id: str, parts: AsyncIterator[bytes]) -> None:
        where = {"Bucket": self._settings.bucket, "Key": self.key(file_id)}
        upload_id = (await client.create_multipart_upload(**where))["UploadId"]
        try:
            done = []
            number = 0
            async for part in parts:
                number += 1
                sent = await client.upload_part(**where, UploadId=upload_id, PartNumber=number, Body=part)
                done.append({"PartNumber": number, "ETag": sent["ETag"]})
            await client.complete_multipart_upload(
                **where, UploadId=upload_id, MultipartUpload={"Parts": done}
            )
        except BaseException:
            # Nothing half-stored stays behind (a store may also expire unfinished uploads).
            with contextlib.suppress(Exception):
                await client.abort_multipart_upload(**where, UploadId=upload_id)
            raise

    async def get(self, file_id: str) -> bytes:
        """The object's bytes; NotFound when the bucket has no such object."""
        async with self._call("get"):
            async with await self._object_body(file_id) as body:
                data: bytes = await body.read()
            return data

    async def chunks(self, file_id: str) -> AsyncIterator[bytes]:
        """The object's bytes a chunk at a time; NotFound as `get`."""
        async with self._call("get"), await self._object_body(file_id) as body:
            while chunk := await body.read(READ_BYTES):
                yield chunk

    async def _object_body(self, file_id: str) -> Any:
        """The streamed body of the file's object (an async context manager); NotFound without one."""
        client = await self._opened()
        try:
            reply = await client.get_object(Bucket=self._settings.bucket, Key=self.key(file_id))
        except ClientError as exc:
            if _error_code(exc) in MISSING_CODES:
                raise NotFound(f"No such File object: {file_id}", param="file_id") from None
            raise
        return reply["Body"]

    async def delete(self, file_id: str) -> None:
        """Remove the object; an object already gone is no error (S3's delete is idempotent)."""
        async with self._call("delete"):
            client = await self._opened()
            await client.delete_object(Bucket=self._settings.bucket, Key=self.key(file_id))

    async def aclose(self) -> None:
        await self._exits.aclose()
        self._client = None

    async def _opened(self) -> Any:
        async with self._opening:
            if self._client is None:
                settings = self._settings
                config = AioConfig(
                    connect_timeout=CONNECT_TIMEOUT_S,
                    read_timeout=READ_TIMEOUT_S,
                    retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
                    # S3-compatible servers (MinIO, Ceph, moto) name the bucket in the path
                    s3={"addressing_style": "path"},
                )
                creating = get_session().create_client(
                    "s3",
                    endpoint_url=settings.endpoint_url,
                    region_name=settings.region,
                    aws_access_key_id=settings.access_key_id,
                    aws_secret_access_key=settings.secret_access_key,
                    config=config,
                )
                self._client = await self._exits.enter_async_context(creating)
        return self._client

    @contextlib.asynccontextmanager
    async def _call(self, operation: str) -> AsyncIterator[None]:
        """A failure of the store as a 503; botocore's messages may quote the endpoint, so only the
        error's class and S3 code are kept."""
        try:
            yield
        except (BotoCoreError, ClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning(
                "file_store_failed",
                operation=operation,
                bucket=self._settings.bucket,
                error=type(exc).__name__,
                code=_error_code(exc),
            )
            raise ServiceUnavailable("The file store is unavailable; try again later.") from None


def _error_code(exc: Exception) -> str | None:
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code")
        return None if code is None else str(code)
    return None


async def _parts(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The chunks regrouped into parts of `PART_BYTES` (the last one shorter)."""
    part = bytearray()
    async for chunk in chunks:
        part += chunk
        while len(part) >= PART_BYTES:
            yield bytes(part[:PART_BYTES])
            del part[:PART_BYTES]
    if part:
        yield bytes(part)


async def _chained(first: tuple[bytes, ...], rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    for part in first:
        yield part
    async for part in rest:
        yield part
