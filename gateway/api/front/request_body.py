"""A proxied request's body as the ASGI front reads it: under the per-request cap, and under a
budget of the bytes the whole process is reading at once.

Nothing is read until the pipeline asks (after the key is checked), so a refused request costs no
upload, and uvicorn sends `100 Continue` only on the first `receive()`. The budget bounds what
slow or many uploads can hold in memory while they arrive: a declared length is taken from it
whole before the first byte is read, a body without one as it is read; a request that does not
fit is refused at once (503 `server_busy`, `Retry-After`) rather than queued behind uploads whose
pace the clients set. Bytes go back to the budget once the body is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from litestar.types import Receive

from gateway.errors import ServiceUnavailable

BUSY_RETRY_AFTER_S = 1


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


@dataclass(slots=True)
class BodyBudget:
    """The request-body bytes this process is reading at once, and their bound."""

    limit: int
    held: int = 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise ServiceUnavailable(
                "The gateway is receiving too many request bodies at once; retry shortly",
                code="server_busy",
                headers={"retry-after": str(BUSY_RETRY_AFTER_S)},
            )
        self.held += size

    def give_back(self, size: int) -> None:
        self.held -= size


@dataclass(slots=True)
class RequestBody:
    """One request's body, read from `receive` only when `read()` is awaited."""

    receive: Receive
    declared: int | None  # the content-length, when the request gives one
    has_body: bool  # a content-length above 0, or a transfer-encoding
    max_bytes: int
    budget: BodyBudget
    held: int = 0  # bytes of the budget this body holds
    complete: bool = False

    @classmethod
    def of(
        cls, receive: Receive, headers: Mapping[str, str], max_bytes: int, budget: BodyBudget
    ) -> RequestBody:
        """The body the headers (lower-case names) announce; BodyTooLarge when its declared length
        is over the cap, before anything is read."""
        length = headers.get("content-length")
        declared = int(length) if length is not None and length.isascii() and length.isdigit() else None
        if declared is not None and declared > max_bytes:
            raise BodyTooLarge
        has_body = bool(declared) or "transfer-encoding" in headers
        return cls(receive, declared, has_body, max_bytes, budget)

    @property
    def unread(self) -> bool:
        """Part of the body is still on the connection: an answer now should close it."""
        return self.has_body and not self.complete

    async def read(self) -> bytes:
        """The whole body; BodyTooLarge past the cap, ClientGone if the client leaves first, and
        ServiceUnavailable (503 `server_busy`) when the budget has no room for it."""
        try:
            self._hold(self.declared or 0)
            parts: list[bytes] = []
            size = 0
            while True:
                message: Any = await self.receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_bytes:
                    raise BodyTooLarge
                self._hold(size)
                parts.append(chunk)
                if not message.get("more_body", False):
                    self.complete = True
                    return parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            self.budget.give_back(self.held)
            self.held = 0

    def _hold(self, size: int) -> None:
        """Hold `size` bytes of the budget in all: a body without a declared length grows as read."""
        if size > self.held:
            self.budget.take(size - self.held)
            self.held = size
