"""`S3FileStore`: the Files API's bytes in a bucket of an S3-compatible object store, over one
aiobotocore client per process.

Every failure of the store is a `ServiceUnavailable` (503): the message and the log line name
neither the endpoint nor the credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
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

    async def put(self, file_id: str, data: bytes) -> None:
        async with self._call("put"):
            client = await self._opened()
            await client.put_object(Bucket=self._settings.bucket, Key=self.key(file_id), Body=data)

    async def get(self, file_id: str) -> bytes:
        """The object's bytes; NotFound when the bucket has no such object."""
        async with self._call("get"):
            client = await self._opened()
            try:
                reply = await client.get_object(Bucket=self._settings.bucket, Key=self.key(file_id))
            except ClientError as exc:
                if _error_code(exc) in MISSING_CODES:
                    raise NotFound(f"No such File object: {file_id}", param="file_id") from None
                raise
            async with reply["Body"] as body:
                data: bytes = await body.read()
            return data

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
