"""Run `gateway serve` as a real subprocess for end-to-end tests, on a free port."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.children import die_with_parent
from tests.support.servers import free_port
from tests.support.stores import POSTGRES_ADMIN_URL, postgres_url

REPO = Path(__file__).resolve().parents[2]


def recreate_database(name: str) -> str:
    """A fresh PostgreSQL database for one test session; returns its URL as users write it."""
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(run())
    return postgres_url(name)


@dataclass
class GatewayProcess:
    config_path: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> GatewayProcess:
        env = (
            os.environ | self.env | {"GATEWAY_CONFIG": str(self.config_path), "GATEWAY_PORT": str(self.port)}
        )
        self.log_path = self.config_path.with_suffix(f".{self.port}.log")
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited early:\n{self.log_path.read_text()}")
            try:
                if httpx.get(self.base_url + "/healthz", timeout=0.5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gateway did not start:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def logs(self) -> str:
        return self.log_path.read_text() if self.log_path else ""


@dataclass(frozen=True)
class Team:
    """A team created through the admin API, with the one key made for it."""

    id: str
    key: str
    key_id: str


def create_team(admin: httpx.Client, name: str, **fields: object) -> Team:
    """POST /admin/teams, then a key for the team; `admin` carries the admin key."""
    team = admin.post("/admin/teams", json={"name": name, **fields})
    assert team.status_code == 201, team.text
    key = admin.post("/admin/keys", json={"team_id": team.json()["id"], "name": f"{name}-key"})
    assert key.status_code == 201, key.text
    return Team(team.json()["id"], key.json()["key"], key.json()["id"])
