"""The bound on a process's file work (gateway.jobs.files.slots, `files.max_concurrent`): uploads and
batch creates past it wait for a slot, then are refused with 503 `server_busy` and a Retry-After."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from gateway.errors import ServiceUnavailable
from gateway.jobs.files.slots import FileSlots
from gateway.settings import ConfigError, load_catalog
from tests.unit.jobs.conftest import JSONL, Caller, Client, StandInServices, upload

CATALOG = """
providers:
  - {name: mock, kind: mock, region: eu}
models:
  - {name: m, deployments: [{provider: mock, model: m}]}
"""


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


def test_the_bound_is_read_from_the_catalogs_files_section_and_checked(tmp_path: Path) -> None:
    def files(section: str) -> Path:
        path = tmp_path / "gateway.yaml"
        path.write_text(CATALOG + section, encoding="utf-8")
        return path

    assert load_catalog(files(""), {}).files.max_concurrent == 2
    bound = load_catalog(files("files: {max_concurrent: 4, busy_wait_s: 0.5}\n"), {}).files
    assert (bound.max_concurrent, bound.busy_wait_s) == (4, 0.5)
    for wrong in ("files: {max_concurrent: 0}\n", "files: {busy_wait_s: -1}\n"):
        with pytest.raises(ConfigError, match="files\\."):
            load_catalog(files(wrong), {})
