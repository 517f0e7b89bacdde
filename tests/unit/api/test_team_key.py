"""The `principal` dependency (gateway.api.team_key) through the app `gateway serve` runs: a refusal
given once the key is known names it in its log line on every `/v1` endpoint Litestar serves, and
only the Messages API takes the key as the anthropic SDK sends it (`x-api-key`)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import structlog

from gateway.api.front import error_replies
from tests.unit.api.bad_parameters import Lines, gateway

# Each refused after the key was checked: another team's report, an unknown batch, file, model.
REFUSED_AFTER_THE_KEY = [
    ("/v1/gateway/usage?team=another-team", 403),
    ("/v1/gateway/batches/no-such-batch", 404),
    ("/v1/batches/batch_none", 404),
    ("/v1/files/file-none", 404),
    ("/v1/models/no-such-model", 404),
]


async def test_a_refusal_after_the_key_names_it_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = Lines()
    monkeypatch.setattr(
        error_replies, "log", structlog.wrap_logger(lines, processors=[structlog.processors.JSONRenderer()])
    )
    async with gateway(f"sqlite:///{tmp_path}/gateway.db") as gw:
        for path, status in REFUSED_AFTER_THE_KEY:
            reply = await gw.client.get(path, headers={"Authorization": f"Bearer {gw.team_key}"})
            assert reply.status_code == status, (path, reply.text)
            (line,) = [
                event
                for event in map(msgspec.json.decode, lines.lines)
                if event.get("request_id") == reply.headers["x-request-id"]
            ]
            assert line["event"] == "request_rejected" and line["status"] == status
            assert line["key_id"] is not None and gw.team_key.startswith(line["key"]), (path, line)


async def test_only_the_messages_api_takes_x_api_key(tmp_path: Path) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    async with gateway(f"sqlite:///{tmp_path}/gateway.db") as gw:
        anthropic = {"x-api-key": gw.team_key}
        counted = await gw.client.post("/v1/messages/count_tokens", json=body, headers=anthropic)
        assert counted.status_code == 200, counted.text
        assert counted.json()["input_tokens"] > 0
        assert counted.headers["x-request-id"]
        refused = await gw.client.get("/v1/files", headers=anthropic)
        assert refused.status_code == 401
        assert (await gw.client.post("/v1/messages/count_tokens", json=body)).status_code == 401
