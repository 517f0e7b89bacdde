"""/v1/files on the app of conftest.py: real SQLite, a real KeyCache."""

from __future__ import annotations

import msgspec
from sqlalchemy import select

from gateway.api.openai.files import MAX_FILE_BYTES
from gateway.db.models import FileContent
from gateway.db.teams import utcnow
from gateway.jobs.files import repository as files
from tests.support.openapi import validate
from tests.unit.jobs.conftest import JSONL, Caller, Client, StandInServices, upload


async def test_an_upload_is_stored_and_answered_as_openais_file_object(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    created = await upload(client, alice, JSONL, "requests.jsonl")

    validate("OpenAIFile", created)
    assert created["object"] == "file"
    assert created["bytes"] == len(JSONL)
    assert created["filename"] == "requests.jsonl"
    assert created["purpose"] == "batch"
    assert created["status"] == "processed"
    assert str(created["id"]).startswith("file-")
    async with services.sessions() as session:
        assert await files.file_bytes(session, alice.team_id, str(created["id"])) == JSONL

    retrieved = await client.get(f"/v1/files/{created['id']}", headers=alice.headers)
    content = await client.get(f"/v1/files/{created['id']}/content", headers=alice.headers)
    assert retrieved.json() == created
    assert content.content == JSONL


async def test_only_the_batch_purpose_may_be_uploaded(client: Client, alice: Caller) -> None:
    response = await client.post(
        "/v1/files", headers=alice.headers, files={"file": ("x.jsonl", JSONL)}, data={"purpose": "fine-tune"}
    )
    missing_file = await client.post("/v1/files", headers=alice.headers, data={"purpose": "batch"})

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "purpose"
    assert "batch" in response.json()["error"]["message"]
    assert missing_file.status_code == 400
    assert missing_file.json()["error"]["param"] == "file"


async def test_an_upload_may_exceed_the_gateways_body_limit_up_to_the_batch_limit(
    client: Client, alice: Caller
) -> None:
    big = JSONL * (3 * 1024 * 1024 // len(JSONL))  # three times the app's body limit

    created = await upload(client, alice, big)

    assert created["bytes"] == len(big)


async def test_an_upload_past_the_batch_limit_is_refused(client: Client, alice: Caller) -> None:
    response = await client.post(
        "/v1/files",
        headers=alice.headers,
        files={"file": ("big.jsonl", b"x" * (MAX_FILE_BYTES + 1))},
        data={"purpose": "batch"},
    )

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "file_too_large"


async def test_uploads_need_a_team_key(client: Client) -> None:
    response = await client.post("/v1/files", files={"file": ("x.jsonl", JSONL)}, data={"purpose": "batch"})

    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


async def test_another_teams_file_is_not_found_everywhere(client: Client, alice: Caller, bob: Caller) -> None:
    file_id = (await upload(client, alice))["id"]

    for method, path in (
        ("GET", f"/v1/files/{file_id}"),
        ("GET", f"/v1/files/{file_id}/content"),
        ("DELETE", f"/v1/files/{file_id}"),
    ):
        response = await client.request(method, path, headers=bob.headers)
        assert response.status_code == 404, (method, path)
        assert response.json()["error"]["type"] == "not_found_error"
    listed = (await client.get("/v1/files", headers=bob.headers)).json()
    assert listed["data"] == []
    assert (await client.get(f"/v1/files/{file_id}", headers=alice.headers)).status_code == 200


async def test_a_deleted_file_is_gone_and_its_bytes_with_it(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    file_id = str((await upload(client, alice))["id"])

    deleted = await client.delete(f"/v1/files/{file_id}", headers=alice.headers)

    assert deleted.status_code == 200
    assert deleted.json() == {"id": file_id, "object": "file", "deleted": True}
    assert (await client.get(f"/v1/files/{file_id}", headers=alice.headers)).status_code == 404
    assert (await client.delete(f"/v1/files/{file_id}", headers=alice.headers)).status_code == 404
    assert (await client.get("/v1/files", headers=alice.headers)).json()["data"] == []
    async with services.sessions() as session:
        assert (await session.scalars(select(FileContent))).all() == []


async def test_the_list_pages_newest_first_after_an_id(client: Client, alice: Caller) -> None:
    ids = [(await upload(client, alice, name=f"{n}.jsonl"))["id"] for n in range(5)]

    first = (await client.get("/v1/files", params={"limit": "2"}, headers=alice.headers)).json()
    second = (
        await client.get("/v1/files", params={"limit": "2", "after": first["last_id"]}, headers=alice.headers)
    ).json()
    rest = (
        await client.get(
            "/v1/files", params={"limit": "2", "after": second["last_id"]}, headers=alice.headers
        )
    ).json()
    oldest_first = (await client.get("/v1/files", params={"order": "asc"}, headers=alice.headers)).json()

    validate("ListFilesResponse", first)
    assert [f["id"] for f in first["data"] + second["data"] + rest["data"]] == ids[::-1]
    assert (first["has_more"], second["has_more"], rest["has_more"]) == (True, True, False)
    assert (first["first_id"], first["last_id"]) == (ids[4], ids[3])
    assert [f["id"] for f in oldest_first["data"]] == ids


async def test_the_list_filters_by_purpose_and_shows_error_files_as_batch_output(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    input_id = (await upload(client, alice))["id"]
    async with services.sessions.begin() as session:
        output = await files.store_file(session, alice.team_id, files.BATCH_OUTPUT, "o.jsonl", b"{}\n")
        errors = await files.store_file(session, alice.team_id, files.BATCH_ERRORS, "e.jsonl", b"{}\n")

    inputs = (await client.get("/v1/files", params={"purpose": "batch"}, headers=alice.headers)).json()
    outputs = (
        await client.get("/v1/files", params={"purpose": "batch_output"}, headers=alice.headers)
    ).json()

    assert [f["id"] for f in inputs["data"]] == [input_id]
    assert [f["id"] for f in outputs["data"]] == [errors.id, output.id]
    for shown in outputs["data"]:
        validate("OpenAIFile", shown)
        assert shown["purpose"] == "batch_output"


async def test_bad_list_parameters_are_refused_naming_them(client: Client, alice: Caller) -> None:
    """Malformed values are 400s; an `after` naming no file of the team is a 404."""
    for params, param, status in (
        ({"limit": "0"}, "limit", 400),
        ({"limit": "10001"}, "limit", 400),
        ({"order": "sideways"}, "order", 400),
        ({"after": "file-unknown"}, "after", 404),
    ):
        response = await client.get("/v1/files", params=params, headers=alice.headers)
        assert response.status_code == status, params
        assert response.json()["error"]["param"] == param


async def test_an_expired_file_is_not_found(client: Client, services: StandInServices, alice: Caller) -> None:
    async with services.sessions.begin() as session:
        stored = await files.store_file(
            session, alice.team_id, files.BATCH_OUTPUT, "o.jsonl", b"{}\n", expires_at=utcnow()
        )

    response = await client.get(f"/v1/files/{stored.id}", headers=alice.headers)

    assert response.status_code == 404
    assert msgspec.json.decode(response.content)["error"]["param"] == "file_id"
