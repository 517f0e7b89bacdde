"""Reading `Authorization: Bearer <token>`: the one place that parses the header."""

from __future__ import annotations

import re

from gateway.errors import AuthenticationFailed

_SPACE = re.compile(r"\s")  # str.isspace's characters, as one C-level scan

MISSING = "Missing API key: send it as 'Authorization: Bearer <key>'."
MALFORMED = "Malformed Authorization header: expected 'Bearer <key>'."


def bearer_token(header: str | None) -> str:
    """The token of a Bearer header; 401 when the header is absent or not of that form."""
    if header is not None and header.startswith("Bearer "):  # as every SDK writes it
        token = header[7:]
        # ASCII, printable and no space: no whitespace at all, so the general path below would
        # return it unchanged; these checks run in C without a regular expression
        if token and token.isascii() and token.isprintable() and " " not in token:
            return token
    return parse_bearer(header)


def parse_bearer(header: str | None) -> str:
    """`bearer_token` for any header: surrounding spaces, any case of `Bearer`."""
    if header is None or not header.strip():
        raise AuthenticationFailed(MISSING, code="missing_api_key")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or _SPACE.search(token):
        raise AuthenticationFailed(MALFORMED)
    return token
