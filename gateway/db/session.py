"""Engine creation: accepts the URLs users write and picks the async driver for them; the engine
the usage reports read through (a read replica's, when one is configured).

Engines hide statement parameters from their errors' text, and `database_error` says what a log
line may tell of a failed statement: never the values it carried (prompt-derived names, ids).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

_ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
}


def async_url(url: str) -> str:
    """`postgresql://u@h/db` -> `postgresql+asyncpg://u@h/db`; `sqlite:///p` -> `sqlite+aiosqlite:///p`."""
    parsed = make_url(url)
    driver = _ASYNC_DRIVERS.get(parsed.drivername)
    if driver is not None:
        parsed = parsed.set(drivername=driver)
    return parsed.render_as_string(hide_password=False)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def create_engine(url: str) -> AsyncEngine:
    target = async_url(url)
    if is_sqlite(target):
        database = make_url(target).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(target, hide_parameters=True)

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=5000")
            cursor.close()

        return engine
    # No pre-ping (a round trip per checkout): callers already treat a dropped connection as a
    # retryable failure, and pool_recycle bounds stale ones.
    return create_async_engine(target, pool_size=10, max_overflow=10, pool_recycle=300, hide_parameters=True)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def open_read_engine(read_url: str | None, primary: AsyncEngine) -> AsyncEngine:
    """The engine reports read through: the replica's (GATEWAY_DATABASE_READ_URL), or the
    primary's when there is none. The caller disposes it if it is not `primary`."""
    return primary if read_url is None else create_engine(read_url)


class ReportReaders(Protocol):
    """What the report pages need of the running services: the primary's sessions, and the read
    replica's when the services hold them."""

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]: ...


def report_sessions(services: ReportReaders) -> async_sessionmaker[AsyncSession]:
    """The sessions a usage report reads through: `services.report_sessions` (the read replica's,
    or the primary's), else the primary's. Only reads that may lag the primary belong here: a
    report over records that a replica has not replayed yet is as a report of a moment earlier;
    key lookups and the job ledger read their own writes and stay on `sessions`."""
    return getattr(services, "report_sessions", None) or services.sessions


def database_error(exc: BaseException) -> str | None:
    """The driver's error class and SQLSTATE of a failed statement in `exc`'s chain, or None.

    Only these are safe to log: the exception's text quotes the statement, and a driver's own
    message may quote a value it refused.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StatementError):
            orig = current.orig
            if orig is None:
                return type(current).__name__
            driver = orig.__cause__ or orig  # asyncpg's own exception, under SQLAlchemy's adapter
            sqlstate = getattr(orig, "sqlstate", None)
            return f"{type(driver).__name__} (SQLSTATE {sqlstate})" if sqlstate else type(driver).__name__
        current = current.__cause__ or current.__context__
    return None
