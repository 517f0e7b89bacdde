"""Error answers as OpenAI error objects: status, headers and body, for Litestar and the ASGI front.
On the Messages API (`/v1/messages` and every path under it) every one of them, a refused key, an
unknown path or a 500 included, is in Anthropic's envelope instead (`"type": "error"`,
gateway.dialects.messages.errors).

`gateway.app` turns them into Litestar responses; `gateway.api.front.proxy` sends them itself.
Each logs the refusal once, as one `request_rejected` line that explains it to an operator: request
id, status, code, message, `param`, path, user agent, and the key's id and prefix when the key was
known (never the key, never the body or the prompt, never a failed statement's values);
`refused` tells the fronts to count it (`gateway_requests_refused_total`): an error the gateway
gave itself before any upstream was tried, where a metered upstream failure is counted with the
requests that reached an upstream.
"""

from __future__ import annotations

import traceback
from typing import NamedTuple

import msgspec
import structlog

from gateway.auth.principal import Principal
from gateway.db.session import database_error
from gateway.dialects.messages.errors import error_envelope
from gateway.errors import ErrorBody, ErrorDetail, GatewayError

log = structlog.get_logger("gateway.app")

HTTP_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("not_found_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}
TOO_LARGE = "The request body is larger than the gateway accepts"
MESSAGES_PATH = "/v1/messages"  # and the paths under it: answered in Anthropic's envelope
_MAX_PATH_CHARS = 200  # a path echoed in a message: enough to recognise it, never a whole long URL


class ErrorReply(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes
    code: str | None = None  # the error object's code
    refused: bool = False  # answered before any upstream was tried


def request_id_header(request_id: str | None) -> dict[str, str]:
    return {"x-request-id": request_id} if request_id else {}


class Asker(NamedTuple):
    """Who a refusal answers, as its log line names them: never the key itself, never the body."""

    request_id: str | None
    path: str
    user_agent: str | None = None
    principal: Principal | None = None  # None: refused before the key was known


def log_refusal(asker: Asker, status: int, detail: ErrorDetail) -> None:
    principal = asker.principal
    log.info(
        "request_rejected",
        request_id=asker.request_id,
        status=status,
        code=detail.code,
        message=detail.message,
        param=detail.param,
        path=asker.path[:_MAX_PATH_CHARS],
        user_agent=asker.user_agent[:_MAX_PATH_CHARS] if asker.user_agent else None,
        key_id=principal.key_id if principal is not None else None,
        key=principal.key_prefix if principal is not None else None,
    )


def is_messages_path(path: str) -> bool:
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def error_body(detail: ErrorDetail, status: int, path: str) -> bytes:
    """The error object, in the envelope the API of `path` answers with."""
    if is_messages_path(path):
        return error_envelope(detail, status)
    return msgspec.json.encode(ErrorBody(detail))


def gateway_error_reply(exc: GatewayError, asker: Asker) -> ErrorReply:
    headers = request_id_header(asker.request_id) | exc.headers
    detail = exc.body().error
    if not exc.logged:
        log_refusal(asker, exc.status, detail)
    body = error_body(detail, exc.status, asker.path)
    return ErrorReply(exc.status, headers, body, exc.code, refused=not exc.logged)


def http_error_reply(status: int, detail: str | None, asker: Asker, param: str | None = None) -> ErrorReply:
    """An error the web framework raised (a body over the cap, a query parameter of the wrong
    type); `param` names the parameter when the framework said which."""
    kind, code = HTTP_TYPES.get(status, ("api_error", "error"))
    message = TOO_LARGE if status == 413 else detail or "Request failed"
    error = ErrorDetail(message=message, type=kind, param=param, code=code)
    log_refusal(asker, status, error)
    body = error_body(error, status, asker.path)
    return ErrorReply(status, request_id_header(asker.request_id), body, code, refused=True)


def unrouted_reply(status: int, method: str, asker: Asker) -> ErrorReply | None:
    """The answer when no route takes the request: a path under `/v1/` the gateway does not serve
    (404 `unsupported_endpoint`, as an OpenAI client expects an error object there) or a known
    path asked with a method it does not take (405 `method_not_allowed`). None for anything else."""
    path = asker.path
    named = f"{method} {path[:_MAX_PATH_CHARS]}"
    if status == 404 and path.startswith("/v1/"):
        message = f"Invalid URL ({named}): the gateway does not serve this endpoint"
        detail = ErrorDetail(message=message, type="invalid_request_error", code="unsupported_endpoint")
    elif status == 405:
        message = f"Invalid method ({named}): this path does not take {method}"
        detail = ErrorDetail(message=message, type="invalid_request_error", code="method_not_allowed")
    else:
        return None
    log_refusal(asker, status, detail)
    body = error_body(detail, status, path)
    return ErrorReply(status, request_id_header(asker.request_id), body, detail.code, refused=True)


def internal_error_reply(exc: Exception, asker: Asker) -> ErrorReply:
    request_id, path = asker.request_id, asker.path
    database = database_error(exc)
    if database is None:
        log.error("internal_error", request_id=request_id, path=path, error=type(exc).__name__, exc_info=exc)
    else:  # the frames only: a failed statement's text, or its driver's message, may quote its values
        stack = "".join(traceback.format_list(traceback.extract_tb(exc.__traceback__)))
        log.error(
            "internal_error",
            request_id=request_id,
            path=path,
            error=type(exc).__name__,
            database_error=database,
            stack=stack,
        )
    detail = ErrorDetail(
        message="The gateway failed to handle this request", type="api_error", code="internal_error"
    )
    return ErrorReply(500, request_id_header(request_id), error_body(detail, 500, path), detail.code)
