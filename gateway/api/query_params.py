"""Query and path parameters as the API reads them, checked before any of them reaches a query.

Text without control characters, ISO dates and datetimes the calendar and UTC can hold, page sizes
within their bounds: anything else is a 400 naming the parameter, never a database error.
`documented_query` says the same in the OpenAPI document. A parameter that a GET endpoint does not
declare is a 400 naming it too (`DeclaredQueries`): a misspelt filter must not widen a report to
everything.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any

from litestar import Litestar, Request
from litestar.params import QueryParameter
from litestar.routes import HTTPRoute

from gateway.errors import InvalidRequest

MAX_TEXT = 512
# PostgreSQL refuses NUL in text and cannot encode a lone surrogate; no other control character
# belongs in an id, a name or a cursor either.
_UNREADABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
# The same rules as JSON Schema keywords (a URL's text holds no lone surrogate).
TEXT_SCHEMA = {"type": "string", "maxLength": MAX_TEXT, "pattern": "^[^\\x00-\\x1f\\x7f]*$"}
ID_SCHEMA = TEXT_SCHEMA | {"minLength": 1}  # what path_id accepts


def text_param(value: str | None, name: str) -> str | None:
    """A filter, id or cursor as given; None when absent or empty."""
    if not value:
        return None
    if len(value) > MAX_TEXT or _UNREADABLE.search(value):
        raise InvalidRequest(
            f"`{name}` must be at most {MAX_TEXT} characters, none of them control characters.", param=name
        )
    return value


def path_id(value: str, name: str) -> str:
    """An id from the path: the same rules as a query filter, and never empty."""
    checked = text_param(value, name)
    if checked is None:
        raise InvalidRequest(f"`{name}` must not be empty.", param=name)
    return checked


def moment_param(value: str | None, name: str) -> datetime | None:
    """An ISO date (midnight UTC) or datetime (UTC unless it says otherwise), as an aware UTC datetime."""
    if not value:
        return None
    try:
        if len(value) == 10:
            moment = datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC)
        else:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(
            f"`{name}` must be an ISO date or datetime, e.g. 2026-11-01 or 2026-11-01T12:00:00Z.", param=name
        ) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00-05:00 is past the last instant a datetime holds in UTC
        raise InvalidRequest(f"`{name}` is outside the years 1 to 9999 in UTC.", param=name) from None


def page_size(value: str | None, name: str, *, default: int, maximum: int) -> int:
    """`?limit=`: decimal ASCII digits from 1 to `maximum`, `default` when absent."""
    if value is None:
        return default
    # isdecimal() alone admits other scripts' digits, and int() refuses a string of over 4300 digits.
    if not (value.isascii() and value.isdecimal() and len(value) <= 10) or not 1 <= int(value) <= maximum:
        raise InvalidRequest(f"`{name}` must be an integer from 1 to {maximum}.", param=name)
    return int(value)


def documented_query(description: str, *, name: str | None = None, **schema: Any) -> QueryParameter:
    """A query parameter's OpenAPI entry: text as `text_param` takes it (a query string has no
    null), with `schema`'s JSON Schema keywords (`type="integer"` drops the text rules). Documentation
    only: the handler receives the raw text and checks it with the functions above, so that a bad
    value is answered with the OpenAI error naming it rather than with Litestar's own validation
    error."""
    base = TEXT_SCHEMA if schema.get("type", "string") == "string" else {}
    keywords = {key: value for key, value in (base | schema).items() if value is not None}
    return QueryParameter(name=name, description=description, schema_extra={"oneOf": None, **keywords})


def documented_limit(maximum: int, default: int) -> QueryParameter:
    """`?limit=` as `page_size` takes it."""
    return documented_query(
        f"Items per page: 1 to {maximum}.", type="integer", minimum=1, maximum=maximum, default=default
    )


UNCHECKED_PATHS = ("/ui", "/schema")  # pages for a browser, and Litestar's own OpenAPI routes


class DeclaredQueries:
    """The query parameters each GET endpoint declares, its own and its dependencies', as
    Litestar's routes hold them (so the OpenAPI document and this check read the same list)."""

    def __init__(self) -> None:
        self._by_handler: dict[int, frozenset[str]] = {}

    def learn(self, app: Litestar) -> None:
        """Read the app's routes: once, when it is built."""
        for route in app.routes:
            if not isinstance(route, HTTPRoute) or route.path.startswith(UNCHECKED_PATHS):
                continue
            for method, (handler, kwargs) in route.route_handler_map.items():
                names = frozenset(parameter.field_alias for parameter in kwargs.expected_query_params)
                if method == "GET" and names:
                    self._by_handler[id(handler)] = names

    def check(self, request: Request) -> None:
        """A 400 naming every query parameter the endpoint does not take."""
        declared = self._by_handler.get(id(request.route_handler))
        if declared is None or request.method != "GET":
            return
        unknown = sorted({name for name in request.query_params if name not in declared})
        if unknown:
            named = ", ".join(f"`{name[:MAX_TEXT]}`" for name in unknown)
            raise InvalidRequest(
                f"Unknown query parameter {named}: this endpoint takes {', '.join(sorted(declared))}.",
                param=unknown[0][:MAX_TEXT],
                code="unknown_parameter",
            )
