"""`gateway serve` over raw sockets: a request refused for its key is answered from its headers,
before any of its body is asked for (no `100 Continue`, no upload waited for), and the connection
is closed; idle kept-alive connections are closed after `GATEWAY_KEEP_ALIVE_TIMEOUT_S`; the
official SDK is served as before.

Its own stack: one `gateway serve` on the embedded default config (built-in mock providers) and a
SQLite file, without Redis.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import REPO, GatewayProcess, Team, create_team

pytestmark = pytest.mark.e2e
ADMIN_KEY = "admin-connections-secret"
KEEP_ALIVE_S = 1
# Longer than the keep-alive set here, shorter than uvicorn's default of 5 s; and how long any
# answer is waited for: a test that gets none fails instead of hanging.
WAIT_S = 4.0
MAX_BODY = 32 * 1024 * 1024  # the default cap: the bodies below are as large as it allows
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Served:
    gateway: GatewayProcess
    admin: httpx.Client
    team: Team

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.gateway.port), timeout=WAIT_S)

    def sdk(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url + "/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("connections")
    config = directory / "gateway.yaml"
    config.write_text((REPO / "config" / "gateway.yaml").read_text())
    env = {
        "GATEWAY_DATABASE_URL": f"sqlite:///{directory / 'gateway.db'}",
        "GATEWAY_REDIS_URL": "",
        "GATEWAY_WORKERS": "1",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEEP_ALIVE_TIMEOUT_S": str(KEEP_ALIVE_S),
    }
    gateway = GatewayProcess(config, env).start()
    admin = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
    try:
        yield Served(gateway, admin, create_team(admin, "connections"))
    finally:
        admin.close()
        gateway.stop()


@dataclass(frozen=True)
class Answer:
    status_line: str
    headers: dict[str, str]
    body: bytes

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = json.loads(self.body)["error"]
        return error


def read_answer(sock: socket.socket) -> Answer:
    """One response (an informational one included) as it comes off the socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed inside a response body"
        body += chunk
    return Answer(status_line, headers, body)


def upload_head(length: int, authorization: str | None, *, expect: bool = False) -> bytes:
    lines = ["POST /v1/chat/completions HTTP/1.1", "Host: gateway", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}")
    if expect:
        lines.append("Expect: 100-continue")
    if authorization is not None:
        lines.append(f"Authorization: {authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def assert_closed(sock: socket.socket) -> None:
    """The server has closed the connection: nothing more comes, and nothing more is taken."""
    assert sock.recv(65536) == b""
    try:
        for _ in range(1000):  # more than any socket buffer holds
            sock.sendall(b"x" * 65536)
    except (BrokenPipeError, ConnectionResetError):
        return
    pytest.fail("the server went on taking the body after its answer")


def revoked_key(served: Served) -> str:
    team = create_team(served.admin, "revoked")
    assert served.admin.delete(f"/admin/keys/{team.key_id}").status_code == 200
    return team.key


@pytest.mark.parametrize("who", ["missing", "unknown", "revoked"])
def test_a_refused_key_gets_401_without_100_continue(served: Served, who: str) -> None:
    key = (
        revoked_key(served) if who == "revoked" else {"missing": None, "unknown": "sk-gw-not-a-real-key"}[who]
    )
    with served.connect() as sock:
        sock.sendall(upload_head(MAX_BODY, None if key is None else f"Bearer {key}", expect=True))
        answer = read_answer(sock)  # the body is never sent: an answer can only come from the headers
        assert answer.status_line == "HTTP/1.1 401 Unauthorized", answer
        assert answer.error["type"] == "authentication_error"
        assert answer.headers["connection"] == "close"
        assert_closed(sock)


def test_a_good_key_gets_100_continue_then_its_answer(served: Served) -> None:
    body = json.dumps(CHAT).encode()
    with served.connect() as sock:
        sock.sendall(upload_head(len(body), f"Bearer {served.team.key}", expect=True))
        assert read_answer(sock).status_line == "HTTP/1.1 100 Continue"
        sock.sendall(body)
        answer = read_answer(sock)
        assert answer.status_line == "HTTP/1.1 200 OK", answer
        assert json.loads(answer.body)["object"] == "chat.completion"


def test_slow_unauthenticated_uploads_are_refused_before_their_bodies(served: Served) -> None:
    """16 connections each announce a body as large as the cap and send its first 16 KiB: each is
    answered while almost all of its body is still to come, and none of the rest is taken."""
    sockets = [served.connect() for _ in range(16)]
    try:
        for sock in sockets:
            sock.sendall(upload_head(MAX_BODY, "Bearer sk-gw-not-a-real-key") + b"{" + b" " * 16383)
        for sock in sockets:
            answer = read_answer(sock)
            assert answer.status_line == "HTTP/1.1 401 Unauthorized", answer
            assert answer.headers["connection"] == "close"
            assert_closed(sock)
    finally:
        for sock in sockets:
            sock.close()
    assert httpx.get(served.gateway.base_url + "/healthz").status_code == 200


def test_an_idle_kept_alive_connection_is_closed_after_the_setting(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
        answer = read_answer(sock)
        assert answer.status_line == "HTTP/1.1 200 OK"
        assert "connection" not in answer.headers  # kept alive
        assert sock.recv(65536) == b""  # then closed by the server, before uvicorn's default 5 s


def test_the_sdk_is_served_as_before(served: Served) -> None:
    client = served.sdk(served.team.key)
    chat = client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
    assert chat.choices[0].message.content
    stream = client.chat.completions.create(**CHAT, stream=True)  # type: ignore[call-overload]
    assert any(chunk.choices and chunk.choices[0].delta.content for chunk in stream)
    embedding = client.embeddings.create(model="text-embedding-3-small", input="hi")
    assert embedding.data[0].embedding
    long = [{"role": "user", "content": "many words " * 200_000}]  # 2.2 MB, read in many pieces
    assert client.chat.completions.create(model="gpt-4o-mini", messages=long).choices  # type: ignore[arg-type]


def test_the_sdk_gets_its_401_while_it_is_still_sending_a_large_body(served: Served) -> None:
    long = [{"role": "user", "content": "many words " * 800_000}]  # 8.8 MB
    with pytest.raises(openai.AuthenticationError):
        served.sdk("sk-gw-not-a-real-key").chat.completions.create(model="gpt-4o-mini", messages=long)  # type: ignore[arg-type]
