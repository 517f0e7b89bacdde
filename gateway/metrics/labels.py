"""Label values of refused requests, bounded: an endpoint the gateway serves, a code of its own.

A path or a code an upstream gave never becomes a label value as it is: each would be a series of
its own for as long as the process runs.
"""

from __future__ import annotations

from functools import cache

from gateway.errors import GatewayError
from gateway.providers.base import Endpoint

_ENDPOINTS = {f"/v1/{endpoint.value}": endpoint.value for endpoint in Endpoint}
_PATH_PREFIXES = (
    ("/v1/batches", "batches"),
    ("/v1/files", "files"),
    ("/v1/models", "models"),
    ("/v1/gateway/", "gateway"),
    ("/admin/", "admin"),
)
# Codes given where an error is raised, and those of answers that are no GatewayError
# (gateway.api.front.error_replies), besides the exception tree's own.
_OTHER_CODES = (
    "missing_api_key", "api_key_revoked", "api_key_expired", "server_busy", "region_not_allowed",
    "batch_pin_conflict", "batch_not_found", "file_too_large", "invalid_cache_control",
    "unsupported", "unsupported_parameter", "unsupported_endpoint", "method_not_allowed",
    "request_too_large", "invalid_request", "request_header_fields_too_large", "error",
)  # fmt: skip


def endpoint_label(path: str) -> str:
    endpoint = _ENDPOINTS.get(path)
    if endpoint is not None:
        return endpoint
    for prefix, label in _PATH_PREFIXES:
        if path.startswith(prefix):
            return label
    return "other"


def code_label(code: str | None) -> str:
    if code is None:
        return "none"
    return code if code in _gateway_codes() else "other"


@cache
def _gateway_codes() -> frozenset[str]:
    """The codes of the gateway's exception tree (read once every module that extends it is loaded:
    the first refusal comes after start-up), and those given where raised."""
    codes, pending = set(_OTHER_CODES), [GatewayError]
    while pending:
        kind = pending.pop()
        pending.extend(kind.__subclasses__())
        if kind.code is not None:
            codes.add(kind.code)
    return frozenset(codes)
