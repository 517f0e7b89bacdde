"""create_app(settings) -> the app: the hot-path front and Litestar, wired together in one place.

The app is a Litestar app whose `__call__` first hands a request for a proxied endpoint
(gateway.api.front.proxy) to the front, before any of Litestar's per-request machinery runs; the
rest, and the lifespan, go to Litestar. A subclass rather than a wrapper around the app, so that
every app `create_app` builds serves the proxied paths the one way, while it stays a Litestar app
for its servers and tests (its lifespan, `state`, routes, Litestar's test clients). Litestar's
declarations of the proxied paths only document them, and hand the front the spellings of them
that only Litestar's router takes (a trailing slash).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import structlog
from litestar import Litestar, Request, Response
from litestar.di import Provide
from litestar.exceptions import HTTPException, MethodNotAllowedException, NotFoundException

from gateway.api.admin import ADMIN_HANDLERS
from gateway.api.anthropic.batches import MESSAGE_BATCH_HANDLERS
from gateway.api.anthropic.messages import MESSAGES_HANDLERS
from gateway.api.front.error_replies import (
    Asker,
    ErrorReply,
    gateway_error_reply,
    http_error_reply,
    internal_error_reply,
    unrouted_reply,
)
from gateway.api.front.proxy import ENDPOINTS, ProxyFront
from gateway.api.gateway.batches import BATCH_HANDLERS
from gateway.api.gateway.quotes import QUOTE_HANDLERS
from gateway.api.gateway.usage import USAGE_HANDLERS
from gateway.api.openai.batches import BATCH_JOB_HANDLERS
from gateway.api.openai.files import FILE_HANDLERS
from gateway.api.openai.inference import OPENAI_HANDLERS
from gateway.api.openai.responses import RESPONSES_HANDLERS
from gateway.api.openapi import openapi_config
from gateway.api.ops import OPS_HANDLERS
from gateway.api.query_params import DeclaredQueries
from gateway.api.request_ids import RequestIdMiddleware
from gateway.api.team_key import provide_principal
from gateway.auth.attempts import WEAK_ADMIN_KEY, strong_admin_key
from gateway.console import console_router, console_templates
from gateway.errors import GatewayError
from gateway.logs import configure_logging, flush_logs
from gateway.proxy.exchange import new_request_id
from gateway.services import open_services, provide_services
from gateway.settings import Settings, unpriced_deployments

log = structlog.get_logger("gateway.app")

# What any handler may declare: `services` (gateway.services) and the caller's team key `principal`
# (gateway.api.team_key). Shared with the tests' smaller apps.
DEPENDENCIES = {
    "services": Provide(provide_services, sync_to_thread=False),
    "principal": Provide(provide_principal),
}


def _asker(request: Request) -> Asker:
    """Who an error answers, for its log line. The request id is gateway.api.request_ids', or drawn
    here for a request no route took (Litestar runs no middleware for those)."""
    request_id = getattr(request.state, "request_id", None)
    if request_id is None:
        request.state.request_id = request_id = new_request_id()
    return Asker(
        request_id,
        request.url.path,
        request.headers.get("user-agent"),
        getattr(request.state, "principal", None),
    )


def _response(reply: ErrorReply) -> Response[bytes]:
    return Response(
        reply.body, status_code=reply.status, media_type="application/json", headers=reply.headers
    )


def _counted(request: Request, reply: ErrorReply) -> ErrorReply:
    """`reply`, counted when the gateway gave it before any upstream was tried."""
    services = getattr(request.app.state, "services", None)  # None: refused before the lifespan ran
    if reply.refused and services is not None:
        services.metrics.count_refused(request.url.path, reply.status, reply.code)
    return reply


def gateway_error_handler(request: Request, exc: GatewayError) -> Response[bytes]:
    reply = gateway_error_reply(exc, _asker(request))
    return _response(_counted(request, reply))


def http_error_handler(request: Request, exc: HTTPException) -> Response[bytes]:
    reply = None
    if isinstance(exc, NotFoundException | MethodNotAllowedException):  # raised by the router
        reply = unrouted_reply(exc.status_code, request.method, _asker(request))
    if reply is None:
        reply = http_error_reply(exc.status_code, exc.detail, _asker(request), _named_parameter(exc))
    return _response(_counted(request, reply._replace(headers=reply.headers | (exc.headers or {}))))


def internal_error_handler(request: Request, exc: Exception) -> Response[bytes]:
    return _response(internal_error_reply(exc, _asker(request)))


def _named_parameter(exc: HTTPException) -> str | None:
    """The parameter a validation error of Litestar's names (`extra=[{"key": ...}]`), if one."""
    extra = exc.extra if isinstance(exc.extra, list) else []
    keys = [item.get("key") for item in extra if isinstance(item, dict) and item.get("key")]
    return str(keys[0]) if keys else None


def answer_options(request: Request) -> Response[None] | None:
    """OPTIONS answered with every method the path takes. Litestar makes a path's OPTIONS handler
    when the path's first handler is registered and keeps it when another is added for the same
    path, so its own `Allow` names only the first handler's methods."""
    if request.method != "OPTIONS":
        return None
    paths = request.route_handler.paths
    methods = {method for route in request.app.routes if route.path in paths for method in route.methods}
    return Response(None, status_code=204, headers={"Allow": ", ".join(sorted(methods))})


class GatewayApp(Litestar):
    """Litestar, behind the front that serves the proxied endpoints (`front`)."""

    front: ProxyFront

    # Any: the front reads an HTTP scope, which Litestar's types cannot tell from a lifespan one
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = ENDPOINTS.get(scope["path"])
            if endpoint is not None:
                await self.front.serve(scope, receive, send, endpoint)
                return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings, *, on_started: Callable[[], None] | None = None) -> GatewayApp:
    """`on_started`: called once the services are open (a server tunes its process there)."""
    configure_logging(settings.log_format)
    limits = settings.catalog.limits
    front = ProxyFront(limits.max_body_bytes, limits.buffered_body_bytes)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        services = open_services(settings)
        app.state.services = front.services = services
        services.start_background()
        if on_started is not None:
            on_started()
        log.info("gateway_started", models=len(services.table.models), redis=settings.redis_url is not None)
        for deployment in unpriced_deployments(settings.catalog):
            log.warning("deployment_unpriced", deployment=deployment)
        if settings.admin_key is not None and not strong_admin_key(settings.admin_key):
            log.warning("admin_key_weak", detail=WEAK_ADMIN_KEY)
        try:
            yield
        finally:
            front.services = None
            await services.aclose()
            log.info("gateway_stopped")
            flush_logs()

    queries = DeclaredQueries()

    def before_request(request: Request) -> Response[None] | None:
        queries.check(request)
        return answer_options(request)

    app = GatewayApp(
        route_handlers=[
            *OPENAI_HANDLERS,
            *RESPONSES_HANDLERS,
            *MESSAGES_HANDLERS,
            *MESSAGE_BATCH_HANDLERS,
            *BATCH_HANDLERS,
            *QUOTE_HANDLERS,
            *FILE_HANDLERS,
            *BATCH_JOB_HANDLERS,
            *USAGE_HANDLERS,
            *ADMIN_HANDLERS,
            *OPS_HANDLERS,
            console_router(settings),
        ],
        dependencies=DEPENDENCIES | {"front": Provide(lambda: front, use_cache=True, sync_to_thread=False)},
        lifespan=[lifespan],
        before_request=before_request,
        middleware=[RequestIdMiddleware],
        exception_handlers={
            GatewayError: gateway_error_handler,
            HTTPException: http_error_handler,
            Exception: internal_error_handler,
        },
        request_max_body_size=settings.catalog.limits.max_body_bytes,
        logging_config=None,  # the gateway's own (gateway.logs): no handler of Litestar's on the root logger
        openapi_config=openapi_config(title="gateway", version="0.1.0"),
        template_config=console_templates(),
        debug=False,
    )
    app.front = front
    queries.learn(app)
    return app
