"""What the console and the admin API read and check before anyone is authenticated, on a real
`gateway serve`: a sign-in form past its bound is refused before it is read; unknown admin keys get
401 and a team key 403; failed attempts are throttled per client without locking the admin key out.

Its own gateway: SQLite and no Redis (failed attempts counted in the process), the built-in mock
provider, the default body limits (32 MB), so the console's own bound is the one that answers.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.auth.secrets import new_key_secret
from tests.support.gateway import GatewayProcess, create_team

pytestmark = pytest.mark.e2e

ADMIN_KEY = "admin-console-limits-secret"
CONFIG = """
providers:
  - name: mock-us
    kind: mock
    region: us-east
models:
  - name: chat
    deployments:
      - provider: mock-us
        model: mock-chat
        price: {input: 0.15, output: 0.60}
"""
HUGE = 30 * 1024 * 1024
CHUNK = 64 * 1024


def start_gateway(workdir: Path, **env: str) -> GatewayProcess:
    config = workdir / "gateway.yaml"
    config.write_text(CONFIG)
    defaults = {
        "GATEWAY_DATABASE_URL": f"sqlite:///{workdir}/gateway.db",
        "GATEWAY_REDIS_URL": "",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
        "GATEWAY_RUN_JOBS": "false",  # no batch job here
    }
    return GatewayProcess(config, defaults | env).start()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Trusting no proxy (the default): every forwarded header is any client's claim."""
    process = start_gateway(tmp_path_factory.mktemp("console-limits"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Trusting 127.0.0.1 as its reverse proxy: the tests speak as the proxy, naming each client."""
    process = start_gateway(tmp_path_factory.mktemp("behind-proxy"), GATEWAY_TRUSTED_PROXIES="127.0.0.1")
    try:
        yield process
    finally:
        process.stop()


def memory_kib(pid: int) -> dict[str, int]:
    """The process's resident set now (VmRSS) and at its peak (VmHWM), in KiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


class FormSender:
    """Writes up to HUGE bytes of one form field, counting what the server let through."""

    def __init__(self, writer: asyncio.StreamWriter, *, chunked: bool) -> None:
        self.writer, self.chunked, self.sent = writer, chunked, 0

    async def run(self) -> None:
        piece = b"key=" + b"a" * (CHUNK - 4)
        try:
            while self.sent < HUGE:
                data = piece if self.sent == 0 else b"a" * CHUNK
                self.writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if self.chunked else data)
                await self.writer.drain()
                self.sent += len(data)
            if self.chunked:
                self.writer.write(b"0\r\n\r\n")
                await self.writer.drain()
        except ConnectionError:
            pass  # the server answered and closed: what it did not read is not sent


async def post_huge_sign_in(port: int, *, chunked: bool) -> tuple[int, int]:
    """POST a 30 MB sign-in form, writing it while the answer is awaited: (status, bytes written)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {HUGE}"
    head = (
        f"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\n{length}\r\n\r\n"
    )
    writer.write(head.encode())
    sender = FormSender(writer, chunked=chunked)
    sending = asyncio.create_task(sender.run())
    try:
        status_line = await asyncio.wait_for(reader.readline(), timeout=60)
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        writer.close()
    return int(status_line.split()[1]), sender.sent


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_30_mb_sign_in_form_is_refused_before_it_is_read(gateway: GatewayProcess, chunked: bool) -> None:
    assert gateway.process is not None
    pid = gateway.process.pid

    async def scenario() -> tuple[int, int, int, float]:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
            huge = asyncio.create_task(post_huge_sign_in(gateway.port, chunked=chunked))
            started = time.perf_counter()
            small = await client.get("/ui/login")  # another caller, while the big one is sent
            small_s = time.perf_counter() - started
            status, sent = await huge
        return status, sent, small.status_code, small_s

    before = memory_kib(pid)
    status, sent, small_status, small_s = asyncio.run(scenario())
    after = memory_kib(pid)
    print(
        f"\n30 MB sign-in ({'chunked' if chunked else 'content-length'}): {status}, "
        f"{sent / 1024:.0f} KiB written before the answer; a concurrent page in {small_s * 1000:.1f} ms; "
        f"RSS {before['VmRSS'] / 1024:.1f} -> {after['VmRSS'] / 1024:.1f} MiB, "
        f"peak {before['VmHWM'] / 1024:.1f} -> {after['VmHWM'] / 1024:.1f} MiB"
    )
    assert status == 413
    assert small_status == 200


PUBLIC = "console.example.com"
AS_IF_HTTPS = {"x-forwarded-proto": "https", "x-forwarded-host": PUBLIC, "origin": f"https://{PUBLIC}"}


def sign_in(gateway: GatewayProcess, key: str, headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(base_url=gateway.base_url, headers=headers or {}) as client:
        return client.post("/ui/login", data={"key": key, "next": "/ui/usage"})


def test_forwarded_headers_from_a_client_change_neither_the_cookie_nor_the_origin_check(
    gateway: GatewayProcess,
) -> None:
    refused = sign_in(gateway, ADMIN_KEY, AS_IF_HTTPS)
    assert refused.status_code == 403 and "set-cookie" not in refused.headers  # its Origin is not this host
    without_origin = {name: value for name, value in AS_IF_HTTPS.items() if name != "origin"}
    reply = sign_in(gateway, ADMIN_KEY, without_origin)
    assert reply.status_code == 303
    cookie = reply.headers["set-cookie"].lower()
    assert cookie.startswith("gateway_console=") and "path=/ui" in cookie and "secure" not in cookie


def test_the_trusted_proxys_https_and_host_give_the_host_prefixed_cookie(
    behind_proxy: GatewayProcess,
) -> None:
    reply = sign_in(behind_proxy, ADMIN_KEY, AS_IF_HTTPS)
    assert reply.status_code == 303, reply.text
    cookie = reply.headers["set-cookie"]
    assert cookie.startswith("__Host-gateway_console=")
    assert "Path=/;" in cookie and "Secure" in cookie and "HttpOnly" in cookie and "Domain" not in cookie
    token = cookie.split(";")[0].split("=", 1)[1]
    session = {"cookie": f"__Host-gateway_console={token}"}
    with httpx.Client(base_url=behind_proxy.base_url, headers=AS_IF_HTTPS | session) as browser:
        page = browser.get("/ui/usage")
        assert page.status_code == 200 and 'data-role="admin"' in page.text
        over_http = browser.get("/ui/usage", headers={"x-forwarded-proto": "http"})
        assert over_http.status_code == 303  # the https session is not read over plain http
    forged = sign_in(behind_proxy, ADMIN_KEY, AS_IF_HTTPS | {"origin": "https://evil.example"})
    assert forged.status_code == 403


def from_client(address: str, **headers: str) -> dict[str, str]:
    """Headers as the trusted proxy sends them for a client at `address`."""
    return {"x-forwarded-for": address} | headers


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def sign_ins(gateway: GatewayProcess, keys: list[str], headers: dict[str, str]) -> list[int]:
    """Every key's sign-in, all sent at once."""
    async with httpx.AsyncClient(base_url=gateway.base_url, headers=headers, timeout=30) as client:
        replies = await asyncio.gather(*(client.post("/ui/login", data={"key": key}) for key in keys))
    return [reply.status_code for reply in replies]


@pytest.mark.parametrize("kind", ["team-shaped", "admin-shaped"])
def test_fifty_simultaneous_bad_sign_ins_check_exactly_the_limit(
    behind_proxy: GatewayProcess, kind: str
) -> None:
    """A team-shaped key is looked up in the database: the check takes a while, and every attempt
    sent at once is in flight before the first is refused."""
    if kind == "team-shaped":
        guesses, address = [new_key_secret() for _ in range(50)], "203.0.113.10"
    else:
        guesses, address = [f"guess-{n}-{uuid.uuid4().hex}" for n in range(50)], "203.0.113.11"
    statuses = asyncio.run(sign_ins(behind_proxy, guesses, from_client(address)))
    print(
        f"\n50 simultaneous bad sign-ins ({kind}): {statuses.count(401)} checked (401), "
        f"{statuses.count(429)} refused unchecked (429)"
    )
    assert sorted(statuses) == [401] * 10 + [429] * 40
    assert sign_in(behind_proxy, ADMIN_KEY, from_client("203.0.113.12")).status_code == 303  # elsewhere


def test_the_admin_api_answers_401_for_unknown_keys_and_403_for_a_team_key(gateway: GatewayProcess) -> None:
    with httpx.Client(base_url=gateway.base_url, headers=bearer(ADMIN_KEY)) as admin:
        team = create_team(admin, "limits")
    with httpx.Client(base_url=gateway.base_url) as client:
        answers = {
            "missing": client.get("/admin/teams"),
            "unknown": client.get("/admin/teams", headers=bearer("not-the-admin-key")),
            "unknown team-shaped": client.get("/admin/teams", headers=bearer(new_key_secret())),
            "team key": client.get("/admin/teams", headers=bearer(team.key)),
            "team key on usage": client.get("/admin/usage", headers=bearer(team.key)),
            "admin": client.get("/admin/teams", headers=bearer(ADMIN_KEY)),
        }
    statuses = {name: reply.status_code for name, reply in answers.items()}
    assert statuses == {
        "missing": 401,
        "unknown": 401,
        "unknown team-shaped": 401,
        "team key": 403,
        "team key on usage": 403,
        "admin": 200,
    }
    assert answers["unknown"].json()["error"]["type"] == "authentication_error"
    assert answers["team key"].json()["error"]["type"] == "permission_error"


async def admin_calls(gateway: GatewayProcess, keys: list[str], address: str) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
        return await asyncio.gather(
            *(client.get("/admin/teams", headers=from_client(address) | bearer(key)) for key in keys)
        )


def test_wrong_admin_keys_are_throttled_per_client_without_locking_the_admin_out(
    behind_proxy: GatewayProcess,
) -> None:
    guesses = [f"admin-guess-{n}" for n in range(300)]
    replies = asyncio.run(admin_calls(behind_proxy, guesses, "203.0.113.20"))
    statuses = [reply.status_code for reply in replies]
    print(
        f"\n300 wrong admin keys: {statuses.count(401)} answered 401, {statuses.count(429)} throttled (429)"
    )
    assert sorted(statuses) == [401] * 10 + [429] * 290
    throttled = next(reply for reply in replies if reply.status_code == 429)
    assert throttled.json()["error"]["type"] == "rate_limit_error"
    assert set(throttled.json()["error"]) == {"message", "type", "param", "code"}
    assert 0 < int(throttled.headers["retry-after"]) <= 300
    [elsewhere] = asyncio.run(admin_calls(behind_proxy, [ADMIN_KEY], "203.0.113.21"))
    assert elsewhere.status_code == 200, "another client's guesses do not lock the admin out"

    team_keys = [new_key_secret() for _ in range(30)]  # a client failing with team keys, at once
    statuses = [
        reply.status_code for reply in asyncio.run(admin_calls(behind_proxy, team_keys, "203.0.113.22"))
    ]
    assert sorted(statuses) == [401] * 10 + [429] * 20
    [admin] = asyncio.run(admin_calls(behind_proxy, [ADMIN_KEY], "203.0.113.22"))
    assert admin.status_code == 200, "failed team keys do not lock the admin key out at the same address"


def test_the_console_and_the_admin_api_share_one_budget_of_guesses(behind_proxy: GatewayProcess) -> None:
    address = "203.0.113.30"
    for n in range(5):
        assert sign_in(behind_proxy, f"console-guess-{n}", from_client(address)).status_code == 401
    statuses = [
        reply.status_code for reply in asyncio.run(admin_calls(behind_proxy, ["api-guess"] * 6, address))
    ]
    assert sorted(statuses) == [401] * 5 + [429]


def test_a_forwarded_for_from_an_untrusted_client_does_not_reset_its_count(gateway: GatewayProcess) -> None:
    statuses = [
        sign_in(gateway, f"spoofed-{n}", from_client(f"198.51.100.{n}")).status_code for n in range(11)
    ]
    # one address's budget, whatever address each claims (some of it spent by earlier tests)
    assert statuses[-1] == 429 and 401 not in statuses[statuses.index(429) :]
