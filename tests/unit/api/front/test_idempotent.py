"""The front with `Idempotency-Key`, in the embedded default (no Redis, the built-in mock
upstream): a repeat is answered from the store (JSON and streams, on each API's path), with the
first answer's request id and a header saying so; another body under the key is a 409 in the
client's format; another team's identical key runs on its own; an invalid key is a 400."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from gateway.app import GatewayApp, create_app
from gateway.db.session import create_engine, session_factory
from gateway.idempotency.service import REPLAY_HEADER
from tests.fuzz.stack import fuzz_settings, prepare_database
from tests.unit.auth.records import add_key, add_team

CHAT: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
}


@dataclass
class Front:
    client: AsyncTestClient[GatewayApp]
    app: GatewayApp
    key: str
    other_team_key: str

    async def post(
        self, path: str, body: dict[str, Any], idempotency_key: str | None, key: str | None = None
    ) -> Any:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return await self.client.post(path, json=body, headers=headers)

    def upstream_calls(self) -> int:
        """Requests the built-in mock upstream answered (the executor's in-process client)."""
        mock = self.app.state.services.executor._mock  # the in-process transport: no other handle
        return int(mock.transport.upstream.recorder.stats()["total"])

    async def records(self) -> int:
        """Usage records in the database, once the writer has moved every buffered one."""
        services = self.app.state.services
        for _ in range(100):
            if await services.buffer.depth() == 0:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a batch read but not yet committed
        async with services.sessions() as session:
            return int((await session.execute(text("SELECT count(*) FROM usage_records"))).scalar_one())


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[Front]:
    settings = fuzz_settings(tmp_path)
    _, secret = await prepare_database(settings)
    engine = create_engine(settings.database_url)
    try:
        other = await add_team(session_factory(engine), "others")
        _, other_secret = await add_key(session_factory(engine), other.id, "their-key")
    finally:
        await engine.dispose()
    app = create_app(settings)
    async with AsyncTestClient(app=app) as client:
        yield Front(client, app, secret, other_secret)


async def test_a_repeat_gets_the_first_answer_and_is_metered_once(front: Front) -> None:
    first = await front.post("/v1/chat/completions", CHAT, "key-1")
    again = await front.post("/v1/chat/completions", CHAT, "key-1")

    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert again.headers["x-request-id"] == first.headers["x-request-id"]  # the first's id
    assert again.headers[REPLAY_HEADER] == "true"
    assert REPLAY_HEADER not in first.headers
    assert front.upstream_calls() == 1
    assert await front.records() == 1


async def test_requests_without_a_key_are_not_deduplicated(front: Front) -> None:
    first = await front.post("/v1/chat/completions", CHAT, None)
    again = await front.post("/v1/chat/completions", CHAT, None)

    assert first.headers["x-request-id"] != again.headers["x-request-id"]
    assert REPLAY_HEADER not in again.headers
    assert front.upstream_calls() == 2


async def test_another_body_under_the_same_key_is_a_409(front: Front) -> None:
    await front.post("/v1/chat/completions", CHAT, "key-1")
    other = await front.post("/v1/chat/completions", CHAT | {"temperature": 0.5}, "key-1")

    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert other.json()["error"]["param"] == "Idempotency-Key"
    assert front.upstream_calls() == 1


async def test_what_became_of_keyed_requests_is_counted_on_metrics(front: Front) -> None:
    await front.post("/v1/chat/completions", CHAT, "key-1")
    await front.post("/v1/chat/completions", CHAT, "key-1")
    await front.post("/v1/chat/completions", CHAT, "key-1")
    await front.post("/v1/chat/completions", CHAT | {"temperature": 0.5}, "key-1")
    await front.post("/v1/chat/completions", CHAT, None)  # no key: not counted

    exposition = (await front.client.get("/metrics")).text

    counted = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.startswith("gateway_idempotent_requests_total{")
    }
    assert counted == {"first": 1.0, "replayed": 2.0, "conflict": 1.0}


async def test_another_path_under_the_same_key_is_a_409(front: Front) -> None:
    await front.post("/v1/chat/completions", CHAT, "key-1")
    other = await front.post("/v1/completions", CHAT, "key-1")

    assert other.status_code == 409


async def test_a_409_on_the_messages_api_is_in_anthropics_envelope(front: Front) -> None:
    first = await front.post("/v1/messages", MESSAGES, "key-m")
    again = await front.post("/v1/messages", MESSAGES, "key-m")
    other = await front.post("/v1/messages", MESSAGES | {"max_tokens": 8}, "key-m")

    assert first.status_code == 200
    assert again.content == first.content and again.headers[REPLAY_HEADER] == "true"
    assert other.status_code == 409
    assert other.json()["type"] == "error"
    assert other.json()["error"]["type"] == "invalid_request_error"


async def test_another_teams_identical_key_runs_on_its_own(front: Front) -> None:
    ours = await front.post("/v1/chat/completions", CHAT, "shared")
    theirs = await front.post("/v1/chat/completions", CHAT, "shared", key=front.other_team_key)
    theirs_with_another_body = await front.post(
        "/v1/chat/completions", CHAT | {"temperature": 0.5}, "shared", key=front.other_team_key
    )

    assert theirs.status_code == 200
    assert REPLAY_HEADER not in theirs.headers
    assert theirs.headers["x-request-id"] != ours.headers["x-request-id"]
    assert theirs_with_another_body.status_code == 409  # their own first request, not ours
    assert front.upstream_calls() == 2


async def test_a_stream_is_replayed_frame_for_frame(front: Front) -> None:
    body = CHAT | {"stream": True}
    first = await front.post("/v1/chat/completions", body, "stream-1")
    again = await front.post("/v1/chat/completions", body, "stream-1")

    assert first.status_code == again.status_code == 200
    assert again.headers["content-type"].startswith("text/event-stream")
    assert again.text == first.text
    assert first.text.rstrip().endswith("data: [DONE]")
    assert again.headers[REPLAY_HEADER] == "true"
    assert again.headers["x-request-id"] == first.headers["x-request-id"]
    assert front.upstream_calls() == 1
    assert await front.records() == 1


async def test_concurrent_duplicates_share_one_upstream_call(front: Front) -> None:
    slow = CHAT | {"mock": {"latency_ms": 300}}
    answers = await asyncio.gather(*(front.post("/v1/chat/completions", slow, "together") for _ in range(4)))

    assert {a.status_code for a in answers} == {200}
    assert len({a.content for a in answers}) == 1
    assert len({a.headers["x-request-id"] for a in answers}) == 1
    assert sum(REPLAY_HEADER in a.headers for a in answers) == 3
    assert front.upstream_calls() == 1


async def test_a_failure_before_any_upstream_is_not_kept(front: Front) -> None:
    unknown = await front.post("/v1/chat/completions", CHAT | {"model": "no-such-model"}, "bad-1")
    again = await front.post("/v1/chat/completions", CHAT | {"model": "no-such-model"}, "bad-1")

    assert unknown.status_code == again.status_code == 404
    assert REPLAY_HEADER not in again.headers  # run again, not replayed
    assert again.headers["x-request-id"] != unknown.headers["x-request-id"]


async def test_a_retryable_upstream_failure_is_not_kept(front: Front) -> None:
    failing = CHAT | {"mock": {"fail_rate": 1, "fail_status": 503}}
    first = await front.post("/v1/chat/completions", failing, "flaky")
    again = await front.post("/v1/chat/completions", failing, "flaky")

    assert first.status_code >= 500 and again.status_code >= 500
    assert REPLAY_HEADER not in again.headers
    assert front.upstream_calls() > 1  # the retry reached the upstream again


async def test_an_upstreams_refusal_is_kept(front: Front) -> None:
    refused = CHAT | {"mock": {"fail_rate": 1, "fail_status": 400}}
    first = await front.post("/v1/chat/completions", refused, "refused")
    again = await front.post("/v1/chat/completions", refused, "refused")

    assert first.status_code == again.status_code == 400
    assert again.content == first.content
    assert again.headers[REPLAY_HEADER] == "true"
    assert again.headers["x-request-id"] == first.headers["x-request-id"]
    assert front.upstream_calls() == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "a\tb"])
async def test_an_invalid_key_is_a_400(front: Front, key: str) -> None:
    refused = await front.post("/v1/chat/completions", CHAT, key)

    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_idempotency_key"
    assert front.upstream_calls() == 0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"model": "text-embedding-3-small", "input": "kept once"}),
        ("/v1/responses", {"model": "gpt-4o-mini", "input": "kept once"}),
        ("/v1/completions", {"model": "gpt-4o-mini", "prompt": "kept once"}),
        ("/v1/responses", {"model": "gpt-4o-mini", "input": "kept once", "stream": True}),
    ],
)
async def test_every_proxied_endpoint_answers_a_repeat_from_the_store(
    front: Front, path: str, body: dict[str, Any]
) -> None:
    first = await front.post(path, body, "each-endpoint")
    again = await front.post(path, body, "each-endpoint")

    assert first.status_code == 200, first.text
    assert again.content == first.content
    assert again.headers[REPLAY_HEADER] == "true"
    assert front.upstream_calls() == 1
