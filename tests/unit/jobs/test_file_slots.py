"""The bound on a process's file work (gateway.jobs.file_slots, `files.max_concurrent`): uploads and
batch creates past it wait for a slot, then are refused with 503 `server_busy` and a Retry-After."""

from __future__ import annotations

import contextlib

import pytest

from gateway.errors import ServiceUnavailable
from gateway.jobs.file_slots import FileSlots
from tests.unit.jobs.conftest import JSONL, Caller, Client, StandInServices, upload


async def test_work_past_the_slots_is_refused_as_busy_and_a_freed_slot_is_taken() -> None:
    slots = FileSlots(2, 0.0)
    async with contextlib.AsyncExitStack() as held:
        await held.enter_async_context(slots.held())
        await held.enter_async_context(slots.held())
        with pytest.raises(ServiceUnavailable) as busy:
            async with slots.held():
                pass
    async with slots.held():
        pass

    assert (busy.value.status, busy.value.code) == (503, "server_busy")
    assert busy.value.headers["retry-after"] == "1"


async def test_an_upload_and_a_create_past_the_slots_answer_503_server_busy(
    client: Client, services: StandInServices, alice: Caller
) -> None:
    file_id = (await upload(client, alice))["id"]
    services.file_slots = FileSlots(1, 0.0)

    async with services.file_slots.held():  # another upload's
        uploading = await client.post(
            "/v1/files", headers=alice.headers, files={"file": ("in.jsonl", JSONL)}, data={"purpose": "batch"}
        )
        creating = await client.post(
            "/v1/batches",
            headers=alice.headers,
            json={"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"},
        )
    created = await client.post(
        "/v1/batches",
        headers=alice.headers,
        json={"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    )

    for refused in (uploading, creating):
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "server_busy"
        assert refused.headers["retry-after"] == "1"
    assert created.status_code == 200 and created.json()["status"] == "validating"
