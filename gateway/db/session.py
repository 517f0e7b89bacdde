"""Engine creation: accepts the URLs users write and picks the async driver for them.

Engines hide statement parameters from their errors' text, and `database_error` says what a log
line may tell of a failed statement: never the values it carried (prompt-derived names, ids).
"""

from __future__ import annotations

from pathlib import Path

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
