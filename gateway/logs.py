"""structlog set-up: one JSON line per event in production, readable lines in a console.

JSON lines go out through `LineWriter`: the lines logged in one event-loop iteration are written
with one `write` at its end, instead of a write and a flush each (one request is one line, and
under load many requests finish in the same iteration).

The standard library's records (uvicorn's own lines, a library's warnings) go through the same
renderer and writer when `gateway serve` runs (`server_log_config`, uvicorn's `log_config`), with
the logger's name as `logger`: no line in uvicorn's own formats.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any, BinaryIO

import msgspec
import structlog

_encode = msgspec.json.Encoder(enc_hook=str).encode


class IsoStamper:
    """structlog's `TimeStamper(fmt="iso", utc=True)` output (`2026-11-29T21:06:33.304813Z`) at a
    fraction of its cost: the date and time of day are formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def now(self) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._prefix}.{int((now - second) * 1_000_000):06d}Z"

    def __call__(
        self, _logger: object, _method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event["timestamp"] = self.now()
        return event


def _json_line(_logger: object, _method: str, event: dict[str, object]) -> bytes:
    return _encode(event) + b"\n"


def _json_text(_logger: object, _method: str, event: MutableMapping[str, Any]) -> str:
    return _encode(event).decode()


class LineWriter:
    """A structlog logger writing bytes lines, once per loop iteration when a loop is running."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self._lines: list[bytes] = []
        self._scheduled = False
        # The loop last found and its thread: asyncio.get_running_loop() is a getpid() system call
        # on CPython 3.11, and a loop running in this thread is the running loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    def msg(self, line: bytes) -> None:
        self._lines.append(line)
        if self._scheduled:
            return
        loop = self._loop
        if loop is None or self._loop_thread != threading.get_ident() or not loop.is_running():
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop in this thread (the CLI, a worker thread): write at once
                self.flush()
                return
            self._loop_thread = threading.get_ident()
        self._scheduled = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        lines, self._lines = self._lines, []
        if lines:
            self.stream.write(b"".join(lines))
            self.stream.flush()

    log = debug = info = warn = warning = error = critical = exception = msg


_writers: dict[int, LineWriter] = {}  # one per output stream, whatever configures it again


@atexit.register
def _flush_at_exit() -> None:
    for writer in _writers.values():
        writer.flush()


def _writer_for(stream: BinaryIO) -> LineWriter:
    """Loggers bound before a reconfiguration keep their writer: it must stay the stream's only one."""
    writer = _writers.get(id(stream))
    if writer is None or writer.stream is not stream:
        writer = _writers[id(stream)] = LineWriter(stream)
    return writer


class RequestLog:
    """The line logged for every proxied request (`log_request`), on a path of its own.

    Through structlog (its lazy proxy, bound logger, processor chain and renderer) that line cost
    as much as a good part of the request itself. With JSON lines it is written here instead: the same keys in the same order, then `event`, `level` and `timestamp`,
    as structlog's chain writes them, encoded once and handed to the same `LineWriter`. With the
    console format, or INFO filtered out, the line goes through structlog like any other.
    """

    def __init__(self) -> None:
        self.writer: LineWriter | None = None  # JSON lines at INFO: write them here
        self.stamp = IsoStamper()
        self.structlog = structlog.get_logger("gateway.proxy")  # the rest of the time

    def __call__(self, fields: dict[str, Any]) -> None:
        writer = self.writer
        if writer is None:
            self.structlog.info("request", **fields)
            return
        fields["event"] = "request"
        fields["level"] = "info"
        fields["timestamp"] = self.stamp.now()
        writer.msg(_encode(fields) + b"\n")


log_request = RequestLog()

# Each logger is bound once, on its first use, to the configuration of that moment (no processor
# chain to rebuild per line). The test suite turns it off: a logger first used after one test
# configured logging would stay out of a later test's `capture_logs`.
CACHE_LOGGERS = True


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    renderer: structlog.types.Processor
    factory: Callable[..., object]
    stamper = IsoStamper()
    if log_format == "console":
        renderer, factory = structlog.dev.ConsoleRenderer(), structlog.PrintLoggerFactory(sys.stdout)
        log_request.writer = None
    else:
        writer = _writer_for(sys.stdout.buffer)
        renderer, factory = _json_line, lambda *_: writer  # type: ignore[assignment]
        log_request.writer = writer if level <= logging.INFO else None
    log_request.stamp = stamper
    log_request.structlog = structlog.get_logger("gateway.proxy")  # bound on first use, as configured now
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            stamper,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=factory,
        cache_logger_on_first_use=CACHE_LOGGERS,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "httpcore"):  # one line per upstream request would repeat our own log
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # aiosqlite's debug lines print every statement with its parameters (a usage filter's values):
    # never, whatever level the root logger is set to
    logging.getLogger("aiosqlite").setLevel(logging.INFO)


class StdlibLines(logging.Handler):
    """Standard-library records as JSON lines, through the `LineWriter` the gateway's own lines use.

    Each is written at once, with the lines logged before it: they are few, and uvicorn logs its
    last ones as a worker ends, after its loop's last iteration (a worker process exits without
    running `atexit`)."""

    def __init__(self, writer: LineWriter) -> None:
        super().__init__()
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.msg(self.format(record).encode() + b"\n")
            self.writer.flush()
        except Exception:  # as logging's own handlers: a line that cannot be written must not raise
            self.handleError(record)


def stdlib_handler(log_format: str) -> logging.Handler:
    """A handler rendering standard-library records with the gateway's processors, to stdout."""
    handler: logging.Handler
    renderer: structlog.types.Processor
    if log_format == "console":
        handler, renderer = logging.StreamHandler(sys.stdout), structlog.dev.ConsoleRenderer()
    else:
        handler, renderer = StdlibLines(_writer_for(sys.stdout.buffer)), _json_text
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                IsoStamper(),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    return handler


def server_log_config(log_format: str) -> dict[str, Any]:
    """uvicorn's `log_config` (a `logging.config.dictConfig`), applied in the supervisor and in each
    worker before the app is loaded: uvicorn's loggers at INFO (its start-up, shutdown and error
    lines; its access log when enabled), every other at WARNING, all through `stdlib_handler`."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"gateway": {"()": "gateway.logs.stdlib_handler", "log_format": log_format}},
        "loggers": {"uvicorn": {"level": "INFO"}, "uvicorn.access": {"level": "INFO"}},
        "root": {"handlers": ["gateway"], "level": "WARNING"},
    }
