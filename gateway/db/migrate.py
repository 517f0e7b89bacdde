"""Alembic, configured in code: `upgrade_head` brings a database to the newest schema.

There is no alembic.ini: the script location is the copy of the repository's `migrations/` folder
that the wheel carries inside the package (setup.py), or in a checkout the folder itself, beside
the `gateway` package, or else the working directory's. On PostgreSQL the upgrade runs under an
advisory lock, so gateway processes starting together migrate one after the other instead of
racing to create the same tables.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import NamedTuple

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

import gateway
from gateway.db.session import async_url, create_engine

# Any constant shared by every gateway process; "gateway migrate" in ASCII.
MIGRATION_LOCK_KEY = 0x6761_7465_776D_6967


def migrations_dir() -> Path:
    # The packaged copy first: beside an installed package is site-packages, where another
    # distribution may have put a `migrations` folder of its own. Last, the working directory's,
    # for a package built without setup.py's copy.
    package = Path(gateway.__file__).resolve().parent
    candidates = (package / "_data" / "migrations", package.parent / "migrations", Path.cwd() / "migrations")
    return next((found for found in candidates if found.is_dir()), candidates[0])


def alembic_config(database_url: str) -> Config:
    """An Alembic Config for this database; `%` is doubled for ConfigParser interpolation."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", async_url(database_url).replace("%", "%%"))
    return config


class Upgrade(NamedTuple):
    """The revision a database was at before an upgrade (None: an empty database) and after it."""

    before: str | None
    after: str | None

    def describe(self) -> str:
        """What `gateway migrate` says it did."""
        if self.before == self.after:
            return f"the database is already at the latest migration ({self.after})"
        if self.before is None:
            return f"migrated an empty database to {self.after} (the latest migration)"
        return f"migrated the database from {self.before} to {self.after} (the latest migration)"


def upgrade_head(database_url: str) -> Upgrade:
    """Apply every migration not yet applied (for the CLI and other synchronous callers)."""
    return asyncio.run(upgrade_head_async(database_url))


async def upgrade_head_async(database_url: str) -> Upgrade:
    """`upgrade_head` for callers already inside an event loop (the app's start-up, tests)."""
    config = alembic_config(database_url)
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            postgres = connection.dialect.name == "postgresql"
            if postgres:
                await connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
                await connection.commit()
            try:
                return await connection.run_sync(_upgrade_on, config)
            finally:
                if postgres:
                    await connection.execute(
                        text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY}
                    )
                    await connection.commit()
    finally:
        await engine.dispose()


def _upgrade_on(connection: Connection, config: Config) -> Upgrade:
    before = current_revision(connection)
    connection.commit()  # the read's own transaction: Alembic commits only a transaction it began
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
    after = current_revision(connection)
    connection.commit()
    return Upgrade(before, after)


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at; None when no migration was ever applied."""
    return MigrationContext.configure(connection).get_current_revision()


def head_revision(database_url: str) -> str | None:
    """The newest revision of the migrations this gateway carries."""
    return ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
