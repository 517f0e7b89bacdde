"""POST /v1/batches with an `Idempotency-Key`: a repeat answers the batch the first create made
(one job, the runner told once); another body under the key is a 409; a refused create is not
kept (its repeat runs anew)."""

from __future__ import annotations

from sqlalchemy import func, select

from gateway.db.models import BatchJob
from gateway.idempotency.service import REPLAY_HEADER
from tests.unit.jobs.conftest import Caller, Client, StandInServices, upload
from tests.unit.jobs.test_batches_api import CHAT, jsonl, line


async def jobs(services: StandInServices) -> int:
    async with services.sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(BatchJob)) or 0)


async def test_a_repeated_create_answers_the_batch_it_made(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    file_id = (await upload(client, alice, jsonl(line("a"))))["id"]
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
    headers = alice.headers | {"Idempotency-Key": "nightly-2026-12-04"}

    first = await client.post("/v1/batches", headers=headers, json=body)
    again = await client.post("/v1/batches", headers=headers, json=body)
    other = await client.post("/v1/batches", headers=headers, json=body | {"metadata": {"x": "y"}})

    assert first.status_code == again.status_code == 200, first.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers[REPLAY_HEADER] == "true"
    assert again.headers["x-request-id"] == first.headers["x-request-id"]
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert await jobs(services) == 1
    assert services.jobs_created == 1


async def test_a_refused_create_is_not_kept(client: Client, services: StandInServices, alice: Caller) -> None:
    body = {"input_file_id": "file-nope", "endpoint": CHAT, "completion_window": "24h"}
    headers = alice.headers | {"Idempotency-Key": "k"}

    first = await client.post("/v1/batches", headers=headers, json=body)
    again = await client.post("/v1/batches", headers=headers, json=body)

    assert first.status_code == again.status_code == 404
    assert REPLAY_HEADER not in again.headers
    assert await jobs(services) == 0
