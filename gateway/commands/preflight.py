"""What `serve`, `migrate` and `check-config` refuse before they start: a deployment the settings
cannot serve, and store hosts whose names do not resolve; and what `check-config --connect` asks
the stores themselves (the database exists and is migrated, Redis answers).

The settings check each URL's form; whether its host name resolves is a question for the network,
asked here and not at every load of the settings.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url

from gateway.redis.urls import parse_redis_url
from gateway.settings import Settings


def serving_problem(settings: Settings, workers: int) -> str | None:
    """Why `workers` serving processes cannot run with these settings, or None."""
    if workers > 1 and not settings.redis_url:
        return (
            "several workers need shared state: set GATEWAY_REDIS_URL "
            "(the in-process default serves one process only)"
        )
    return None


def unresolved_store(settings: Settings) -> str | None:
    """The first store whose host name does not resolve, as a message, or None."""
    hosts = [("GATEWAY_DATABASE_URL", make_url(settings.database_url).host)]
    if settings.redis_url:
        hosts += [("GATEWAY_REDIS_URL", host) for host in redis_hosts(settings.redis_url)]
    for variable, host in hosts:
        if host and (reason := _resolution_failure(host)):
            return f"{variable}: the host {host!r} does not resolve ({reason})"
    return None


def redis_hosts(url: str) -> list[str]:
    """The host names a Redis URL connects to: its server's, or every Sentinel's or Cluster node's
    of the list (a client needs only one of those to answer, but each name is a typo if it does
    not resolve)."""
    topology = parse_redis_url(url)
    if topology.kind != "single":
        return [host for host, _ in topology.hosts]
    parts = urlsplit(url)
    return [parts.hostname] if parts.scheme != "unix" and parts.hostname else []


def _resolution_failure(host: str) -> str | None:
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError) as exc:  # UnicodeError: a label too long for IDNA
        return str(exc.args[-1]) if exc.args else type(exc).__name__
    return None


def database_behind(database_url: str) -> str | None:
    """Connect to the database: None when it is at the newest migration, else what to do. Raises
    the driver's error when it cannot be reached (or does not exist)."""
    import asyncio
    from pathlib import Path

    from gateway.db.migrate import current_revision, head_revision
    from gateway.db.session import create_engine, is_sqlite

    database = make_url(database_url).database
    if is_sqlite(database_url) and database not in (None, "", ":memory:") and not Path(database).is_file():
        # asked, not made: connecting would create the file (and its folder)
        return f"the SQLite file {database} does not exist yet: `gateway migrate` creates it"

    async def revision() -> str | None:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as connection:
                return await connection.run_sync(current_revision)
        finally:
            await engine.dispose()

    at, head = asyncio.run(revision()), head_revision(database_url)
    if at == head:
        return None
    state = "has no tables yet" if at is None else f"is at migration {at}"
    return f"the database {state}, the gateway needs {head}: run `gateway migrate`"


def redis_unanswered(url: str) -> str | None:
    """Why Redis does not answer a PING within a few seconds, or None."""
    import asyncio

    from gateway.redis.client import redis_client

    async def ping() -> None:
        client = redis_client(url)
        try:
            await client.ping()
        finally:
            await client.aclose()

    try:
        asyncio.run(ping())
    except Exception as exc:  # any failure of the client is the answer: name it, do not trace it
        return f"Redis does not answer ({type(exc).__name__}: {exc})"
    return None
