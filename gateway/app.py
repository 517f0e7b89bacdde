"""create_app(settings) -> Litestar: the one place where the gateway is wired together."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import structlog
from litestar import Litestar, Request, Response
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin

from gateway.api.admin import ADMIN_CONTROLLERS
from gateway.api.batches import BATCH_HANDLERS
from gateway.api.header_cap import header_cap
from gateway.api.openai import OPENAI_HANDLERS
from gateway.api.ops import OPS_HANDLERS
from gateway.api.providers import PROVIDER_HANDLERS
from gateway.api.usage import USAGE_HANDLERS
from gateway.errors import ErrorBody, ErrorDetail, GatewayError
from gateway.logs import configure_logging
from gateway.services import open_services
from gateway.settings import Settings

log = structlog.get_logger("gateway.app")

_HTTP_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("not_found_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _request_headers(request: Request) -> dict[str, str]:
    request_id = getattr(request.state, "request_id", None)
    return {"x-request-id": request_id} if request_id else {}


def gateway_error_handler(request: Request, exc: GatewayError) -> Response[bytes]:
    headers = _request_headers(request) | exc.headers
    principal = getattr(request.state, "principal", None)
    if not exc.logged:
        log.info(
            "request_rejected",
            request_id=headers.get("x-request-id"),
            key=getattr(principal, "key_prefix", None),
            path=request.url.path,
            status=exc.status,
            code=exc.code,
        )
    return Response(exc.to_json(), status_code=exc.status, media_type="application/json", headers=headers)


def http_error_handler(request: Request, exc: HTTPException) -> Response[bytes]:
    status = exc.status_code
    kind, code = _HTTP_TYPES.get(status, ("api_error", "error"))
    message = exc.detail or "Request failed"
    if status == 413:
        message = "The request body is larger than the gateway accepts"
    body = msgspec.json.encode(ErrorBody(ErrorDetail(message=message, type=kind, code=code)))
    return Response(
        body,
        status_code=status,
        media_type="application/json",
        headers=_request_headers(request) | (exc.headers or {}),
    )


def internal_error_handler(request: Request, exc: Exception) -> Response[bytes]:
    log.error("internal_error", path=request.url.path, error=type(exc).__name__, exc_info=exc)
    body = ErrorBody(
        ErrorDetail(
            message="The gateway failed to handle this request", type="api_error", code="internal_error"
        )
    )
    return Response(
        msgspec.json.encode(body),
        status_code=500,
        media_type="application/json",
        headers=_request_headers(request),
    )


def create_app(settings: Settings) -> Litestar:
    configure_logging(settings.log_format)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        services = open_services(settings)
        app.state.services = services
        services.start_background()
        log.info("gateway_started", models=len(services.table.by_model), redis=settings.redis_url is not None)
        try:
            yield
        finally:
            await services.aclose()
            log.info("gateway_stopped")

    return Litestar(
        middleware=[header_cap],
        route_handlers=[
            *OPENAI_HANDLERS,
            *BATCH_HANDLERS,
            *USAGE_HANDLERS,
            *PROVIDER_HANDLERS,
            *ADMIN_CONTROLLERS,
            *OPS_HANDLERS,
        ],
        lifespan=[lifespan],
        exception_handlers={
            GatewayError: gateway_error_handler,
            HTTPException: http_error_handler,
            Exception: internal_error_handler,
        },
        request_max_body_size=settings.catalog.limits.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="gateway",
            version="0.1.0",
            path="/schema",
            render_plugins=[JsonRenderPlugin(), SwaggerRenderPlugin()],
        ),
        debug=False,
    )
