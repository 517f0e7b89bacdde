"""The gateway the fuzz tests attack: the embedded default config (built-in mock providers), a
migrated SQLite file, no Redis, one team with a real key, and the admin key. In process (`FuzzStack`:
the ASGI app `gateway serve` runs) or as `gateway serve` itself over HTTP (`served_gateway`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from litestar.types import ASGIApp

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from gateway.server.asgi import serving_app
from gateway.settings import Settings, load_settings
from tests.support.gateway import REPO, GatewayProcess, create_team
from tests.unit.auth.records import add_key, add_team

ADMIN_KEY = "admin-fuzz-secret"
DEFAULT_CONFIG = REPO / "config" / "gateway.yaml"


class _Keys:
    """The keys a fuzzer sends: the team's, and the admin key on the admin API."""

    team_key: str

    @property
    def team_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.team_key}"}

    @property
    def admin_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_KEY}"}

    def auth_for(self, path: str) -> dict[str, str]:
        """The admin key on the admin API, the team key everywhere else."""
        return self.admin_auth if path.startswith("/admin") else self.team_auth


@dataclass(frozen=True)
class FuzzStack(_Keys):
    app: ASGIApp  # what `gateway serve` runs (gateway.server.asgi.serving_app)
    settings: Settings
    team_id: str
    team_key: str


@dataclass(frozen=True)
class ServedStack(_Keys):
    base_url: str  # a `gateway serve` process
    team_id: str
    team_key: str


def fuzz_settings(directory: Path, config: Path = DEFAULT_CONFIG) -> Settings:
    return load_settings(
        {
            "GATEWAY_CONFIG": str(config),
            "GATEWAY_DATABASE_URL": f"sqlite:///{directory / 'gateway.db'}",
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "GATEWAY_LOG_FORMAT": "json",
            "PATH": os.environ.get("PATH", ""),
        }
    )


async def prepare_database(settings: Settings) -> tuple[str, str]:
    """Migrate the database and add one team with one key; returns (team id, key secret)."""
    await upgrade_head_async(settings.database_url)
    engine = create_engine(settings.database_url)
    try:
        sessions = session_factory(engine)
        team = await add_team(sessions, "fuzzers")
        _, secret = await add_key(sessions, team.id, "fuzz-key")
    finally:
        await engine.dispose()
    return team.id, secret


def build_stack(directory: Path, config: Path = DEFAULT_CONFIG) -> FuzzStack:
    """For synchronous callers (schemathesis runs the app on its own event loop thread)."""
    settings = fuzz_settings(directory, config)
    team_id, secret = asyncio.run(prepare_database(settings))
    return FuzzStack(serving_app(settings), settings, team_id, secret)


@contextmanager
def served_gateway(directory: Path, config: Path = DEFAULT_CONFIG) -> Iterator[ServedStack]:
    """`gateway serve` (one worker, migrating its SQLite file at start), with a team made through
    the admin API; stopped on exit."""
    env = {
        "GATEWAY_DATABASE_URL": f"sqlite:///{directory / 'gateway.db'}",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_LOG_FORMAT": "json",
    }
    local = directory / config.name  # the process writes its log beside its config
    if local != config:
        local.write_text(config.read_text())
    gateway = GatewayProcess(local, env).start(timeout_s=60.0)
    try:
        admin = httpx.Client(base_url=gateway.base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        with admin:
            team = create_team(admin, "fuzzers")
        yield ServedStack(gateway.base_url, team.id, team.key)
    finally:
        gateway.stop()
