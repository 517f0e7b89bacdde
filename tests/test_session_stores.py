"""The test session never touches the machine's own Redis or PostgreSQL (the servers a developer
keeps data in: 127.0.0.1:6379 and 127.0.0.1:5432), unless the environment named them.

One test cannot watch a whole run, so these check the property the run relies on, in ways that fail
if it breaks: the session's stores are not the machine's default servers; a sentinel written into
each db 1-15 of the machine's Redis survives every flush the test areas make; a database made the
way the tests make theirs appears on the session's server and not on the machine's. Each sentinel
and database is this test's own, removed at the end. Without a server answering at the default
address, the checks that need one are skipped.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
import redis

from tests.support.gateway import recreate_database
from tests.support.servers import POSTGRES_ENV, REDIS_ENV, STARTED_ENV, PrivatePostgres, stop_stale_clusters
from tests.support.stores import POSTGRES_ADMIN_URL, REDIS_DBS, redis_url

MACHINE_REDIS = ("127.0.0.1", 6379)
MACHINE_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def started(store: str) -> bool:
    return store in os.environ.get(STARTED_ENV, "").split()


def address(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or default_port


@pytest.mark.parametrize(
    ("store", "variable", "default_port"), [("redis", REDIS_ENV, 6379), ("postgres", POSTGRES_ENV, 5432)]
)
def test_a_started_store_is_not_the_machines_default_server(
    store: str, variable: str, default_port: int
) -> None:
    host, port = address(os.environ[variable], default_port)
    print(
        f"{store}: {host}:{port} ({'started by the session' if started(store) else 'named by the environment'})"
    )
    if started(store):
        assert not (host in LOOPBACK and port == default_port)


@pytest.fixture
def machine_redis() -> Iterator[redis.Redis]:
    client = redis.Redis(*MACHINE_REDIS, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("no Redis answers at 127.0.0.1:6379")
    try:
        yield client
    finally:
        client.close()


def test_a_sentinel_in_every_db_of_the_machines_redis_survives_the_areas_flushes(
    machine_redis: redis.Redis,
) -> None:
    if not started("redis"):
        pytest.skip(f"{REDIS_ENV} names the Redis to use: the tests flush dbs 1-15 there, as documented")
    machine = machine_redis.info("server")["run_id"]
    for area in REDIS_DBS:  # checked before anything is flushed: the same server would lose its data
        with redis.Redis.from_url(redis_url(area)) as session_redis:
            assert session_redis.info("server")["run_id"] != machine, f"{area}'s Redis is the machine's"
    sentinel, value = f"gateway-test-sentinel:{uuid.uuid4().hex}", b"left by tests/test_session_stores.py"
    dbs = range(1, 16)
    for db in dbs:
        machine_redis.execute_command("SELECT", db)
        machine_redis.set(sentinel, value, ex=600)  # gone by itself even if this test is killed
    try:
        for area in REDIS_DBS:  # what each area's fixture does before it runs
            with redis.Redis.from_url(redis_url(area)) as session_redis:
                session_redis.flushdb()
                session_redis.set(sentinel, b"the session's own")
        for db in dbs:
            machine_redis.execute_command("SELECT", db)
            assert machine_redis.get(sentinel) == value, f"db {db} of the machine's Redis was touched"
    finally:
        for db in dbs:
            machine_redis.execute_command("SELECT", db)
            machine_redis.delete(sentinel)
        for area in REDIS_DBS:
            with redis.Redis.from_url(redis_url(area)) as session_redis:
                session_redis.delete(sentinel)


async def _databases(url: str) -> set[str] | None:
    """The database names of the server at `url`; None when it does not answer."""
    try:
        conn = await asyncpg.connect(url, timeout=2)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return None
    try:
        return {row["datname"] for row in await conn.fetch("SELECT datname FROM pg_database")}
    finally:
        await conn.close()


async def _drop(url: str, name: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def test_a_database_the_tests_make_is_made_on_the_sessions_server_only() -> None:
    if not started("postgres"):
        pytest.skip(f"{POSTGRES_ENV} names the PostgreSQL to use: the tests make their databases there")
    name = f"gateway_test_sentinel_{os.getpid()}"
    recreate_database(name)  # as every test area makes its database
    try:
        assert name in (asyncio.run(_databases(POSTGRES_ADMIN_URL)) or set())
        on_machine = asyncio.run(_databases(MACHINE_POSTGRES))
        if on_machine is None:
            pytest.skip("no PostgreSQL answers at 127.0.0.1:5432 (as postgres)")
        assert name not in on_machine
    finally:
        asyncio.run(_drop(POSTGRES_ADMIN_URL, name))


def test_a_killed_run_s_cluster_is_stopped_and_removed_by_the_next_session() -> None:
    """A run killed before its clean-up leaves its daemonized cluster behind; the next session's
    set-up stops it and deletes its folder, and leaves a live run's cluster alone."""
    if shutil.which("pg_ctl") is None and not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        pytest.skip("no PostgreSQL binaries")
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal\n"
            "from tests.support.servers import PrivatePostgres\n"
            "cluster = PrivatePostgres().init()\n"
            "print(cluster.root, cluster.port, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    root_text, port_text = killed.stdout.split()
    root, port = Path(root_text), int(port_text)
    assert killed.returncode == -signal.SIGKILL
    assert (root / "data" / "postmaster.pid").exists()
    live = PrivatePostgres().init()  # this process's: alive, so kept
    try:
        stop_stale_clusters()
        assert not root.exists()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        assert live.running
    finally:
        live.destroy()
