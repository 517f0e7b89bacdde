"""A continuation's body: passed through to the native provider that stores the previous Response,
rebuilt (the chain's items, oldest first, then the new input; the previous instructions left
behind) for any other, refused as unknown for another team; a stream's last Response read from
its frames."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest

from gateway.errors import UnknownResponse
from gateway.responses_store.continuation import StoredResponses, terminal_response
from gateway.responses_store.store import ResponseStore
from gateway.settings import ProviderKind
from tests.unit.providers.calls import provider

NATIVE = provider(name="openai-direct", responses_api="native")
OTHER_NATIVE = provider(ProviderKind.AZURE, name="azure-eu")
TRANSLATED = provider(name="selfhosted", base_url="http://vllm.internal/v1")


class NoRows:
    """A database holding no stored Response: what the cache does not hold is unknown."""

    async def scalar(self, *args: Any) -> None:
        return None


@asynccontextmanager
async def no_rows() -> AsyncIterator[NoRows]:
    yield NoRows()


def stored(store: StoredResponses, body: dict[str, Any], document: dict[str, Any], at: Any) -> None:
    record = store.record("team_a", at, body, document)
    assert record is not None
    store.store.keep(record)


def answer(response_id: str, text: str) -> dict[str, Any]:
    output = [{"type": "message", "id": f"msg_{response_id}", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}]  # fmt: skip
    return {"id": response_id, "object": "response", "created_at": 1_800_000_000, "output": output}


@pytest.fixture
def responses() -> StoredResponses:
    store = ResponseStore(no_rows, None, retention_days=30, clock=lambda: 1_800_000_100.0)  # type: ignore[arg-type]
    responses = StoredResponses(store, None)
    stored(
        responses,
        {"model": "m", "instructions": "Old rules.", "input": "One."},
        answer("resp_1", "Uno."),
        NATIVE,
    )
    second = {"model": "m", "input": "Two.", "previous_response_id": "resp_1"}
    stored(responses, second, answer("resp_2", "Dos."), TRANSLATED)
    return responses


async def test_the_provider_that_stores_it_is_passed_the_request_as_it_came(
    responses: StoredResponses,
) -> None:
    body = {"model": "m", "input": "Again.", "previous_response_id": "resp_1"}
    assert await responses.prepare(NATIVE, "team_a", body) is body


async def test_any_other_provider_is_sent_the_conversation(responses: StoredResponses) -> None:
    body = {"model": "m", "instructions": "New rules.", "input": "Three.", "previous_response_id": "resp_2"}
    rebuilt = await responses.prepare(TRANSLATED, "team_a", body)
    assert rebuilt["instructions"] == "New rules."  # only the new request's
    assert rebuilt["previous_response_id"] == "resp_2"  # repeated back by the translation
    texts = [(item["role"], item["content"] if isinstance(item["content"], str) else item["content"][0]["text"])
             for item in rebuilt["input"]]  # fmt: skip
    assert texts == [
        ("user", "One."),
        ("assistant", "Uno."),
        ("user", "Two."),
        ("assistant", "Dos."),
        ("user", "Three."),
    ]
    assert all("id" not in item for item in rebuilt["input"])
    elsewhere = await responses.prepare(OTHER_NATIVE, "team_a", {**body, "previous_response_id": "resp_1"})
    assert "previous_response_id" not in elsewhere  # an upstream that never saw the id is not told it
    assert len(elsewhere["input"]) == 3
    assert body["input"] == "Three."  # the client's body is left as it came


@pytest.mark.parametrize("target", [NATIVE, TRANSLATED])
async def test_another_teams_or_an_unknown_id_is_a_404(responses: StoredResponses, target: Any) -> None:
    for team, previous in (("team_b", "resp_1"), ("team_b", "resp_2"), ("team_a", "resp_9")):
        with pytest.raises(UnknownResponse) as refused:
            await responses.prepare(
                target, team, {"model": "m", "input": "x", "previous_response_id": previous}
            )
        assert (refused.value.param, refused.value.code) == (
            "previous_response_id",
            "previous_response_not_found",
        )


async def test_store_false_keeps_nothing(responses: StoredResponses) -> None:
    assert (
        responses.record("team_a", TRANSLATED, {"model": "m", "input": "x", "store": False}, answer("r", "y"))
        is None
    )


def test_a_streams_last_response_is_read_from_its_frames() -> None:
    completed = {"type": "response.completed", "sequence_number": 9, "response": answer("resp_s", "Done.")}
    chunk = (
        b'event: response.output_text.done\ndata: {"type":"response.output_text.done"}\n\n'
        + b"event: response.completed\ndata: "
        + msgspec.json.encode(completed)
        + b"\n\n"
    )
    found = terminal_response(chunk)
    assert found is not None and found["id"] == "resp_s"
    assert terminal_response(b'event: response.output_text.delta\ndata: {"delta":"x"}\n\n') is None
