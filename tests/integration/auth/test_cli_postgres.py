from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.auth.secrets import hash_secret
from gateway.db.models import ApiKey
from tests.integration.auth.conftest import REDIS_URL

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def gateway(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
        "GATEWAY_REDIS_URL": REDIS_URL,
    }
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_teams_and_keys_from_the_command_line(
    database_url: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    made = gateway(
        database_url,
        "teams",
        "create",
        "--name",
        "nlp",
        "--allowed-models",
        "a,b",
        "--budget-usd",
        "50",
        "--weight",
        "2.5",
    )
    assert made.returncode == 0, made.stderr
    assert "nlp" in made.stdout

    duplicate = gateway(database_url, "teams", "create", "--name", "nlp")
    assert duplicate.returncode == 1
    assert "already exists" in duplicate.stderr

    teams = gateway(database_url, "teams", "list")
    assert teams.returncode == 0
    assert "a,b" in teams.stdout
    assert "50" in teams.stdout
    assert "WEIGHT" in teams.stdout
    assert "2.5" in teams.stdout

    weightless = gateway(database_url, "teams", "create", "--name", "zero", "--weight", "0")
    assert weightless.returncode == 1
    assert "weight" in weightless.stderr

    issued = gateway(
        database_url, "keys", "create", "--team", "nlp", "--name", "batch", "--expires-in-days", "7"
    )
    assert issued.returncode == 0, issued.stderr
    secret = issued.stdout.strip()
    assert secret.startswith("sk-gw-")
    assert "only this once" in issued.stderr

    async with sessions() as session:
        key = (await session.scalars(select(ApiKey))).one()
    assert key.key_hash == hash_secret(secret)
    assert key.expires_at is not None

    listing = gateway(database_url, "keys", "list", "--team", "nlp")
    assert key.id in listing.stdout
    assert secret[:12] in listing.stdout
    assert secret not in listing.stdout

    revoked = gateway(database_url, "keys", "revoke", key.id)
    assert revoked.returncode == 0, revoked.stderr
    async with sessions() as session:
        assert (await session.get(ApiKey, key.id, populate_existing=True)).revoked_at is not None  # type: ignore[union-attr]

    missing = gateway(database_url, "keys", "revoke", "key_nope")
    assert missing.returncode == 1
    assert "key_nope" in missing.stderr
