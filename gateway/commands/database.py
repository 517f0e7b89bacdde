"""Running one CLI command against the configured database, with errors as messages, not tracebacks."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import msgspec
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.session import create_engine, session_factory
from gateway.errors import GatewayError
from gateway.settings import ConfigError, Settings, load_settings

Work = Callable[[Settings, AsyncSession], Awaitable[int]]


def run_in_transaction(work: Work, *, report: bool = False) -> int:
    """Load the settings, run `work` in one transaction, and turn failures into an exit status.
    `report`: `work` only reads usage, through the read replica when there is one."""
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        url = (settings.database_read_url or settings.database_url) if report else settings.database_url
        return asyncio.run(_run(url, settings, work))
    except (GatewayError, ValueError) as exc:  # msgspec.ValidationError is a ValueError
        print(f"gateway: {_message(exc)}", file=sys.stderr)
        return 1
    except (SQLAlchemyError, OSError) as exc:
        print(f"gateway: database error ({type(exc).__name__}); is `gateway migrate` done?", file=sys.stderr)
        return 1


async def _run(url: str, settings: Settings, work: Work) -> int:
    engine = create_engine(url)
    try:
        async with session_factory(engine).begin() as session:
            return await work(settings, session)
    finally:
        await engine.dispose()


def _message(exc: Exception) -> str:
    if isinstance(exc, GatewayError):
        return exc.message
    if isinstance(exc, msgspec.ValidationError):
        return f"invalid value: {exc}"
    return str(exc)
