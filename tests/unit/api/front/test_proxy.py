"""The proxy front holds the services of the app's lifespan, and only while that lifespan runs; it
checks the key before it reads any of the body, and reads bodies under one budget per process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient, TestClient

from gateway.api.front.proxy import ProxyFront
from gateway.app import create_app
from tests.fuzz.stack import fuzz_settings, prepare_database

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def test_each_lifespan_serves_with_its_own_services(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path)
    _, secret = asyncio.run(prepare_database(settings))
    app = create_app(settings)
    limits = settings.catalog.limits
    front = ProxyFront(app, limits.max_body_bytes, limits.buffered_body_bytes)
    auth = {"Authorization": f"Bearer {secret}"}
    opened = []
    for _ in range(2):
        with TestClient(front) as client:
            services = app.state.services
            opened.append(services)
            assert front._services is services  # taken when the lifespan started them
            response = client.post("/v1/chat/completions", json=CHAT, headers=auth)
            assert response.status_code == 200, response.text
        assert front._services is None  # the lifespan closed them: nothing keeps them here
    assert opened[0] is not opened[1]


MAX_BODY, BUDGET = 4096, 6000


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[tuple[ProxyFront, str]]:
    """A front with a small cap and budget, its lifespan running, its key checked and cached."""
    settings = fuzz_settings(tmp_path)
    _, secret = await prepare_database(settings)
    front = ProxyFront(create_app(settings), MAX_BODY, BUDGET)
    async with AsyncTestClient(app=front) as client:
        # the app's database pool belongs to the client's event loop: the key is checked there
        # once, so the direct calls below find it cached
        models = await client.get("/v1/models", headers={"Authorization": f"Bearer {secret}"})
        assert models.status_code == 200
        yield front, secret


def chat_body(size: int) -> bytes:
    raw = httpx.Request("POST", "/", json=CHAT).content
    padded = raw[:-1] + b',"p":"' + b"x" * (size - len(raw) - 7) + b'"}'
    assert len(padded) == size
    return padded


def chat_scope(headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("testserver", 80),
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()], "state": {},
    }  # fmt: skip


class Upload:
    """A client sending its body in the given pieces, each only when asked for; `hold` stops it
    after that many pieces until `go` is set."""

    def __init__(self, pieces: list[bytes], hold: int | None = None) -> None:
        self.pieces = pieces
        self.hold = hold
        self.asked = 0
        self.waiting = asyncio.Event()  # set once the upload is held
        self.go = asyncio.Event()
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self.asked == self.hold:
            self.waiting.set()
            await self.go.wait()
        self.asked += 1
        return {
            "type": "http.request",
            "body": self.pieces[self.asked - 1],
            "more_body": self.asked < len(self.pieces),
        }

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def through(self, front: ProxyFront, headers: dict[str, str]) -> None:
        await front(chat_scope(headers), self.receive, self.send)  # type: ignore[arg-type]

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.sent[0]["headers"]}

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = json.loads(self.sent[1]["body"])["error"]
        return error


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-gateway-key", "Basic Zm9vOmJhcg=="])
async def test_a_refused_key_is_answered_before_any_of_the_body_is_read(
    front: tuple[ProxyFront, str], authorization: str | None
) -> None:
    upload = Upload([b"x" * 4000])
    headers = {"content-length": "4000", "expect": "100-continue"}
    await upload.through(front[0], headers | ({"authorization": authorization} if authorization else {}))
    assert upload.status == 401
    assert upload.error["type"] == "authentication_error"
    assert upload.asked == 0  # uvicorn sends `100 Continue` on the first receive(): it never was
    assert upload.headers["connection"] == "close"  # the body stays unread: the connection goes


async def test_bodies_being_read_share_the_budget_of_the_process(front: tuple[ProxyFront, str]) -> None:
    gateway, secret = front
    auth = {"authorization": f"Bearer {secret}"}
    body = chat_body(4000)
    slow = Upload([body[:1000], body[1000:]], hold=1)
    reading = asyncio.create_task(slow.through(gateway, auth | {"content-length": "4000"}))
    await slow.waiting.wait()
    assert gateway.body_budget.held == 4000  # the declared length, taken before the first byte

    declared = Upload([body])
    await declared.through(gateway, auth | {"content-length": "4000"})
    assert (declared.status, declared.error["code"], declared.asked) == (503, "server_busy", 0)
    assert declared.headers["retry-after"] == "1"
    assert declared.headers["connection"] == "close"

    chunked = Upload([body[:1500], body[1500:3000], body[3000:]])
    await chunked.through(gateway, auth | {"transfer-encoding": "chunked"})
    assert (chunked.status, chunked.asked) == (503, 2)  # 1500 fit beside the 4000 held, 3000 did not
    assert chunked.headers["connection"] == "close"

    slow.go.set()
    await reading
    assert slow.status == 200, slow.sent
    assert "connection" not in slow.headers  # read in full: the connection may serve another request
    assert gateway.body_budget.held == 0
    after = Upload([body[:2000], body[2000:]])
    await after.through(gateway, auth | {"content-length": "4000"})
    assert after.status == 200


async def test_the_litestar_handlers_check_the_key_before_the_body_too(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path)
    await prepare_database(settings)
    app = create_app(settings)
    async with AsyncTestClient(app=app):
        upload = Upload([b"x" * 4000])
        await app(chat_scope({"content-length": "4000"}), upload.receive, upload.send)  # type: ignore[arg-type]
    assert upload.status == 401
    assert upload.asked == 0
