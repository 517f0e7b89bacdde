"""JSON log lines: one write per loop iteration, at once without a loop, structlog's ISO stamps."""

from __future__ import annotations

import asyncio
import io
import logging
import re
from datetime import UTC, datetime

import msgspec
import pytest
import structlog
from structlog.testing import capture_logs

from gateway.logs import IsoStamper, LineWriter, configure_logging, log_request


class CountingStream(io.BytesIO):
    writes = 0

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.writes += 1
        return super().write(data)


async def test_lines_of_one_loop_iteration_go_out_in_one_write() -> None:
    stream = CountingStream()
    writer = LineWriter(stream)
    for i in range(50):
        writer.msg(b'{"n":%d}\n' % i)
    assert stream.writes == 0  # not yet: the iteration is still running
    await asyncio.sleep(0)
    assert stream.writes == 1
    assert [msgspec.json.decode(line)["n"] for line in stream.getvalue().splitlines()] == list(range(50))
    writer.msg(b'{"n":50}\n')
    await asyncio.sleep(0)
    assert stream.writes == 2


def test_without_a_loop_each_line_is_written_at_once() -> None:
    stream = CountingStream()
    writer = LineWriter(stream)
    writer.msg(b"one\n")
    writer.msg(b"two\n")
    assert stream.getvalue() == b"one\ntwo\n"
    assert stream.writes == 2


def test_one_writer_follows_each_loop_of_its_thread_and_none() -> None:
    stream = CountingStream()
    writer = LineWriter(stream)

    async def two_lines(n: int) -> None:
        writer.msg(b'{"n":%d}\n' % n)
        writer.msg(b'{"n":%d}\n' % (n + 1))
        await asyncio.sleep(0)

    asyncio.run(two_lines(0))
    asyncio.run(two_lines(2))  # a new loop in the same thread: the lines go out on it
    writer.msg(b'{"n":4}\n')  # no loop now: at once
    assert stream.writes == 3
    assert [msgspec.json.decode(line)["n"] for line in stream.getvalue().splitlines()] == list(range(5))


def test_the_stamp_is_structlogs_iso_utc_format_and_current() -> None:
    before = datetime.now(UTC)
    stamps = [IsoStamper()(None, "info", {})["timestamp"] for _ in range(3)]
    after = datetime.now(UTC)
    for stamp in stamps:
        assert isinstance(stamp, str)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp)
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert before.replace(microsecond=0) <= moment <= after


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


FIELDS = {
    "request_id": "req_1",
    "key": "sk-gw-abc",
    "model": "chat",
    "stream": False,
    "status": 200,
    "error": None,
}


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
