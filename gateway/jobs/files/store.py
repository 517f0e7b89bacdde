"""Where the Files API's bytes live: the `FileStore` Protocol, the store the settings name
(`gateway.jobs.files.s3_store.S3FileStore` for `files.store: s3`), and the database's own store (the
default: a `file_contents` row, in the caller's transaction).

The metadata (`StoredFile`) stays in the database either way; a store holds only the bytes, under
`prefix + file id`. Bytes go in and come out as chunks: an object store streams them, part by part.
The database holds a file's bytes in one column value: PostgreSQL is sent them as they arrive (one
row of a binary COPY) and read back in slices; SQLite is given them and read whole.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import FileContent
from gateway.settings import FileSettings

CHUNK_BYTES = 1024 * 1024  # what a reader of a stored file is handed at a time
SLICE_BYTES = 8 * 1024 * 1024  # what is read of a file kept in PostgreSQL at a time
CONTENTS = FileContent.__tablename__
COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


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
        from gateway.jobs.files.s3_store import S3FileStore

        return S3FileStore(settings.s3)
    return None


async def put_in_database(
    session: AsyncSession, file_id: str, size: int, chunks: AsyncIterable[bytes]
) -> None:
    """The file's `size` bytes as its `file_contents` row, in the session's transaction."""
    connection = await session.connection()
    if connection.dialect.name == "postgresql":
        # An INSERT's parameter is one value the driver must hold whole (and copy once more to
        # send); a binary COPY of the one row streams it: asyncpg sends each chunk as it comes.
        raw = await connection.get_raw_connection()
        await raw.driver_connection.copy_to_table(  # type: ignore[union-attr]
            CONTENTS, source=_copy_row(file_id, size, chunks), columns=["file_id", "data"], format="binary"
        )
        return
    data = bytearray()  # handed to the driver as it is: no copy into `bytes`
    async for chunk in chunks:
        data += chunk
    await session.execute(insert(FileContent).values(file_id=file_id, data=data))


async def _copy_row(file_id: str, size: int, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """One (file_id, data) row in PostgreSQL's binary COPY format: the signature, no flags and no
    header extension, a tuple of 2 fields each led by its length, then the end-of-data marker."""
    name = file_id.encode()
    yield COPY_SIGNATURE + struct.pack("!iihi", 0, 0, 2, len(name)) + name + struct.pack("!i", size)
    sent = 0
    async for chunk in chunks:
        sent += len(chunk)
        yield chunk
    if sent != size:  # the row would be malformed: fail it rather than let the server guess
        raise ValueError(f"file {file_id}: {sent} bytes read, {size} announced")
    yield struct.pack("!h", -1)


async def database_slices(session: AsyncSession, file_id: str, size: int) -> AsyncIterator[bytes]:
    """The `size` bytes of a file kept in the database, in the session's transaction: from
    PostgreSQL in slices of `SLICE_BYTES` (each `substring` of the column value decompresses only up
    to its end: large slices keep that work small), from SQLite whole (its `substr` of a value reads
    all of it)."""
    if (await session.connection()).dialect.name != "postgresql":
        data = await session.scalar(select(FileContent.data).where(FileContent.file_id == file_id))
        async for chunk in database_chunks(data or b""):
            yield chunk
        return
    for start in range(0, size, SLICE_BYTES):
        part = func.substring(FileContent.data, start + 1, SLICE_BYTES)
        data = await session.scalar(select(part).where(FileContent.file_id == file_id))
        if data is None:  # deleted meanwhile: what was read is all there is
            return
        async for chunk in database_chunks(data):
            yield chunk


async def database_chunks(data: bytes) -> AsyncIterator[bytes]:
    """A file's bytes read from the database, a chunk at a time."""
    view = memoryview(data)
    for start in range(0, len(view), CHUNK_BYTES):
        yield bytes(view[start : start + CHUNK_BYTES])


async def one_chunk(data: bytes) -> AsyncIterator[bytes]:
    """Bytes already in memory (a finished job's files), as a store takes them."""
    yield data
