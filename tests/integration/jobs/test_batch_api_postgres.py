"""The Files and Batch APIs through the official `openai` SDK against `gateway serve` on PostgreSQL;
the raw JSON is checked against OpenAI's own OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import openai
import pytest
from sqlalchemy import func, select

from gateway.db.models import BatchJob, BatchLine
from gateway.db.session import create_engine, session_factory
from gateway.jobs.input_lines import MAX_REQUESTS
from tests.integration.jobs.conftest import DATABASE, JobsGateway
from tests.support.gateway import Team
from tests.support.openapi import validate
from tests.support.stores import postgres_url

pytestmark = pytest.mark.integration

CHAT: Final = "/v1/chat/completions"


def jsonl(count: int, *, model: str = "chat", prefix: str = "req") -> bytes:
    lines = (
        {
            "custom_id": f"{prefix}-{n}",
            "method": "POST",
            "url": CHAT,
            "body": {
                "model": model,
                "messages": [
                    {"role": "system", "content": "Answer in one word."},
                    {"role": "user", "content": f"question {n}"},
                ],
            },
        }
        for n in range(count)
    )
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def upload(client: openai.OpenAI, data: bytes, name: str = "requests.jsonl") -> str:
    return client.files.create(file=(name, data), purpose="batch").id


def stored(job_id: str) -> tuple[BatchJob, int]:
    """The job's row and how many lines it has, read straight from the database."""

    async def read() -> tuple[BatchJob, int]:
        engine = create_engine(postgres_url(DATABASE))
        try:
            async with session_factory(engine)() as session:
                job = await session.get(BatchJob, job_id)
                assert job is not None
                lines = await session.scalar(
                    select(func.count()).select_from(BatchLine).where(BatchLine.job_id == job_id)
                )
                return job, int(lines or 0)
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_a_file_round_trips_through_the_sdk(gateway: JobsGateway, team_a: Team) -> None:
    client = gateway.client(team_a)
    data = jsonl(3)

    created = client.files.create(file=("three.jsonl", data), purpose="batch")
    retrieved = client.files.retrieve(created.id)
    listed = [f.id for f in client.files.list(purpose="batch")]
    content = client.files.content(created.id).read()
    with gateway.http(team_a) as http:
        validate("OpenAIFile", http.get(f"/v1/files/{created.id}").json())
        validate("ListFilesResponse", http.get("/v1/files").json())
    deleted = client.files.delete(created.id)

    assert (created.object, created.purpose, created.bytes, created.filename) == (
        "file",
        "batch",
        len(data),
        "three.jsonl",
    )
    assert retrieved == created
    assert created.id in listed
    assert content == data
    assert (deleted.id, deleted.deleted) == (created.id, True)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(created.id)


def test_a_batch_is_created_listed_retrieved_and_cancelled(gateway: JobsGateway, team_a: Team) -> None:
    client = gateway.client(team_a)
    file_id = upload(client, jsonl(4))

    batch = client.batches.create(
        input_file_id=file_id, endpoint=CHAT, completion_window="24h", metadata={"run": "nightly"}
    )
    job, lines = stored(batch.id)
    with gateway.http(team_a) as http:
        raw = http.get(f"/v1/batches/{batch.id}").json()
    cancelled = client.batches.cancel(batch.id)
    with gateway.http(team_a) as http:
        raw_cancelled = http.get(f"/v1/batches/{batch.id}").json()

    validate("Batch", raw)
    validate("Batch", raw_cancelled)
    assert (batch.status, batch.endpoint, batch.input_file_id) == ("validating", CHAT, file_id)
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed) == (4, 0)
    assert batch.metadata == {"run": "nightly"}
    assert batch.errors is None
    assert (job.team_id, job.status, lines) == (team_a.id, "validating", 4)
    assert cancelled.status == "cancelling"
    assert cancelled.cancelling_at is not None
    assert client.batches.retrieve(batch.id).status == "cancelling"


def test_the_batch_list_pages_newest_first(gateway: JobsGateway, team_a: Team) -> None:
    client = gateway.client(team_a)
    file_id = upload(client, jsonl(1))
    created = [
        client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id
        for _ in range(3)
    ]

    first_page = client.batches.list(limit=2)
    every = [b.id for b in client.batches.list(limit=2)]  # the SDK follows `after` page by page
    with gateway.http(team_a) as http:
        validate("ListBatchesResponse", http.get("/v1/batches", params={"limit": 2}).json())

    assert [b.id for b in first_page.data] == created[::-1][:2]
    assert first_page.has_more is True
    assert every[:3] == created[::-1]
    assert len(every) == len(set(every))


def test_a_bad_file_makes_a_failed_batch_naming_its_lines(gateway: JobsGateway, team_a: Team) -> None:
    client = gateway.client(team_a)
    data = jsonl(2) + b"{not json\n" + jsonl(1, model="other", prefix="odd")
    file_id = upload(client, data)

    batch = client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    with gateway.http(team_a) as http:
        validate("Batch", http.get(f"/v1/batches/{batch.id}").json())

    assert batch.status == "failed"
    assert batch.failed_at is not None
    assert batch.errors is not None and batch.errors.data is not None
    assert [(e.code, e.line) for e in batch.errors.data] == [
        ("invalid_json_line", 3),
        ("mismatched_model", 4),
    ]
    assert stored(batch.id)[1] == 0
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)


def test_another_teams_files_and_batches_do_not_exist_for_it(
    gateway: JobsGateway, team_a: Team, team_b: Team
) -> None:
    mine, theirs = gateway.client(team_a), gateway.client(team_b)
    file_id = upload(mine, jsonl(1))
    batch_id = mine.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id

    for attempt in (
        lambda: theirs.files.retrieve(file_id),
        lambda: theirs.files.content(file_id),
        lambda: theirs.files.delete(file_id),
        lambda: theirs.batches.retrieve(batch_id),
        lambda: theirs.batches.cancel(batch_id),
        lambda: theirs.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h"),
    ):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert batch_id not in [b.id for b in theirs.batches.list()]
    assert file_id not in [f.id for f in theirs.files.list()]
    assert mine.batches.retrieve(batch_id).status == "validating"


def test_directives_are_kept_for_the_pin_and_checked_like_chats(gateway: JobsGateway, team_a: Team) -> None:
    client = gateway.client(team_a)
    file_id = upload(client, jsonl(1))

    def create(headers: dict[str, str] | None = None, metadata: dict[str, str] | None = None) -> Any:
        return client.batches.create(
            input_file_id=file_id,
            endpoint=CHAT,
            completion_window="24h",
            metadata=metadata,
            extra_headers=headers,
        )

    by_header = create({"X-Gateway-Region": "eu-west"})
    by_metadata = create(metadata={"gateway_provider": "vllm-us"})

    assert stored(by_header.id)[0].directives == {"region": "eu-west"}
    assert stored(by_metadata.id)[0].directives == {"provider": "vllm-us"}
    with pytest.raises(openai.BadRequestError) as unknown:
        create({"X-Gateway-Region": "mars"})
    with pytest.raises(openai.BadRequestError) as conflict:
        create({"X-Gateway-Provider": "vllm-eu"}, {"gateway_provider": "vllm-us"})
    assert unknown.value.code == "no_route"
    assert conflict.value.code == "directive_conflict"


def test_a_file_of_the_most_requests_a_batch_holds_is_stored_line_by_line(
    gateway: JobsGateway, team_a: Team
) -> None:
    client = gateway.client(team_a)
    full = upload(client, jsonl(MAX_REQUESTS))
    over = upload(client, jsonl(MAX_REQUESTS + 1))

    accepted = client.batches.create(input_file_id=full, endpoint=CHAT, completion_window="24h")
    refused = client.batches.create(input_file_id=over, endpoint=CHAT, completion_window="24h")

    assert accepted.status == "validating"
    assert stored(accepted.id)[1] == MAX_REQUESTS
    assert refused.status == "failed"
    assert refused.errors is not None and refused.errors.data is not None
    assert [e.code for e in refused.errors.data] == ["too_many_requests"]


def test_concurrent_cancels_all_answer_the_cancelling_batch(gateway: JobsGateway, team_a: Team) -> None:
    client = gateway.client(team_a)
    batch_id = client.batches.create(
        input_file_id=upload(client, jsonl(2)), endpoint=CHAT, completion_window="24h"
    ).id

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: client.batches.cancel(batch_id), range(8)))

    assert {a.status for a in answers} == {"cancelling"}
    assert len({a.cancelling_at for a in answers}) == 1
    assert stored(batch_id)[0].status == "cancelling"


def test_text_postgresql_cannot_hold_is_a_400_not_a_database_error(
    gateway: JobsGateway, team_a: Team
) -> None:
    client = gateway.client(team_a)
    nul_id = b'{"custom_id": "a\\u0000", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "chat"}}\n'

    failed = client.batches.create(
        input_file_id=upload(client, nul_id), endpoint=CHAT, completion_window="24h"
    )
    with pytest.raises(openai.BadRequestError) as bad_file_id:
        client.batches.create(input_file_id="file-\x00", endpoint=CHAT, completion_window="24h")
    with pytest.raises(openai.BadRequestError) as bad_cursor:
        client.batches.list(after="batch_\x00")

    assert failed.status == "failed"
    assert failed.errors is not None and failed.errors.data is not None
    assert [(e.param, e.line) for e in failed.errors.data] == [("custom_id", 1)]
    assert bad_file_id.value.param == "input_file_id"
    assert bad_cursor.value.param == "after"
