"""Files repository: a team's files of the Files API, stored in the database with their bytes apart.

A file is the team's own: every read takes the team, and another team's file is as absent as a
deleted one. Deleting keeps the row (a job still names its input file) and drops the bytes. The
bytes are a `FileContent` row, or with a `store` (`gateway.jobs.files.store`, `files.store: s3`) an
object of that store; a file stored in the database before the switch is still read from there.
Bytes are stored from chunks as they arrive (`store_upload`) and read back as chunks
(`file_chunks`, `download_chunks`).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Select, delete, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import FileContent, StoredFile
from gateway.db.teams import utcnow
from gateway.errors import NotFound
from gateway.jobs.files.store import FileStore, database_chunks, database_slices, one_chunk, put_in_database
from gateway.jobs.pages import page_after

BATCH_INPUT = "batch"
BATCH_OUTPUT = "batch_output"
BATCH_ERRORS = "batch_errors"
# OpenAI gives a batch's error file the purpose batch_output too, and its File object knows no other.
LISTED_AS = {BATCH_INPUT: (BATCH_INPUT,), BATCH_OUTPUT: (BATCH_OUTPUT, BATCH_ERRORS)}


def new_file_id() -> str:
    return "file-" + secrets.token_hex(12)


def wire_purpose(purpose: str) -> str:
    """The purpose as OpenAI's File object names it."""
    return BATCH_OUTPUT if purpose == BATCH_ERRORS else purpose


async def store_file(
    session: AsyncSession,
    team_id: str,
    purpose: str,
    filename: str,
    data: bytes,
    *,
    expires_at: datetime | None = None,
    store: FileStore | None = None,
) -> StoredFile:
    """Add the file and its bytes to the session (or the bytes to `store`); the caller commits."""
    return await store_upload(
        session, team_id, purpose, filename, len(data), one_chunk(data), expires_at=expires_at, store=store
    )


async def store_upload(
    session: AsyncSession,
    team_id: str,
    purpose: str,
    filename: str,
    size: int,
    chunks: AsyncIterable[bytes],
    *,
    expires_at: datetime | None = None,
    store: FileStore | None = None,
) -> StoredFile:
    """Add the file of `size` bytes to the session and its bytes, as `chunks` gives them, to the
    database (or to `store`); the caller commits."""
    stored = StoredFile(
        id=new_file_id(),
        team_id=team_id,
        purpose=purpose,
        filename=filename,
        bytes=size,
        created_at=utcnow(),
        expires_at=expires_at,
    )
    session.add(stored)
    await session.flush()  # the content row's foreign key needs the file row first
    if store is not None:
        await store.put(stored.id, chunks)
    else:
        await put_in_database(session, stored.id, size, chunks)
    return stored


def _live(team_id: str) -> Sequence[ColumnElement[bool]]:
    return (
        StoredFile.team_id == team_id,
        StoredFile.deleted_at.is_(None),
        or_(StoredFile.expires_at.is_(None), StoredFile.expires_at > utcnow()),
    )


async def get_file(
    session: AsyncSession, team_id: str, file_id: str, *, param: str = "file_id"
) -> StoredFile:
    """A live file of the team; NotFound (naming `param`) for an absent, deleted, expired or
    another team's file."""
    query = select(StoredFile).where(StoredFile.id == file_id, *_live(team_id))
    stored = (await session.scalars(query)).first()
    if stored is None:
        raise NotFound(f"No such File object: {file_id}", param=param)
    return stored


async def file_bytes(
    session: AsyncSession, team_id: str, file_id: str, *, store: FileStore | None = None
) -> bytes:
    """The content of a live file of the team; NotFound as `get_file`."""
    if store is None:
        query = (
            select(FileContent.data)
            .join(StoredFile, StoredFile.id == FileContent.file_id)
            .where(StoredFile.id == file_id, *_live(team_id))
        )
        data = (await session.scalars(query)).first()
        if data is None:
            raise NotFound(f"No such File object: {file_id}", param="file_id")
        return data
    stored_here = (
        select(StoredFile.id, FileContent.data)
        .outerjoin(FileContent, FileContent.file_id == StoredFile.id)
        .where(StoredFile.id == file_id, *_live(team_id))
    )
    row = (await session.execute(stored_here)).first()
    if row is None:
        raise NotFound(f"No such File object: {file_id}", param="file_id")
    if row.data is not None:  # stored before the store was configured
        return bytes(row.data)
    return await store.get(row.id)


async def _content_length(session: AsyncSession, team_id: str, file_id: str) -> int | None:
    """The size of a live file's bytes in the database; None when they are not there (they are in
    the store). NotFound as `get_file`."""
    query = (
        select(StoredFile.id, func.length(FileContent.data).label("size"))
        .outerjoin(FileContent, FileContent.file_id == StoredFile.id)
        .where(StoredFile.id == file_id, *_live(team_id))
    )
    row = (await session.execute(query)).first()
    if row is None:
        raise NotFound(f"No such File object: {file_id}", param="file_id")
    return None if row.size is None else int(row.size)


async def file_chunks(
    session: AsyncSession, team_id: str, file_id: str, *, store: FileStore | None = None
) -> AsyncIterator[bytes]:
    """The content of a live file of the team a chunk at a time, read in the session's transaction
    (a batch create's); NotFound as `get_file`. A store streams it; PostgreSQL hands it out in
    slices of its column value; SQLite reads it whole."""
    size = await _content_length(session, team_id, file_id)
    if size is None and store is not None:
        async for chunk in store.chunks(file_id):
            yield chunk
        return
    async for chunk in database_slices(session, file_id, size or 0):
        yield chunk


async def download_chunks(
    session: AsyncSession, team_id: str, file_id: str, *, store: FileStore | None = None
) -> AsyncIterator[bytes]:
    """As `file_chunks`, for an answer that outlives the session: nothing is read from the database
    after the first chunk (a file kept there is read whole), so no connection waits on the client."""
    if store is not None and await _content_length(session, team_id, file_id) is None:
        async for chunk in store.chunks(file_id):
            yield chunk
        return
    data = await file_bytes(session, team_id, file_id)
    async for chunk in database_chunks(data):
        yield chunk


async def list_files(
    session: AsyncSession,
    team_id: str,
    *,
    purpose: str | None,
    limit: int,
    after: str | None,
    newest_first: bool,
) -> tuple[list[StoredFile], bool]:
    """A page of the team's live files, and whether more follow."""
    query: Select[StoredFile] = select(StoredFile).where(*_live(team_id))
    if purpose is not None:
        query = query.where(StoredFile.purpose.in_(LISTED_AS.get(purpose, (purpose,))))
    return await page_after(session, query, StoredFile, limit=limit, after=after, newest_first=newest_first)


async def delete_file(
    session: AsyncSession, team_id: str, file_id: str, *, store: FileStore | None = None
) -> StoredFile:
    """Mark the file deleted and drop its bytes (from `store` too); NotFound as `get_file`. The
    caller commits."""
    stored = await get_file(session, team_id, file_id)
    stored.deleted_at = utcnow()
    await session.execute(delete(FileContent).where(FileContent.file_id == stored.id))
    await session.flush()
    if store is not None:
        # After the row is locked and marked: a store that fails rolls the delete back whole.
        await store.delete(stored.id)
    return stored
