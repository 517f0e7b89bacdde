"""What the console and the admin API read and check before anyone is authenticated, on a real
`gateway serve`: a sign-in form past its bound is refused before it is read; unknown admin keys get
401 and a team key 403; failed attempts are throttled per client without locking the admin key out.

Its own gateway: SQLite and no Redis (failed attempts counted in the process), the built-in mock
provider, the default body limits (32 MB), so the console's own bound is the one that answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.gateway import GatewayProcess

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


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir = tmp_path_factory.mktemp("console-limits")
    config = workdir / "gateway.yaml"
    config.write_text(CONFIG)
    process = GatewayProcess(
        config,
        {
            "GATEWAY_DATABASE_URL": f"sqlite:///{workdir}/gateway.db",
            "GATEWAY_REDIS_URL": "",
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "GATEWAY_KEY_CACHE_TTL_S": "1",
        },
    ).start()
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
