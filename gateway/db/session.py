"""Engine creation: accepts the URLs users write and picks the async driver for them; the engine
the usage reports read through (a read replica's, when one is configured), and the primary in its
place while the replica cannot be reached (`ReplicaSessions`).

Engines hide statement parameters from their errors' text, and `database_error` says what a log
line may tell of a failed statement: never the values it carried (prompt-derived names, ids).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import structlog
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

log = structlog.get_logger("gateway.db")

REPLICA_CONNECT_TIMEOUT_S = 2.0  # a replica that takes longer to answer is taken as down
REPLICA_COOL_DOWN_S = 30.0  # then reports read the primary this long before the replica is tried again

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


def create_engine(url: str, *, pre_ping: bool = False) -> AsyncEngine:
    """`pre_ping`: test a pooled connection before handing it out (a PostgreSQL that went away
    leaves dead connections in the pool)."""
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
    return create_async_engine(
        target,
        pool_size=10,
        max_overflow=10,
        pool_recycle=300,
        pool_pre_ping=pre_ping,
        hide_parameters=True,
    )


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def open_read_engine(read_url: str | None, primary: AsyncEngine) -> AsyncEngine:
    """The engine reports read through: the replica's (GATEWAY_DATABASE_READ_URL), or the
    primary's when there is none. The caller disposes it if it is not `primary`. A replica's pooled
    connections are tested before use: one left from before the replica went away would fail the
    report instead of sending it to the primary (reports are few; the round trip is nothing)."""
    return primary if read_url is None else create_engine(read_url, pre_ping=True)


class SessionSource(Protocol):
    """Where a report opens its session: `async with source() as session`."""

    def __call__(self) -> AbstractAsyncContextManager[AsyncSession]: ...


class ReplicaSessions:
    """Sessions on the read replica, or on the primary while the replica cannot be reached.

    A session is handed out only once its connection is open: a replica that refuses, or does not
    answer within the connect timeout, sends this report and every report of the next cool-down to
    the primary (so that not every report waits out the timeout), then is tried again. Logged once
    when an episode begins and once when it ends; `unreachable` says why while it lasts (/readyz
    lists `read_replica` as degraded).
    """

    def __init__(
        self,
        replica: AsyncEngine,
        primary: async_sessionmaker[AsyncSession],
        *,
        connect_timeout_s: float = REPLICA_CONNECT_TIMEOUT_S,
        cool_down_s: float = REPLICA_COOL_DOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._replica = session_factory(replica)
        self._primary = primary
        self._connect_timeout_s = connect_timeout_s
        self._cool_down_s = cool_down_s
        self._clock = clock
        self._retry_at = 0.0
        self.unreachable: str | None = None  # the replica's failure, while reports read the primary

    def __call__(self) -> AbstractAsyncContextManager[AsyncSession]:
        return self._session()

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[AsyncSession]:
        session = await self._replica_session() or self._primary()
        async with session:
            yield session

    async def reachable(self) -> bool:
        """Whether reports read the replica now (tried again if its cool-down is over)."""
        session = await self._replica_session()
        if session is None:
            return False
        await session.close()
        return True

    async def _replica_session(self) -> AsyncSession | None:
        if self.unreachable is not None and self._clock() < self._retry_at:
            return None
        session = self._replica()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                await session.connection()
        except Exception as exc:  # refused, timed out, a role that may not log in: all "down" here
            with contextlib.suppress(Exception):
                await session.close()
            self._fall_back(exc)
            return None
        if self.unreachable is not None:
            log.info("read_replica_recovered", error_before=self.unreachable)
            self.unreachable = None
        return session

    def _fall_back(self, exc: Exception) -> None:
        self._retry_at = self._clock() + self._cool_down_s
        if self.unreachable is None:  # the error's class only: a driver's message may quote the URL
            log.warning(
                "read_replica_unreachable",
                error=type(exc).__name__,
                detail=f"usage reports read the primary; the replica is tried again every {self._cool_down_s:g} s",
            )
        self.unreachable = type(exc).__name__


class ReportReaders(Protocol):
    """What the report pages need of the running services: the primary's sessions, and the read
    replica's when the services hold them."""

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]: ...


def report_sessions(services: ReportReaders) -> SessionSource:
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


def missing_database(exc: BaseException, url: str) -> str | None:
    """When `exc` says the PostgreSQL server has no database of the URL's name: which database, and
    the command that creates it (without the URL's password); else None."""
    if "SQLSTATE 3D000" not in (database_error(exc) or ""):  # invalid_catalog_name
        return None
    parsed = make_url(url)
    options = [f"-h {parsed.host}"] if parsed.host else []
    options += [f"-p {parsed.port}"] if parsed.port else []
    options += [f"-U {parsed.username}"] if parsed.username else []
    name = parsed.database or ""
    return (
        f"the database {name!r} does not exist on the PostgreSQL server at {parsed.host or 'localhost'}"
        f"{f':{parsed.port}' if parsed.port else ''}: create it with `createdb {' '.join([*options, name])}`"
        f' (or CREATE DATABASE "{name}"; in psql), then run `gateway migrate`'
    )
