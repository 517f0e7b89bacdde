"""Where the Files API's bytes live: the `FileStore` Protocol, the store the settings name
(`gateway.jobs.s3_store.S3FileStore` for `files.store: s3`), and the database's own store (the
default: a `file_contents` row, in the caller's transaction).

The metadata (`StoredFile`) stays in the database either way; a store holds only the bytes, under
`prefix + file id`. Bytes go in and come out as chunks: an object store streams them, part by part;
the database holds a file's bytes in one column value, so it is given them once, whole (never a
second copy), and hands them out chunk by chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import FileContent
from gateway.settings import FileSettings

CHUNK_BYTES = 1024 * 1024  # what a reader of a stored file is handed at a time


class FileStore(Protocol):
    """The bytes of the Files API's files, by file id."""

    async def put(self, file_id: str, chunks: AsyncIterable[bytes]) -> None: ...

    async def get(self, file_id: str) -> bytes: ...

    def chunks(self, file_id: str) -> AsyncIterator[bytes]:
        """The object's bytes in order, a chunk at a time; NotFound when there is no such object."""
        ...

    async def delete(self, file_id: str) -> None: ...

    async def aclose(self) -> None: ...


def open_file_store(settings: FileSettings) -> FileStore | None:
    """The store the settings name; None for the database (the files repository's default)."""
    if settings.store == "s3" and settings.s3 is not None:
        # Imported only when configured: botocore alone adds ~15 MB to every serving process.
        from gateway.jobs.s3_store import S3FileStore

        return S3FileStore(settings.s3)
    return None


async def put_in_database(session: AsyncSession, file_id: str, chunks: AsyncIterable[bytes]) -> None:
    """The file's bytes as its `file_contents` row, in the session's transaction. The chunks are
    gathered into one buffer that is handed to the driver as it is (no copy into `bytes`)."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk
    await session.execute(insert(FileContent).values(file_id=file_id, data=data))


async def database_chunks(data: bytes) -> AsyncIterator[bytes]:
    """A file's bytes read from the database, a chunk at a time."""
    view = memoryview(data)
    for start in range(0, len(view), CHUNK_BYTES):
        yield bytes(view[start : start + CHUNK_BYTES])


async def one_chunk(data: bytes) -> AsyncIterator[bytes]:
    """Bytes already in memory (a finished job's files), as a store takes them."""
    yield data
