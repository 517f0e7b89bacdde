"""How an upload's chunks become the parts of an S3 multipart upload (gateway.jobs.files.s3_store): every
part but the last exactly PART_BYTES, whatever the chunks' sizes, and nothing lost or reordered."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from gateway.jobs.files.s3_store import PART_BYTES, _parts


async def chunked(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_chunks_are_regrouped_into_full_parts_and_a_shorter_last_one() -> None:
    data = os.urandom(2 * PART_BYTES + 12345)
    for size in (1024 * 1024, 3 * 1024 * 1024 + 7, PART_BYTES, 3 * PART_BYTES):
        parts = [part async for part in _parts(chunked(data, size))]
        assert [len(part) for part in parts] == [PART_BYTES, PART_BYTES, 12345]
        assert b"".join(parts) == data


async def test_an_empty_upload_has_no_part() -> None:
    assert [part async for part in _parts(chunked(b"", 10))] == []
