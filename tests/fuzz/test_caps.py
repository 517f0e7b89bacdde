"""The size caps reachable in process: body (413 before it is read in full), message count, batch id
length, upstream response size and request header size (431)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from gateway.server.asgi import serving_app
from tests.fuzz.stack import DEFAULT_CONFIG, FuzzStack, fuzz_settings, prepare_database
from tests.support.openapi import validate

MAX_BODY = 4096
MAX_MESSAGES = 3
MAX_UPSTREAM = 2048
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def capped(tmp_path: Path) -> AsyncIterator[tuple[FuzzStack, AsyncTestClient[Litestar]]]:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        DEFAULT_CONFIG.read_text()
        + f"  max_messages: {MAX_MESSAGES}\n  max_upstream_response_bytes: {MAX_UPSTREAM}\n"
    )
    config.write_text(config.read_text().replace("max_body_bytes: 33554432", f"max_body_bytes: {MAX_BODY}"))
    settings = fuzz_settings(tmp_path, config)
    team_id, secret = await prepare_database(settings)
    stack = FuzzStack(serving_app(settings), settings, team_id, secret)
    async with AsyncTestClient(app=stack.app) as client:
        yield stack, client


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    validate("ErrorResponse", body)
    error: dict[str, Any] = body["error"]
    return error


async def test_the_limits_are_the_configured_ones(capped: tuple[FuzzStack, Any]) -> None:
    limits = capped[0].settings.catalog.limits
    assert (limits.max_body_bytes, limits.max_messages) == (MAX_BODY, MAX_MESSAGES)
    assert limits.max_upstream_response_bytes == MAX_UPSTREAM


async def test_a_body_over_the_cap_is_413(capped: tuple[FuzzStack, AsyncTestClient[Litestar]]) -> None:
    stack, client = capped
    body = {**CHAT, "padding": "x" * MAX_BODY}
    response = await client.post("/v1/chat/completions", json=body, headers=stack.team_auth)
    assert error_of(response, 413)["code"] == "request_too_large"


async def test_a_body_at_the_cap_is_read(capped: tuple[FuzzStack, AsyncTestClient[Litestar]]) -> None:
    stack, client = capped
    raw = httpx.Request("POST", "/", json=CHAT).content
    padded = raw[:-1] + b"," + b'"p":"' + b"x" * (MAX_BODY - len(raw) - 7) + b'"}'
    assert len(padded) == MAX_BODY
    response = await client.post("/v1/chat/completions", content=padded, headers=stack.team_auth)
    assert response.status_code == 200, response.text


async def test_an_announced_oversized_body_is_refused_before_it_is_read(
    capped: tuple[FuzzStack, AsyncTestClient[Litestar]],
) -> None:
    """Driven at the ASGI level, so the test sees how much of the body the gateway asked for."""
    stack, client = capped
    # the app's database pool belongs to the client's event loop: let the key be checked (and
    # cached) there, so this direct call on the test's loop needs no query
    assert (await client.get("/v1/models", headers=stack.team_auth)).status_code == 200
    chunk, chunks = b"x" * 65536, 1000  # 64 MiB announced, produced only on demand
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": chunk, "more_body": read < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [
        (b"host", b"testserver"),
        (b"content-length", str(len(chunk) * chunks).encode()),
        (b"authorization", stack.team_auth["Authorization"].encode()),
    ]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("testserver", 80), "state": {},
    }  # fmt: skip
    await stack.app(scope, receive, send)  # type: ignore[arg-type]

    assert sent[0]["status"] == 413, sent
    assert read == 0


async def test_more_messages_than_the_cap_is_400(capped: tuple[FuzzStack, AsyncTestClient[Litestar]]) -> None:
    stack, client = capped
    messages = [{"role": "user", "content": str(i)} for i in range(MAX_MESSAGES + 1)]
    response = await client.post(
        "/v1/chat/completions", json={**CHAT, "messages": messages}, headers=stack.team_auth
    )
    assert error_of(response, 400)["param"] == "messages"
    ok = await client.post(
        "/v1/chat/completions", json={**CHAT, "messages": messages[:MAX_MESSAGES]}, headers=stack.team_auth
    )
    assert ok.status_code == 200


@pytest.mark.parametrize("length", [128, 129])
async def test_a_batch_id_is_at_most_128_characters(
    capped: tuple[FuzzStack, AsyncTestClient[Litestar]], length: int
) -> None:
    stack, client = capped
    batch = "b" * length
    by_header = await client.post(
        "/v1/chat/completions", json=CHAT, headers=stack.team_auth | {"X-Gateway-Batch": batch}
    )
    by_body = await client.post(
        "/v1/chat/completions", json={**CHAT, "gateway": {"batch": batch}}, headers=stack.team_auth
    )
    if length <= 128:
        assert (by_header.status_code, by_body.status_code) == (200, 200)
    else:
        assert error_of(by_header, 400)["param"] == "X-Gateway-Batch"
        assert error_of(by_body, 400)["param"] == "gateway.batch"


@pytest.mark.parametrize(
    "stream",
    [
        False,
        True,
    ],
)
async def test_an_upstream_response_over_the_cap_is_an_upstream_error(
    capped: tuple[FuzzStack, AsyncTestClient[Litestar]], stream: bool
) -> None:
    stack, client = capped
    small = await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 5}, headers=stack.team_auth)
    assert small.status_code == 200
    big = {**CHAT, "n": 30, "stream": stream}  # thirty choices: several KiB
    response = await client.post("/v1/chat/completions", json=big, headers=stack.team_auth)
    if not stream:
        assert error_of(response, 502)["code"] == "upstream_too_large"
    else:
        assert response.status_code == 200  # the first bytes went out: the error is in the stream
        assert len(response.content) <= MAX_UPSTREAM + 1024
        assert '"upstream_too_large"' in response.text


async def test_oversized_request_headers_are_431(capped: tuple[FuzzStack, AsyncTestClient[Litestar]]) -> None:
    stack, client = capped
    huge = {"x-padding": "p" * (70 * 1024)} | stack.team_auth
    response = await client.get("/v1/models", headers=huge)
    assert response.status_code == 431
    validate("ErrorResponse", response.json())
    assert (await client.get("/v1/models", headers=stack.team_auth)).status_code == 200


async def test_a_streamed_body_without_a_length_over_the_cap_is_413(
    capped: tuple[FuzzStack, AsyncTestClient[Litestar]],
) -> None:
    """No content-length to refuse up front: the proxy front counts as it reads, and stops."""
    stack, client = capped
    assert (await client.get("/v1/models", headers=stack.team_auth)).status_code == 200
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": b" " * (MAX_BODY // 2), "more_body": read < 100}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await stack.app(chat_scope(stack), receive, send)  # type: ignore[arg-type]

    assert sent[0]["status"] == 413
    validate("ErrorResponse", msgspec.json.decode(sent[1]["body"]))
    assert read == 3  # the third piece crossed the cap; the rest was never asked for


def chat_scope(stack: FuzzStack) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("testserver", 80),
        "headers": [(b"authorization", stack.team_auth["Authorization"].encode())], "state": {},
    }  # fmt: skip


async def test_a_proxied_path_with_another_method_is_an_openai_405(
    capped: tuple[FuzzStack, AsyncTestClient[Litestar]],
) -> None:
    stack, client = capped
    response = await client.get("/v1/chat/completions", headers=stack.team_auth)
    assert error_of(response, 405)["type"] == "invalid_request_error"


async def test_a_client_that_leaves_mid_body_gets_no_answer(
    capped: tuple[FuzzStack, AsyncTestClient[Litestar]],
) -> None:
    stack, client = capped
    assert (await client.get("/v1/models", headers=stack.team_auth)).status_code == 200
    messages = iter(
        [
            {"type": "http.request", "body": b'{"model": "gpt-4o', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await stack.app(chat_scope(stack), receive, send)  # type: ignore[arg-type]

    assert sent == []
