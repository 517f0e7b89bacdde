"""The gateway under test: its catalog pointing at nginx, PostgreSQL and Redis, a team key.

PostgreSQL and Redis are the machine's own (127.0.0.1:5432 and :6379); the bench uses its own
database (`gateway_bench`, recreated each run) and Redis db 10 (flushed each run; no test uses
it), so metering, key checks and batch pins all run against real services.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.procstat import tree

REPO = Path(__file__).resolve().parents[1]
DATABASE = "gateway_bench"
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/10"
ADMIN_KEY = "bench-admin-secret"
FLAVOURS = ("json", "sse", "slow", "drip", "hold")  # one provider and one model per nginx location

PROVIDER = """  - name: nginx-{flavour}
    kind: openai
    region: local
    base_url: {upstream}/{flavour}/v1
    api_key: bench-upstream-key
    timeout_s: 60
"""
MODEL = """  - name: bench-{flavour}
    deployments:
      - provider: nginx-{flavour}
        model: bench-upstream
        price: {{input: 0.15, output: 0.60, cached_input: 0.075}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def catalog(upstream: str) -> str:
    providers = "".join(PROVIDER.format(flavour=f, upstream=upstream) for f in FLAVOURS)
    models = "".join(MODEL.format(flavour=f) for f in FLAVOURS)
    return f"providers:\n{providers}models:\n{models}retry:\n  max_attempts: 1\n"


def recreate_database(name: str = DATABASE) -> str:
    """A fresh PostgreSQL database for one benchmark run; its URL."""
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(run())
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def flush_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.flushdb()
    finally:
        client.close()


def server_command(server: str, port: int, workers: int) -> list[str]:
    """`gateway serve` (uvicorn), or granian serving the same ASGI factory for the comparison."""
    if server == "uvicorn":
        return [sys.executable, "-m", "gateway.cli", "serve", "--no-migrate"]
    granian = str(Path(sys.executable).with_name("granian"))
    return [
        granian, "--interface", "asgi", "--factory", "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers), "--loop", "uvloop", "--log-level", "warning", "--no-ws",
        "gateway.server.asgi:app_factory",
    ]  # fmt: skip


def listening_sockets(port: int) -> int:
    """TCP sockets listening on `port`, from the kernel's tables (what `ss -ltn` shows)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            count += fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port
    return count


@dataclass
class Gateway:
    workdir: Path
    upstream: str
    workers: int = 1
    server: str = "uvicorn"
    cpus: str | None = None
    prefix: tuple[str, ...] = ()  # a command to run the server under (valgrind: bench/instructions.py)
    ready_timeout_s: float = 30.0
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    team_key: str = ""
    database_url: str = ""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def env(self, database_url: str) -> dict[str, str]:
        config = self.workdir / "gateway.yaml"
        config.write_text(catalog(self.upstream))
        return os.environ | {
            "GATEWAY_CONFIG": str(config),
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_REDIS_URL": REDIS_URL,
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "GATEWAY_PORT": str(self.port),
            "GATEWAY_WORKERS": str(self.workers),
        }

    def start(self) -> Gateway:
        """A fresh database, Redis db and team key; then `restart()` keeps them between sections."""
        flush_redis()
        self.database_url = recreate_database()
        subprocess.run([sys.executable, "-m", "gateway.cli", "migrate"], env=self.env(self.database_url),
                       cwd=REPO, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        self._launch()
        try:
            self.team_key = self._create_team_key()
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """A new gateway process on the same data: each section starts with empty pools."""
        self.stop()
        self._launch()

    def _launch(self) -> None:
        env = self.env(self.database_url)
        command = [*self.prefix, *server_command(self.server, self.port, self.workers)]
        if self.cpus:
            command = ["taskset", "-c", self.cpus, *command]
        with (self.workdir / f"gateway-{self.server}.log").open("ab") as log:
            self.process = subprocess.Popen(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        if self.cpus:
            self._unpin_writer()

    def _unpin_writer(self) -> None:
        """The metering writer process floats over every core, as PostgreSQL and Redis do: the pin
        keeps the serving worker apart from the load, and the writer is not on the request path."""
        assert self.process is not None
        for pid in tree(self.process.pid):
            with contextlib.suppress(OSError):
                if b"metering-writer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.sched_setaffinity(pid, range(os.cpu_count() or 1))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the gateway exited; see {self.workdir}/gateway-{self.server}.log")
            try:
                healthy = httpx.get(self.base_url + "/healthz", timeout=0.5).status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy and self._all_workers_listening():
                return
            time.sleep(0.1)
        raise RuntimeError("the gateway did not start")

    def _all_workers_listening(self) -> bool:
        """The first worker answers /healthz before the others listen: a run started then would
        give it every connection (each uvicorn worker listens on a socket of its own, gateway.server.serving)."""
        if self.server != "uvicorn" or self.workers == 1:
            return True
        return listening_sockets(self.port) >= self.workers

    def _create_team_key(self) -> str:
        with httpx.Client(base_url=self.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as admin:
            team = admin.post("/admin/teams", json={"name": "bench"})
            team.raise_for_status()
            key = admin.post("/admin/keys", json={"team_id": team.json()["id"], "name": "bench-key"})
            key.raise_for_status()
            return str(key.json()["key"])

    def usage_records(self) -> int:
        """Usage records written so far (the metering writer persists them within a fraction of a second)."""
        import asyncpg

        async def count() -> int:
            conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{DATABASE}")
            try:
                return int(await conn.fetchval("SELECT count(*) FROM usage_records"))
            finally:
                await conn.close()

        return asyncio.run(count())

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
