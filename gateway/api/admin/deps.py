"""What the admin controllers need from the app, read from `app.state.services`."""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.di import Provide
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


def services_of(connection: ASGIConnection) -> AdminServices:
    return cast(AdminServices, connection.app.state.services)


def provide_services(request: Request) -> AdminServices:
    return services_of(request)


ADMIN_DEPENDENCIES = {"services": Provide(provide_services, sync_to_thread=False)}
