"""Where the Files API's bytes live when not in the database: the `FileStore` Protocol, and the
store the settings name (`gateway.jobs.s3_store.S3FileStore` for `files.store: s3`).

The metadata (`StoredFile`) stays in the database either way; a store holds only the bytes, under
`prefix + file id`.
"""

from __future__ import annotations

from typing import Protocol

from gateway.settings import FileSettings


class FileStore(Protocol):
    """The bytes of the Files API's files, by file id."""

    async def put(self, file_id: str, data: bytes) -> None: ...

    async def get(self, file_id: str) -> bytes: ...

    async def delete(self, file_id: str) -> None: ...

    async def aclose(self) -> None: ...


def open_file_store(settings: FileSettings) -> FileStore | None:
    """The store the settings name; None for the database (the files repository's default)."""
    if settings.store == "s3" and settings.s3 is not None:
        # Imported only when configured: botocore alone adds ~15 MB to every serving process.
        from gateway.jobs.s3_store import S3FileStore

        return S3FileStore(settings.s3)
    return None
