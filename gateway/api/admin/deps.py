"""What the admin API needs of the app's services (the app-level `services` dependency,
gateway.services.provide_services): a Protocol, so that a test may stand in a smaller set."""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

from litestar.connection import ASGIConnection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.auth.attempts import KeyAttempts
from gateway.auth.key_cache import KeyCache
from gateway.redis.client import RedisClient
from gateway.settings import Settings


@runtime_checkable  # Litestar checks a dependency's type against the value provided
class AdminServices(Protocol):
    @property
    def settings(self) -> Settings: ...

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]: ...

    @property
    def key_cache(self) -> KeyCache: ...

    @property
    def key_attempts(self) -> KeyAttempts: ...

    @property
    def redis(self) -> RedisClient | None: ...


def admin_services(connection: ASGIConnection) -> AdminServices:
    """The services, for the admin guard (a guard is given the connection, not dependencies)."""
    return cast(AdminServices, connection.app.state.services)
