"""Idempotent retries through the official SDKs, against `gateway serve` and the mock upstream: with
Redis and PostgreSQL (the session's stack) and in the embedded default (SQLite, no Redis).

The openai SDK that gives up on a slow answer and retries with its own Idempotency-Key costs one
upstream call and one usage record; concurrent duplicates share one upstream call; a stream whose
client left is run to its end and replayed whole to the retry; another body under the key is a 409
the SDK does not retry; another team's identical key runs on its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from sqlalchemy import text

from gateway.db.session import create_engine
from tests.e2e.conftest import ADMIN_KEY, CONFIG, MAX_BODY, Stack
from tests.support.gateway import GatewayProcess, Team, free_port
from tests.support.upstream import RunningUpstream, fresh, start_mock_upstream

pytestmark = pytest.mark.e2e
REPLAY = "x-gateway-idempotent-replay"
CHAT_PATH = "/v1/chat/completions"
MESSAGES: list[Any] = [{"role": "user", "content": "Say something worth keeping"}]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`gateway serve` on a SQLite file without Redis: slots kept in its process."""
    directory = tmp_path_factory.mktemp("idempotent")
    upstream = start_mock_upstream()
    config = directory / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url, dead_port=free_port(), max_body=MAX_BODY))
    env = {
        "GATEWAY_DATABASE_URL": f"sqlite:///{Path(directory) / 'gateway.db'}",
        "GATEWAY_REDIS_URL": "",
        "GATEWAY_WORKERS": "1",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
    }
    gateway = GatewayProcess(config, env).start()
    admin = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
    try:
        yield Stack(gateway, upstream, admin)
    finally:
        admin.close()
        gateway.stop()
        upstream.stop()


@pytest.fixture(params=["redis", "embedded"])
def served(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """Each test with both stores: Redis (the session's stack) and the embedded default."""
    chosen: Stack = request.getfixturevalue("stack" if request.param == "redis" else "embedded")
    yield from (chosen for _ in fresh(chosen.upstream))


def retrying_sdk(stack: Stack, team: Team, timeout_s: float, max_retries: int) -> openai.OpenAI:
    """The openai SDK sending its own Idempotency-Key, one per call and the same on each retry of
    it: its base client sends `idempotency_key` under `_idempotency_header`, which a client sets."""
    client = openai.OpenAI(
        base_url=stack.base_url, api_key=team.key, timeout=timeout_s, max_retries=max_retries
    )
    client._idempotency_header = "Idempotency-Key"
    return client


def upstream_calls(upstream: RunningUpstream, path: str = CHAT_PATH) -> int:
    return int(upstream.stats()["paths"].get(path, 0))


def records(stack: Stack, team: Team, expected: int) -> list[tuple[str, int]]:
    """The team's usage records (request id, status), read from the database once `expected` are
    written, and a moment more for any extra."""
    for _ in range(80):
        if len(usage_records(stack, team)) >= expected:
            break
        time.sleep(0.25)
    time.sleep(1.0)  # a second record would be written by now
    return usage_records(stack, team)


def usage_records(stack: Stack, team: Team) -> list[tuple[str, int]]:
    async def read() -> list[tuple[str, int]]:
        engine = create_engine(stack.gateway.env["GATEWAY_DATABASE_URL"])
        try:
            async with engine.connect() as connection:
                rows = await connection.execute(
                    text("SELECT request_id, status FROM usage_records WHERE team_id = :team"),
                    {"team": team.id},
                )
                return [(str(row[0]), int(row[1])) for row in rows]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_the_sdk_retrying_after_its_timeout_costs_one_call_and_one_record(served: Stack) -> None:
    team = served.new_team(f"idem-timeout-{time.monotonic_ns()}")
    served.upstream.set_behaviour(latency_ms=1500)  # longer than the SDK waits
    sdk = retrying_sdk(served, team, timeout_s=0.6, max_retries=6)

    raw = sdk.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)

    answer = raw.parse()
    assert answer.choices[0].message.content
    sent = served.upstream.requests()
    assert upstream_calls(served.upstream) == 1  # the SDK's attempts waited for the first
    assert raw.http_response.headers[REPLAY] == "true"  # the answer came to a retry
    assert raw.http_response.headers["x-request-id"] == answer_id_of(served, team)
    assert len(sent) == 1
    rows = records(served, team, 1)
    assert len(rows) == 1 and rows[0][1] == 200


def answer_id_of(stack: Stack, team: Team) -> str:
    """The request id of the team's one usage record: the first attempt's."""
    return records(stack, team, 1)[0][0]


def test_concurrent_duplicates_share_one_upstream_call(served: Stack) -> None:
    team = served.new_team(f"idem-concurrent-{time.monotonic_ns()}")
    served.upstream.set_behaviour(latency_ms=500)
    headers = {"authorization": f"Bearer {team.key}", "idempotency-key": "together"}
    body = {"model": "chat", "messages": MESSAGES}

    def post(_: int) -> httpx.Response:
        return httpx.post(served.base_url + "/chat/completions", json=body, headers=headers, timeout=10)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(post, range(4)))

    assert [a.status_code for a in answers] == [200] * 4
    assert len({a.content for a in answers}) == 1
    assert len({a.headers["x-request-id"] for a in answers}) == 1
    assert sum(a.headers.get(REPLAY) == "true" for a in answers) == 3
    assert upstream_calls(served.upstream) == 1
    assert len(records(served, team, 1)) == 1


def test_another_body_under_the_key_is_a_409_the_sdk_does_not_retry(served: Stack) -> None:
    team = served.new_team(f"idem-conflict-{time.monotonic_ns()}")
    sdk = openai.OpenAI(base_url=served.base_url, api_key=team.key, max_retries=3)
    key = {"Idempotency-Key": "one-request"}
    sdk.chat.completions.create(model="chat", messages=MESSAGES, extra_headers=key)

    with pytest.raises(openai.ConflictError) as conflict:
        sdk.chat.completions.create(model="chat", messages=MESSAGES, temperature=0.2, extra_headers=key)

    assert conflict.value.code == "idempotency_key_reused"
    assert upstream_calls(served.upstream) == 1


def test_another_teams_identical_key_runs_on_its_own(served: Stack) -> None:
    ours = served.new_team(f"idem-ours-{time.monotonic_ns()}")
    theirs = served.new_team(f"idem-theirs-{time.monotonic_ns()}")
    key = {"Idempotency-Key": "the-same-key"}

    mine = openai.OpenAI(base_url=served.base_url, api_key=ours.key, max_retries=0)
    other = openai.OpenAI(base_url=served.base_url, api_key=theirs.key, max_retries=0)
    first = mine.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES, extra_headers=key)
    second = other.chat.completions.with_raw_response.create(
        model="chat", messages=MESSAGES, extra_headers=key
    )

    assert REPLAY not in second.http_response.headers
    assert second.http_response.headers["x-request-id"] != first.http_response.headers["x-request-id"]
    assert upstream_calls(served.upstream) == 2
    assert len(records(served, theirs, 1)) == 1


def test_a_stream_whose_client_left_is_replayed_whole_to_the_retry(served: Stack) -> None:
    team = served.new_team(f"idem-stream-{time.monotonic_ns()}")
    served.upstream.set_behaviour(chunks=8, chunk_delay_ms=150)
    headers = {"authorization": f"Bearer {team.key}", "idempotency-key": "stream-once"}
    body = {"model": "chat", "messages": MESSAGES, "stream": True}
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", served.base_url + "/chat/completions", json=body, headers=headers) as left,
    ):
        assert left.status_code == 200
        first_id = left.headers["x-request-id"]
        next(left.iter_bytes())  # one chunk, then the client goes

    retry = httpx.post(served.base_url + "/chat/completions", json=body, headers=headers, timeout=10)

    assert retry.status_code == 200
    assert retry.headers[REPLAY] == "true"
    assert retry.headers["x-request-id"] == first_id
    frames = [line for line in retry.text.split("\n\n") if line]
    assert frames[-1] == "data: [DONE]"
    assert sum('"content"' in frame for frame in frames) >= 8  # every chunk, not only what was read
    again = httpx.post(served.base_url + "/chat/completions", json=body, headers=headers, timeout=10)
    assert again.text == retry.text
    assert upstream_calls(served.upstream) == 1
    rows = records(served, team, 1)
    assert len(rows) == 1 and rows[0][1] == 200  # run to its end: not a client disconnect


def test_a_stream_through_the_sdk_is_replayed_as_it_was_sent(served: Stack) -> None:
    team = served.new_team(f"idem-sdk-stream-{time.monotonic_ns()}")
    sdk = openai.OpenAI(base_url=served.base_url, api_key=team.key, max_retries=0)
    key = {"Idempotency-Key": "sdk-stream"}

    def streamed() -> list[str]:
        stream = sdk.chat.completions.create(model="chat", messages=MESSAGES, stream=True, extra_headers=key)
        return [chunk.model_dump_json() for chunk in stream]

    assert streamed() == streamed()
    assert upstream_calls(served.upstream) == 1


def test_a_messages_retry_through_the_anthropic_sdk_is_replayed(served: Stack) -> None:
    team = served.new_team(f"idem-messages-{time.monotonic_ns()}")
    sdk = anthropic.Anthropic(base_url=served.gateway.base_url, api_key=team.key, max_retries=0)
    key = {"Idempotency-Key": "messages-once"}

    def ask(max_tokens: int = 64) -> Any:
        return sdk.messages.with_raw_response.create(
            model="claude", max_tokens=max_tokens, messages=MESSAGES, extra_headers=key
        )

    first, again = ask(), ask()
    assert again.http_response.content == first.http_response.content
    assert again.http_response.headers[REPLAY] == "true"
    with pytest.raises(anthropic.ConflictError) as conflict:
        ask(max_tokens=32)
    assert conflict.value.body["type"] == "error"  # type: ignore[index]
    assert upstream_calls(served.upstream, "/v1/messages") == 1


def test_an_upload_sent_twice_under_one_key_makes_one_file(served: Stack) -> None:
    """The SDK builds each upload with a multipart boundary of its own: the key still names it."""
    team = served.new_team(f"idem-upload-{time.monotonic_ns()}")
    sdk = openai.OpenAI(base_url=served.base_url, api_key=team.key, max_retries=0)
    data = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'

    def upload(content: bytes) -> Any:
        return sdk.files.with_raw_response.create(
            file=("nightly.jsonl", content), purpose="batch", extra_headers={"Idempotency-Key": "nightly"}
        )

    first, again = upload(data), upload(data)
    assert again.parse().id == first.parse().id
    assert again.http_response.headers[REPLAY] == "true"
    assert [f.id for f in sdk.files.list()] == [first.parse().id]
    with pytest.raises(openai.ConflictError):
        upload(data + data)
