"""Every app `create_app` builds serves the proxied endpoints through its front: the front holds the
services of the app's lifespan, and only while that lifespan runs; it checks the key before it reads
any of the body, reads bodies under one budget per process, and relays a stream whole, metered once.
The spellings of a proxied path that only Litestar's router takes reach the same front."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from litestar.testing import AsyncTestClient, TestClient

from gateway.app import GatewayApp, create_app
from gateway.services import Services
from gateway.settings import Settings
from tests.fuzz.stack import fuzz_settings, prepare_database

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def test_each_lifespan_serves_with_its_own_services(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path)
    _, secret = asyncio.run(prepare_database(settings))
    app = create_app(settings)
    auth = {"Authorization": f"Bearer {secret}"}
    opened = []
    for _ in range(2):
        with TestClient(app) as client:
            services = app.state.services
            opened.append(services)
            assert app.front.services is services  # taken when the lifespan started them
            response = client.post("/v1/chat/completions", json=CHAT, headers=auth)
            assert response.status_code == 200, response.text
        assert app.front.services is None  # the lifespan closed them: nothing keeps them here
    assert opened[0] is not opened[1]


MAX_BODY, BUDGET = 4096, 6000


def with_body_limits(settings: Settings, max_body_bytes: int, max_buffered_body_bytes: int) -> Settings:
    limits = msgspec.structs.replace(
        settings.catalog.limits,
        max_body_bytes=max_body_bytes,
        max_buffered_body_bytes=max_buffered_body_bytes,
    )
    return msgspec.structs.replace(settings, catalog=msgspec.structs.replace(settings.catalog, limits=limits))


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[tuple[GatewayApp, str]]:
    """An app with a small cap and budget, its lifespan running, its key checked and cached."""
    settings = with_body_limits(fuzz_settings(tmp_path), MAX_BODY, BUDGET)
    _, secret = await prepare_database(settings)
    front = create_app(settings)
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


def chat_scope(headers: dict[str, str], path: str = "/v1/chat/completions") -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(),
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

    async def through(
        self, app: GatewayApp, headers: dict[str, str], path: str = "/v1/chat/completions"
    ) -> None:
        await app(chat_scope(headers, path), self.receive, self.send)

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
    front: tuple[GatewayApp, str], authorization: str | None
) -> None:
    upload = Upload([b"x" * 4000])
    headers = {"content-length": "4000", "expect": "100-continue"}
    await upload.through(front[0], headers | ({"authorization": authorization} if authorization else {}))
    assert upload.status == 401
    assert upload.error["type"] == "authentication_error"
    assert upload.asked == 0  # uvicorn sends `100 Continue` on the first receive(): it never was
    assert upload.headers["connection"] == "close"  # the body stays unread: the connection goes


async def test_bodies_being_read_share_the_budget_of_the_process(front: tuple[GatewayApp, str]) -> None:
    gateway, secret = front
    auth = {"authorization": f"Bearer {secret}"}
    body = chat_body(4000)
    slow = Upload([body[:1000], body[1000:]], hold=1)
    reading = asyncio.create_task(slow.through(gateway, auth | {"content-length": "4000"}))
    await slow.waiting.wait()
    assert gateway.front.body_budget.held == 4000  # the declared length, taken before the first byte

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
    assert gateway.front.body_budget.held == 0
    after = Upload([body[:2000], body[2000:]])
    await after.through(gateway, auth | {"content-length": "4000"})
    assert after.status == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions/", "/v1//chat/completions"])
async def test_a_path_only_litestars_router_takes_is_served_by_the_front(
    front: tuple[GatewayApp, str], path: str
) -> None:
    gateway, secret = front
    refused = Upload([b"x" * 4000])
    await refused.through(gateway, {"content-length": "4000"}, path)
    assert (refused.status, refused.asked) == (401, 0)
    assert refused.headers["connection"] == "close"  # the front's answer to a body left unread

    held = Upload([chat_body(4000)[:1000], chat_body(4000)[1000:]], hold=1)
    reading = asyncio.create_task(
        held.through(gateway, {"authorization": f"Bearer {secret}", "content-length": "4000"})
    )
    await held.waiting.wait()
    over = Upload([chat_body(4000)])
    await over.through(gateway, {"authorization": f"Bearer {secret}", "content-length": "4000"}, path)
    assert (over.status, over.error["code"]) == (503, "server_busy")  # the front's budget of bodies
    held.go.set()
    await reading
    served = Upload([chat_body(4000)])
    await served.through(gateway, {"authorization": f"Bearer {secret}", "content-length": "4000"}, path)
    assert served.status == 200, served.sent


async def test_a_stream_is_relayed_whole_and_metered_once(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path)
    _, secret = await prepare_database(settings)
    app = create_app(settings)
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    async with AsyncTestClient(app=app) as client:
        response = await client.post(
            "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}
        )
        services: Services = app.state.services
        await services.writer.flush()
        pending = await services.buffer.read(100, 0)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [line for line in response.text.split("\n\n") if line]
    assert frames[-1] == "data: [DONE]"
    chunks = [msgspec.json.decode(frame.removeprefix("data: ")) for frame in frames[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert pending == []  # the one usage event was written, none left behind
    assert services.writer.records_written == 1
