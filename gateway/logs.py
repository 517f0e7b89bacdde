"""structlog set-up: one JSON line per event in production, readable lines in a console.

Every line, the one logged per proxied request (`log_request`) included, goes through structlog's
processor chain, configured by `configure_logging` as a process starts. JSON lines go out through
`LoopBatchedOutput`, the stream of the configured logger factory: the lines logged in one
event-loop iteration are written with one `write` at its end.

The standard library's records (uvicorn's own lines, a library's warnings) go through the same
renderer, to the same stream, when `gateway serve` runs (`server_log_config`, uvicorn's
`log_config`), with the logger's name as `logger`: no line in uvicorn's own formats.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import Any, BinaryIO

import msgspec
import structlog
from structlog.types import EventDict, Processor

_encoder = msgspec.json.Encoder(enc_hook=str)

# The logger of the `request` line: bound on its first use to the configuration of that moment, as
# every module's logger is (`cache_logger_on_first_use`).
_request_log = structlog.get_logger("gateway.proxy")


def log_request(fields: dict[str, Any]) -> None:
    """The line logged for every proxied request: `fields`, then `event`, `level` and `timestamp`."""
    # bind() hands out the cached bound logger; a method looked up on the lazy proxy itself would
    # first miss as an attribute (an AttributeError raised and caught) on every line
    _request_log.bind().info("request", **fields)


def _json_bytes(event: EventDict, default: object = None) -> bytes:
    """`JSONRenderer`'s serializer: compact, as msgspec writes it. The renderer passes its fallback
    for values JSON has no type for as `default`; here such a value is written as its `str()`."""
    return _encoder.encode(event)


def _json_text(event: EventDict, default: object = None) -> str:
    """`_json_bytes` as text, for the standard library's formatter."""
    return _encoder.encode(event).decode()


class LoopBatchedOutput:
    """The binary stream structlog's `BytesLogger` writes JSON lines to: what is written during one
    event-loop iteration reaches `stream` in one `write` at its end (one request is one line, and
    under load many requests finish in the same iteration). Without a running loop in the writing
    thread (the CLI, a worker thread), each `flush` writes at once."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self._lines: list[bytes] = []
        self._lock = threading.Lock()  # the loop's thread and any other writing lines alike
        self._scheduled = False
        # The loop last found and its thread: asyncio.get_running_loop() is a getpid() system call
        # on CPython 3.11, and a loop running in this thread is the running loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    def write(self, data: bytes) -> int:
        with self._lock:
            self._lines.append(data)
        return len(data)

    def flush(self) -> None:
        """`BytesLogger` flushes after each line: the lines go out at the end of the iteration."""
        if self._scheduled:
            return
        loop = self._loop
        if loop is None or self._loop_thread != threading.get_ident() or not loop.is_running():
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop in this thread: at once
                self.drain()
                return
            self._loop_thread = threading.get_ident()
        self._scheduled = True
        loop.call_soon(self.drain)

    def drain(self) -> None:
        """Write what is held, now."""
        with self._lock:
            self._scheduled = False
            lines, self._lines = self._lines, []
            if lines:
                self.stream.write(b"".join(lines))
                self.stream.flush()


class BatchedBytesLoggerFactory(structlog.BytesLoggerFactory):
    """structlog's `BytesLoggerFactory`, writing to a `LoopBatchedOutput` over `stream`."""

    def __init__(self, stream: BinaryIO) -> None:
        self.output = LoopBatchedOutput(stream)
        super().__init__(self.output)  # type: ignore[arg-type]  # a binary stream, but not an IO subclass


def _configured_output() -> LoopBatchedOutput | None:
    """The output of structlog's configured logger factory, if it holds lines back."""
    factory = structlog.get_config()["logger_factory"]
    return factory.output if isinstance(factory, BatchedBytesLoggerFactory) else None


def flush_logs() -> None:
    """Write the lines held back for the end of the loop's iteration: the last step of a shutdown."""
    output = _configured_output()
    if output is not None:
        output.drain()


def _json_factory(stream: BinaryIO) -> BatchedBytesLoggerFactory:
    """A factory over `stream`: the one already configured when it writes there, since loggers bound
    before a reconfiguration keep its output, and one output per stream keeps the lines in order."""
    factory = structlog.get_config()["logger_factory"]
    if isinstance(factory, BatchedBytesLoggerFactory) and factory.output.stream is stream:
        return factory
    return BatchedBytesLoggerFactory(stream)


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    """structlog, and the standard library's root logger, for this process, as it starts.

    Loggers are bound on their first use to the configuration of that moment (no processor chain
    to assemble per line), unless structlog was configured not to cache them before: the test
    suite does, so that `capture_logs` sees every logger whatever an earlier test configured.
    """
    renderer: Processor
    factory: structlog.BytesLoggerFactory | structlog.WriteLoggerFactory
    if log_format == "console":
        renderer, factory = structlog.dev.ConsoleRenderer(), structlog.WriteLoggerFactory(sys.stdout)
    else:
        renderer, factory = structlog.processors.JSONRenderer(_json_bytes), _json_factory(sys.stdout.buffer)
    caching = structlog.get_config()["cache_logger_on_first_use"] if structlog.is_configured() else True
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=factory,
        cache_logger_on_first_use=caching,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "httpcore"):  # one line per upstream request would repeat our own log
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # aiosqlite's debug lines print every statement with its parameters (a usage filter's values):
    # never, whatever level the root logger is set to
    logging.getLogger("aiosqlite").setLevel(logging.INFO)


class StdlibLines(logging.Handler):
    """Standard-library records as JSON lines on `stream`, each written at once, after the lines
    structlog's output holds for the same stream: they are few, and uvicorn logs its last ones as a
    worker ends, after its loop's last iteration."""

    def __init__(self, stream: BinaryIO) -> None:
        super().__init__()
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record).encode() + b"\n"
            output = _configured_output()
            if output is not None and output.stream is self.stream:
                output.write(line)
                output.drain()
            else:
                self.stream.write(line)
                self.stream.flush()
        except Exception:  # as logging's own handlers: a line that cannot be written must not raise
            self.handleError(record)


def stdlib_handler(log_format: str) -> logging.Handler:
    """A handler rendering standard-library records with the gateway's processors, to stdout."""
    handler: logging.Handler
    renderer: Processor
    if log_format == "console":
        handler, renderer = logging.StreamHandler(sys.stdout), structlog.dev.ConsoleRenderer()
    else:
        handler, renderer = StdlibLines(sys.stdout.buffer), structlog.processors.JSONRenderer(_json_text)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
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
