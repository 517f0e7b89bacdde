"""structlog set-up: one JSON line per event in production, readable lines in a console."""

from __future__ import annotations

import logging
import sys

import msgspec
import structlog


def _json(_logger: object, _method: str, event: dict[str, object]) -> str:
    return msgspec.json.encode(event, enc_hook=str).decode()


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if log_format == "console" else _json  # type: ignore[assignment]
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "httpcore"):  # one line per upstream request would repeat our own log
        logging.getLogger(noisy).setLevel(logging.WARNING)
