"""/v1/batches on the app of conftest.py: real SQLite, a real KeyCache, the routing catalog."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from gateway.db.models import BatchJob, BatchLine
from gateway.jobs.files import repository as files
from gateway.jobs.input_lines import prefix_key
from tests.support.openapi import validate
from tests.unit.jobs.conftest import Caller, Client, StandInServices, new_caller, upload

CHAT = "/v1/chat/completions"
SYSTEM = {"role": "system", "content": "Answer in one word."}


def line(custom_id: str, question: str = "hi", model: str = "chat") -> dict[str, Any]:
    body = {"model": model, "messages": [SYSTEM, {"role": "user", "content": question}]}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def jsonl(*lines: object) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


async def create(
    client: Client, caller: Caller, data: bytes, headers: dict[str, str] | None = None, **fields: Any
) -> Any:
    file_id = (await upload(client, caller, data))["id"]
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h", **fields}
    return await client.post("/v1/batches", headers=caller.headers | (headers or {}), json=body)


async def stored_job(services: StandInServices, job_id: str) -> tuple[BatchJob, list[BatchLine]]:
    async with services.sessions() as session:
        job = await session.get(BatchJob, job_id)
        assert job is not None
        query = select(BatchLine).where(BatchLine.job_id == job_id).order_by(BatchLine.line_no)
        return job, list((await session.scalars(query)).all())


async def test_a_good_file_makes_a_validating_job_with_one_line_per_request(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    response = await create(
        client, alice, jsonl(line("a", "one"), line("b", "two")), metadata={"purpose": "nightly"}
    )

    assert response.status_code == 200, response.text
    batch = response.json()
    validate("Batch", batch)
    assert batch["object"] == "batch"
    assert batch["status"] == "validating"
    assert batch["endpoint"] == CHAT
    assert batch["model"] == "chat"
    assert batch["metadata"] == {"purpose": "nightly"}
    assert batch["request_counts"] == {"total": 2, "completed": 0, "failed": 0}
    assert batch["expires_at"] - batch["created_at"] == 24 * 3600
    assert batch["usage"]["input_tokens_details"] == {"cached_tokens": 0}
    assert batch["gateway"] == {"deployment": None, "paused_reason": None}
    assert "errors" not in batch
    assert "output_file_id" not in batch
    job, lines = await stored_job(services, batch["id"])
    assert (job.team_id, job.request_total, job.directives) == (alice.team_id, 2, None)
    assert [(x.line_no, x.custom_id, x.state) for x in lines] == [(0, "a", "pending"), (1, "b", "pending")]
    assert json.loads(lines[1].body) == line("b", "two")["body"]
    assert lines[0].prefix_key == lines[1].prefix_key == prefix_key(line("a")["body"])


async def test_a_bad_file_makes_a_failed_batch_naming_its_lines(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    data = jsonl(line("a"), "{oops", line("a"), line("c", model="embed"))

    response = await create(client, alice, data)

    assert response.status_code == 200
    batch = response.json()
    validate("Batch", batch)
    assert batch["status"] == "failed"
    assert isinstance(batch["failed_at"], int)
    assert batch["request_counts"]["total"] == 0
    assert batch["errors"]["object"] == "list"
    assert [(e["code"], e["line"]) for e in batch["errors"]["data"]] == [
        ("invalid_json_line", 2),
        ("duplicate_custom_id", 3),
        ("mismatched_model", 4),
    ]
    _, lines = await stored_job(services, batch["id"])
    assert lines == []


async def test_the_request_itself_is_checked_before_any_job_is_made(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    good = jsonl(line("a"))
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"endpoint": "/v1/embeddings"}, 400, "endpoint"),
        ({"completion_window": "1h"}, 400, "completion_window"),
        ({"metadata": {f"k{n}": "v" for n in range(17)}}, 400, "metadata"),
        ({"metadata": {"k" * 65: "v"}}, 400, "metadata"),
        ({"metadata": {"k": "v" * 513}}, 400, "metadata.k"),
        ({"input_file_id": "file-nope"}, 404, "input_file_id"),
    ]
    for fields, status, param in cases:
        response = await create(client, alice, good, **fields)
        assert response.status_code == status, (fields, response.text)
        assert response.json()["error"]["param"] == param, fields
    unsupported = await create(client, alice, good, endpoint="/v1/embeddings")
    assert unsupported.json()["error"]["code"] == "unsupported"
    async with services.sessions() as session:
        assert (await session.scalars(select(BatchJob))).all() == []


async def test_the_input_must_be_a_batch_file_of_the_callers_team(
    client: Client, services: StandInServices, alice: Caller, bob: Caller
) -> None:
    theirs = (await upload(client, bob, jsonl(line("a"))))["id"]
    async with services.sessions.begin() as session:
        output = await files.store_file(
            session, alice.team_id, files.BATCH_OUTPUT, "o.jsonl", jsonl(line("a"))
        )
    body = {"endpoint": CHAT, "completion_window": "24h"}

    not_mine = await client.post("/v1/batches", headers=alice.headers, json=body | {"input_file_id": theirs})
    not_input = await client.post(
        "/v1/batches", headers=alice.headers, json=body | {"input_file_id": output.id}
    )

    assert not_mine.status_code == 404
    assert not_input.status_code == 400
    assert not_input.json()["error"]["param"] == "input_file_id"


async def test_the_model_must_exist_and_be_allowed_for_the_key(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    restricted = await new_caller(services.sessions, "carol", allowed_models=["embed"])

    unknown = await create(client, alice, jsonl(line("a", model="no-such-model")))
    denied = await create(client, restricted, jsonl(line("a")))

    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    assert denied.status_code == 403
    assert denied.json()["error"]["param"] == "model"


async def test_directives_come_from_headers_or_metadata(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    data = jsonl(line("a"))

    by_header = await create(client, alice, data, {"X-Gateway-Region": "eu-west"})
    by_metadata = await create(
        client, alice, data, metadata={"gateway_provider": "vllm-eu, openai-us", "note": "x"}
    )
    unknown = await create(client, alice, data, {"X-Gateway-Region": "mars"})
    conflict = await create(
        client, alice, data, {"X-Gateway-Region": "eu-west"}, metadata={"gateway_region": "us-east"}
    )
    excluded = await create(client, alice, data, metadata={"gateway_region": "ap-south"})

    first, _ = await stored_job(services, by_header.json()["id"])
    second, _ = await stored_job(services, by_metadata.json()["id"])
    assert first.directives == {"region": "eu-west"}
    assert second.directives == {"provider": "vllm-eu,openai-us"}
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (400, "no_route")
    assert (conflict.status_code, conflict.json()["error"]["code"]) == (400, "directive_conflict")
    assert (excluded.status_code, excluded.json()["error"]["code"]) == (400, "no_route")


async def test_another_teams_batch_is_not_found(client: Client, alice: Caller, bob: Caller) -> None:
    batch_id = (await create(client, alice, jsonl(line("a")))).json()["id"]

    for path in (f"/v1/batches/{batch_id}", f"/v1/batches/{batch_id}/cancel"):
        method = "POST" if path.endswith("cancel") else "GET"
        response = await client.request(method, path, headers=bob.headers)
        assert response.status_code == 404, path
        assert response.json()["error"]["type"] == "not_found_error"
    assert (await client.get("/v1/batches", headers=bob.headers)).json()["data"] == []
    assert (await client.get(f"/v1/batches/{batch_id}", headers=alice.headers)).json()[
        "status"
    ] == "validating"


async def test_the_list_pages_newest_first(client: Client, alice: Caller) -> None:
    ids = [(await create(client, alice, jsonl(line(f"r{n}")))).json()["id"] for n in range(3)]

    first = (await client.get("/v1/batches", params={"limit": "2"}, headers=alice.headers)).json()
    rest = (
        await client.get(
            "/v1/batches", params={"limit": "2", "after": first["last_id"]}, headers=alice.headers
        )
    ).json()
    too_many = await client.get("/v1/batches", params={"limit": "101"}, headers=alice.headers)

    validate("ListBatchesResponse", first)
    assert [b["id"] for b in first["data"] + rest["data"]] == ids[::-1]
    assert (first["has_more"], rest["has_more"]) == (True, False)
    assert (first["first_id"], first["last_id"]) == (ids[2], ids[1])
    assert too_many.status_code == 400


async def test_cancel_moves_a_live_job_to_cancelling_once(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    batch_id = (await create(client, alice, jsonl(line("a")))).json()["id"]

    first = await client.post(f"/v1/batches/{batch_id}/cancel", headers=alice.headers)
    again = await client.post(f"/v1/batches/{batch_id}/cancel", headers=alice.headers)

    assert first.status_code == 200
    validate("Batch", first.json())
    assert first.json()["status"] == "cancelling"
    assert isinstance(first.json()["cancelling_at"], int)
    assert again.status_code == 200
    assert again.json() == first.json()
    job, _ = await stored_job(services, batch_id)
    assert job.status == "cancelling"


async def test_a_finished_job_cannot_be_cancelled(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    failed_id = (await create(client, alice, jsonl("nope"))).json()["id"]
    done_id = (await create(client, alice, jsonl(line("a")))).json()["id"]
    async with services.sessions.begin() as session:
        job = await session.get(BatchJob, done_id)
        assert job is not None
        job.status = "completed"

    for batch_id, status in ((failed_id, "failed"), (done_id, "completed")):
        response = await client.post(f"/v1/batches/{batch_id}/cancel", headers=alice.headers)
        assert response.status_code == 409
        assert status in response.json()["error"]["message"]
        assert (await stored_job(services, batch_id))[0].status == status


async def test_a_body_that_is_not_a_create_request_is_a_400(client: Client, alice: Caller) -> None:
    for body in (b"not json", b"[]", b'{"endpoint": "/v1/chat/completions"}'):
        response = await client.post("/v1/batches", headers=alice.headers, content=body)
        assert response.status_code == 400, body
        assert response.json()["error"]["type"] == "invalid_request_error"
