"""A private PostgreSQL and a private Redis on free ports: the test session's own stores
(tests/support/stores.py), and servers a fault scenario may stop at will.

PostgreSQL comes from the machine's /usr/lib/postgresql/*/bin (initdb + pg_ctl into a temporary
directory, trust auth, fsync off); Redis from `redis-server`. Stopping either disturbs nothing
else on the machine. As root, PostgreSQL runs as the `postgres` user (it refuses root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.children import die_with_parent

REDIS_ENV, POSTGRES_ENV = "GATEWAY_TEST_REDIS_URL", "GATEWAY_TEST_POSTGRES_URL"
# The stores the session started itself ("redis", "postgres"), as opposed to those the environment
# named: tests/test_session_stores.py checks that a started one is never a machine's default server.
STARTED_ENV = "GATEWAY_TEST_STORES_STARTED"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    path = found[-1] if found else shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found (looked in /usr/lib/postgresql/*/bin and PATH)")
    return path


def _as_postgres_user() -> tuple[int | None, int | None]:
    """PostgreSQL refuses to run as root: use the `postgres` account then."""
    if os.geteuid() != 0:
        return None, None
    account = pwd.getpwnam("postgres")
    return account.pw_uid, account.pw_gid


@dataclass
class PrivatePostgres:
    """One PostgreSQL cluster in a temporary directory; `stop` and `start` it during a test."""

    port: int = field(default_factory=free_port)
    root: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix=f"{PG_DIR_PREFIX}{os.getpid()}-"))
    )

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *command: str) -> None:
        uid, gid = _as_postgres_user()
        subprocess.run(command, check=True, capture_output=True, user=uid, group=gid, timeout=60)

    def init(self) -> PrivatePostgres:
        uid, gid = _as_postgres_user()
        if uid is not None:
            os.chown(self.root, uid, gid if gid is not None else -1)
        self._run(
            _postgres_bin("initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8"
        )
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n"
            )
        return self.start()

    def start(self) -> PrivatePostgres:
        log = str(self.root / "postgres.log")
        self._run(_postgres_bin("pg_ctl"), "-D", str(self.data_dir), "-l", log, "-w", "-t", "30", "start")
        return self

    def stop(self) -> None:
        """A fast shutdown: open connections are cut, as when a database server goes away."""
        self._run(_postgres_bin("pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    @property
    def running(self) -> bool:
        return (self.data_dir / "postmaster.pid").exists()

    def create_database(self, name: str) -> str:
        """A new empty database (psql, so that it works from inside a running event loop too)."""
        psql = shutil.which("psql") or _postgres_bin("psql")
        command = [psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres"]
        subprocess.run(
            [*command, "-c", f'CREATE DATABASE "{name}"'], check=True, capture_output=True, timeout=30
        )
        return self.url(name)

    def destroy(self) -> None:
        if self.running:
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class PrivateRedis:
    """One redis-server on a free port; `restart` keeps its data only with append-only persistence."""

    appendonly: bool = True
    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gateway-test-redis-")))
    process: subprocess.Popen[bytes] | None = None

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> PrivateRedis:
        command = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes" if self.appendonly else "no", "--dir", str(self.root),
        ]  # fmt: skip
        log = (self.root / "redis.log").open("ab")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 15
        try:
            while True:
                try:
                    client.ping()
                    return self
                except (redis.ConnectionError, redis.exceptions.BusyLoadingError):
                    if time.monotonic() > deadline or self.process.poll() is not None:
                        raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        """SIGTERM: Redis flushes its append-only file and exits, as in a clean restart."""
        if self.process is None:
            return
        self.process.terminate()
        self.process.wait(timeout=15)
        self.process = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


PG_DIR_PREFIX = "gateway-test-pg-"


def stop_stale_clusters() -> None:
    """Stop and delete the private clusters of test runs whose process is gone: `pg_ctl` daemonizes
    the postmaster, so a run that was killed, not stopped, leaves its cluster running."""
    for root in Path(tempfile.gettempdir()).glob(f"{PG_DIR_PREFIX}*-*"):
        pid = root.name.removeprefix(PG_DIR_PREFIX).split("-")[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        cluster = PrivatePostgres(port=0, root=root)
        if cluster.running:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                cluster._run(
                    _postgres_bin("pg_ctl"), "-D", str(cluster.data_dir), "-m", "immediate", "-w", "stop"
                )
        shutil.rmtree(root, ignore_errors=True)


def start_session_stores() -> list[Callable[[], None]]:
    """Start a private Redis and PostgreSQL for each store the environment does not name, and name
    them in it (tests/support/stores.py reads the names; `gateway serve` children inherit them).
    Returns what stops them. Without a name and without the server's binaries the run stops here
    with what to do, rather than falling back to a server that holds somebody's data."""
    stop_stale_clusters()
    stops: list[Callable[[], None]] = []
    started = []
    if REDIS_ENV not in os.environ:
        if shutil.which("redis-server") is None:
            raise RuntimeError(f"redis-server is not installed: `make test` installs it, or set {REDIS_ENV}")
        redis_server = PrivateRedis(appendonly=False).start()
        stops.append(redis_server.destroy)
        os.environ[REDIS_ENV] = f"redis://127.0.0.1:{redis_server.port}"
        started.append("redis")
    if POSTGRES_ENV not in os.environ:
        try:
            _postgres_bin("initdb")
        except RuntimeError:
            raise RuntimeError(
                f"PostgreSQL is not installed: `make test` installs it, or set {POSTGRES_ENV}"
            ) from None
        postgres = PrivatePostgres().init()
        stops.append(postgres.destroy)
        os.environ[POSTGRES_ENV] = f"postgresql://postgres@127.0.0.1:{postgres.port}"
        started.append("postgres")
    os.environ.setdefault(
        STARTED_ENV, " ".join(started)
    )  # a nested session (a child pytest) keeps its parent's
    return stops
