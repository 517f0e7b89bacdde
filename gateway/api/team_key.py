"""The `principal` dependency: the caller's team key, checked once before a `/v1` handler runs.

The app provides it (gateway.app); a handler declares `principal: PrincipalDependency`. A missing, unknown,
revoked or expired key is the key cache's 401 (gateway.auth.key_cache). The Messages API's handlers
take the anthropic SDK's `x-api-key` as well (`provide_messages_principal`).
"""

from __future__ import annotations

from collections.abc import Mapping

from litestar import Request
from litestar.di import NamedDependency
from litestar.params import SkipValidation

from gateway.auth.principal import Principal
from gateway.services import Services, ServicesDependency

# What a handler declares to receive the caller's key (the value is the key cache's own: nothing to
# validate).
PrincipalDependency = NamedDependency[SkipValidation[Principal]]


async def provide_principal(request: Request, services: ServicesDependency) -> Principal:
    """`Authorization: Bearer <team key>`."""
    return await authenticated(request, services, request.headers.get("authorization"))


async def provide_messages_principal(request: Request, services: ServicesDependency) -> Principal:
    """`Authorization`, else the anthropic SDK's `x-api-key`."""
    return await authenticated(request, services, messages_credential(request.headers))


def messages_credential(headers: Mapping[str, str]) -> str | None:
    """The Authorization header, else the anthropic SDK's `x-api-key` as a bearer credential."""
    authorization = headers.get("authorization")
    api_key = headers.get("x-api-key")
    return f"Bearer {api_key}" if authorization is None and api_key is not None else authorization


async def authenticated(request: Request, services: Services, credential: str | None) -> Principal:
    """The key `credential` carries, kept on the request so that an error's log line names it."""
    principal = await services.key_cache.authenticate(credential)
    request.state.principal = principal
    return principal
