"""Stored Responses as the store tests keep them, and a clock they move."""

from __future__ import annotations

import msgspec

from gateway.responses_store.store import StoredRecord

DAY = 86_400.0
NOW = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def record(
    team: str, response_id: str, *, created_at: float = NOW, previous: str | None = None
) -> StoredRecord:
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}], "id": "msg_1"}
    ]
    response = {"id": response_id, "object": "response", "output": [], "store": True}
    return StoredRecord(
        team_id=team,
        response_id=response_id,
        created_at=created_at,
        model="llama",
        previous_response_id=previous,
        upstream_provider=None,
        input_items=msgspec.json.encode(items),
        response=msgspec.json.encode(response),
    )
