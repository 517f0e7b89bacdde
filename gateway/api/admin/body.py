"""Admin request parsing: JSON bodies and page parameters, with errors as 400s naming the field."""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from gateway.api.query_params import page_size, text_param
from gateway.errors import InvalidRequest, schema_error_code
from gateway.schemas.admin import PRINTABLE
from gateway.schemas.nesting import TOO_DEEP, json_too_deep

S = TypeVar("S")

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200

_AT_PATH = re.compile(r" - at `\$\.?([^`]*)`$")
_NAMED_FIELD = re.compile(r"(?:unknown|required) field `([^`]+)`|^`([^`]+)`")


def decode_body(body: bytes, schema: type[S]) -> S:
    """Strictly decode a JSON body: a wrong type, an unknown field, a bad value or nesting past the
    bound (gateway.schemas.nesting) is a 400."""
    if json_too_deep(body):
        raise InvalidRequest(TOO_DEEP)
    try:
        return msgspec.json.decode(body, type=schema)
    except msgspec.ValidationError as exc:
        message, param = _explain(str(exc))
        raise InvalidRequest(
            f"Invalid request body: {message}", param=param, code=schema_error_code(str(exc))
        ) from None
    except msgspec.DecodeError:
        raise InvalidRequest("The request body must be a JSON object.") from None


def page_params(limit: str | None, cursor: str | None) -> tuple[int, str | None]:
    """`?limit=` (1..200, default 50) and the opaque `?cursor=` of a list endpoint."""
    size = page_size(limit, "limit", default=DEFAULT_PAGE_SIZE, maximum=MAX_PAGE_SIZE)
    return size, text_param(cursor, "cursor")


def _explain(message: str) -> tuple[str, str | None]:
    """msgspec's message without its `$.path` suffix, and the path as the error's `param`."""
    message = message.replace(f"matching regex {PRINTABLE!r}", "without control characters")
    at = _AT_PATH.search(message)
    if at is not None:
        return _AT_PATH.sub("", message), at.group(1) or None
    named = _NAMED_FIELD.search(message)
    return message, (named.group(1) or named.group(2)) if named else None
