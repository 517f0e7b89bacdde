"""POST /v1/files with an `Idempotency-Key`: a repeat of the upload (the same purpose, filename and
bytes, under a new multipart boundary as an SDK's retry has) answers the file the first made, one
file stored; other bytes under the key are a 409; another team's identical key is its own."""

from __future__ import annotations

import httpx
from sqlalchemy import func, select

from gateway.db.models import StoredFile
from gateway.idempotency.service import REPLAY_HEADER
from tests.unit.jobs.conftest import JSONL, Caller, Client, StandInServices


async def stored_files(services: StandInServices) -> int:
    async with services.sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(StoredFile)) or 0)


async def post_upload(client: Client, caller: Caller, key: str, data: bytes, boundary: str) -> httpx.Response:
    """An upload with a multipart boundary of its own (httpx draws one too; set here to show it)."""
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    headers = caller.headers | {
        "Idempotency-Key": key,
        "Content-Type": f"multipart/form-data; boundary={boundary}",
    }
    return await client.post("/v1/files", headers=headers, content=body)


async def test_a_retried_upload_answers_the_file_it_made(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    first = await post_upload(client, alice, "upload-1", JSONL, "boundary-first")
    again = await post_upload(client, alice, "upload-1", JSONL, "boundary-retry")

    assert first.status_code == again.status_code == 200, first.text
    assert again.json() == first.json()
    assert again.headers[REPLAY_HEADER] == "true"
    assert await stored_files(services) == 1


async def test_other_bytes_under_the_key_are_a_409(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    await post_upload(client, alice, "upload-1", JSONL, "b1")
    other = await post_upload(client, alice, "upload-1", JSONL + b"\n", "b2")

    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert await stored_files(services) == 1


async def test_another_teams_identical_key_uploads_its_own_file(
    client: Client, services: StandInServices, alice: Caller, bob: Caller
) -> None:
    ours = await post_upload(client, alice, "upload-1", JSONL, "b1")
    theirs = await post_upload(client, bob, "upload-1", JSONL, "b1")

    assert theirs.status_code == 200
    assert REPLAY_HEADER not in theirs.headers
    assert theirs.json()["id"] != ours.json()["id"]
    assert await stored_files(services) == 2
