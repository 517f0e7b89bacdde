"""The private servers the fault scenarios stop and restart (tests/support/servers.py)."""

from tests.support.servers import PrivatePostgres, PrivateRedis, _as_postgres_user, _postgres_bin

__all__ = ["PrivatePostgres", "PrivateRedis", "_as_postgres_user", "_postgres_bin"]
