"""Admin request parsing: JSON bodies and page parameters, with errors as 400s naming the field."""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from gateway.errors import InvalidRequest

S = TypeVar("S")

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200

_AT_PATH = re.compile(r" - at `\$\.?([^`]*)`$")
_NAMED_FIELD = re.compile(r"(?:unknown|required) field `([^`]+)`|^`([^`]+)`")


def decode_body(body: bytes, schema: type[S]) -> S:
    """Strictly decode a JSON body: a wrong type, an unknown field or a bad value is a 400."""
    try:
        return msgspec.json.decode(body, type=schema)
    except msgspec.ValidationError as exc:
        message, param = _explain(str(exc))
        raise InvalidRequest(f"Invalid request body: {message}", param=param) from None
    except msgspec.DecodeError:
        raise InvalidRequest("The request body must be a JSON object.") from None


def page_params(limit: str | None, cursor: str | None) -> tuple[int, str | None]:
    """`?limit=` (1..200, default 50) and the opaque `?cursor=` of a list endpoint."""
    if limit is None:
        return DEFAULT_PAGE_SIZE, cursor or None
    # isdecimal() alone admits other scripts' digits; int() rejects some of them ("³").
    if not (limit.isascii() and limit.isdecimal()) or not 1 <= int(limit) <= MAX_PAGE_SIZE:
        raise InvalidRequest(f"`limit` must be an integer from 1 to {MAX_PAGE_SIZE}.", param="limit")
    return int(limit), cursor or None


def _explain(message: str) -> tuple[str, str | None]:
    """msgspec's message without its `$.path` suffix, and the path as the error's `param`."""
    at = _AT_PATH.search(message)
    if at is not None:
        return _AT_PATH.sub("", message), at.group(1) or None
    named = _NAMED_FIELD.search(message)
    return message, (named.group(1) or named.group(2)) if named else None
