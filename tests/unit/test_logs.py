"""JSON log lines through structlog's chain: one write per loop iteration, at once without a loop,
structlog's ISO stamps; the request line is structlog's own."""

from __future__ import annotations

import asyncio
import io
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest
import structlog
from structlog.testing import capture_logs

from gateway.logs import LoopBatchedOutput, configure_logging, flush_logs, log_request, stdlib_handler


@pytest.fixture(autouse=True)
def restored_configuration() -> Iterator[None]:
    """Each test configures logging its own way; the next finds structlog as this one found it."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


class CountingStream(io.BytesIO):
    writes = 0

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.writes += 1
        return super().write(data)


FIELDS = {
    "request_id": "req_1",
    "key": "sk-gw-abc",
    "model": "chat",
    "stream": False,
    "status": 200,
    "error": None,
}


async def test_lines_of_one_loop_iteration_go_out_in_one_write() -> None:
    stream = CountingStream()
    writer = structlog.BytesLogger(LoopBatchedOutput(stream))  # type: ignore[arg-type]
    for i in range(50):
        writer.msg(b'{"n":%d}' % i)
    assert stream.writes == 0  # not yet: the iteration is still running
    await asyncio.sleep(0)
    assert stream.writes == 1
    assert [msgspec.json.decode(line)["n"] for line in stream.getvalue().splitlines()] == list(range(50))
    writer.msg(b'{"n":50}')
    await asyncio.sleep(0)
    assert stream.writes == 2


def test_without_a_loop_each_line_is_written_at_once() -> None:
    stream = CountingStream()
    writer = structlog.BytesLogger(LoopBatchedOutput(stream))  # type: ignore[arg-type]
    writer.msg(b"one")
    writer.msg(b"two")
    assert stream.getvalue() == b"one\ntwo\n"
    assert stream.writes == 2


def test_one_writer_follows_each_loop_of_its_thread_and_none() -> None:
    stream = CountingStream()
    writer = structlog.BytesLogger(LoopBatchedOutput(stream))  # type: ignore[arg-type]

    async def two_lines(n: int) -> None:
        writer.msg(b'{"n":%d}' % n)
        writer.msg(b'{"n":%d}' % (n + 1))
        await asyncio.sleep(0)

    asyncio.run(two_lines(0))
    asyncio.run(two_lines(2))  # a new loop in the same thread: the lines go out on it
    writer.msg(b'{"n":4}')  # no loop now: at once
    assert stream.writes == 3
    assert [msgspec.json.decode(line)["n"] for line in stream.getvalue().splitlines()] == list(range(5))


async def test_the_stamp_is_structlogs_iso_utc_format_and_current(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.TextIOWrapper(CountingStream())
    monkeypatch.setattr("sys.stdout", stream)
    configure_logging("json")
    before = datetime.now(UTC)
    for _ in range(3):
        log_request(dict(FIELDS))
    after = datetime.now(UTC)
    await asyncio.sleep(0)
    stamps = [msgspec.json.decode(line)["timestamp"] for line in stream.buffer.getvalue().splitlines()]  # type: ignore[attr-defined]
    assert len(stamps) == 3
    for stamp in stamps:
        assert isinstance(stamp, str)
        # isoformat() leaves the fraction out in the one microsecond of a second where it is zero
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", stamp)
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert before <= moment <= after


async def test_configuring_again_keeps_one_writer_per_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loggers bound before a reconfiguration keep their writer: there must be one per stream, or
    lines of the same moment would go out in separate writes, out of order."""
    stream = io.TextIOWrapper(CountingStream())
    monkeypatch.setattr("sys.stdout", stream)
    configure_logging("json")
    first = structlog.get_logger("before").bind()  # bound, and cached, now
    configure_logging("json")
    second = structlog.get_logger("after").bind()
    first.info("one")
    second.info("two")
    first.info("three")
    await asyncio.sleep(0)
    buffer = stream.buffer
    assert isinstance(buffer, CountingStream)
    events = [msgspec.json.decode(line)["event"] for line in buffer.getvalue().splitlines()]
    assert events == ["one", "two", "three"]
    assert buffer.writes == 1


async def test_the_request_line_is_the_line_structlog_would_write(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.TextIOWrapper(CountingStream())
    monkeypatch.setattr("sys.stdout", stream)
    configure_logging("json")
    log_request(dict(FIELDS))
    structlog.get_logger("gateway.proxy").info("request", **FIELDS)
    await asyncio.sleep(0)
    buffer = stream.buffer
    assert isinstance(buffer, CountingStream)
    fast, chain = buffer.getvalue().splitlines()
    stamp = re.compile(rb'"timestamp":"[^"]+"')
    assert stamp.sub(b"", fast) == stamp.sub(b"", chain)  # the same keys, values and order
    assert list(msgspec.json.decode(fast)) == [*FIELDS, "event", "level", "timestamp"]


async def test_the_request_line_follows_the_level(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.TextIOWrapper(CountingStream())
    monkeypatch.setattr("sys.stdout", stream)
    configure_logging("json", level=logging.WARNING)
    log_request(dict(FIELDS))
    await asyncio.sleep(0)
    assert stream.buffer.getvalue() == b""  # type: ignore[attr-defined]
    configure_logging("json")


def test_with_the_console_format_the_request_line_goes_through_structlog() -> None:
    configure_logging("console")
    try:
        with capture_logs() as logs:
            log_request(dict(FIELDS))
    finally:
        configure_logging("json")
    assert logs == [{**FIELDS, "event": "request", "log_level": "info"}]


async def test_with_json_lines_too_the_request_line_goes_through_structlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(CountingStream()))
    configure_logging("json")
    with capture_logs() as logs:
        log_request(dict(FIELDS))
    assert logs == [{**FIELDS, "event": "request", "log_level": "info"}]


async def test_the_lines_held_back_are_written_at_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.TextIOWrapper(CountingStream())
    monkeypatch.setattr("sys.stdout", stream)
    configure_logging("json")
    log_request(dict(FIELDS))
    structlog.get_logger().info("gateway_stopped")
    assert stream.buffer.getvalue() == b""  # type: ignore[attr-defined]  # until the iteration ends
    flush_logs()
    events = [msgspec.json.decode(line)["event"] for line in stream.buffer.getvalue().splitlines()]  # type: ignore[attr-defined]
    assert events == ["request", "gateway_stopped"]


async def test_a_standard_library_record_follows_the_lines_logged_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.TextIOWrapper(CountingStream())
    monkeypatch.setattr("sys.stdout", stream)
    configure_logging("json")
    handler = stdlib_handler("json")
    structlog.get_logger().info("before")
    handler.handle(logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, "after", None, None))
    lines = [msgspec.json.decode(line) for line in stream.buffer.getvalue().splitlines()]  # type: ignore[attr-defined]
    assert [(line["event"], line.get("logger")) for line in lines] == [
        ("before", None),
        ("after", "uvicorn.error"),
    ]


def test_importing_the_module_configures_nothing() -> None:
    """No handler registered at exit, no structlog configuration: a process configures at start-up."""
    probe = (
        "import atexit, structlog\n"
        "before = atexit._ncallbacks()\n"
        "import gateway.logs\n"
        "assert atexit._ncallbacks() == before, 'an exit handler'\n"
        "assert not structlog.is_configured(), 'structlog configured'\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
