"""uvicorn's httptools protocol, writing a response's head together with its first body bytes.

uvicorn writes the status line and headers as soon as the app sends `http.response.start`, and the
body on `http.response.body`: two `send` calls for every response. On loopback and on a LAN each
`send` also runs the receiving side's TCP work, and the profile of a loaded worker showed the pair
at a tenth of its CPU. `CoalescingTransport` holds a response head back until the next write (the
body, which then goes out with it) or, at the latest, until the loop's current iteration ends;
every other write goes out at once, so stream frames are not delayed. The bytes and their order
on the wire are unchanged. `gateway serve` runs uvicorn with `HttpToolsProtocol` below.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as UvicornHttpToolsProtocol

from gateway.api.direct_writes import DIRECT_WRITES


class CoalescingTransport(asyncio.Transport):
    """A socket transport that sends a response head with the write after it: the one transport
    method it changes is `write` (and `writelines`); everything else is the socket's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        # A response head (uvicorn writes it alone) waits for the body; the rest goes out now.
        if self._held is None and data[:9] == b"HTTP/1.1 ":
            self._held = bytes(data)
            self._loop.call_soon(self.flush)  # a head without a body still goes out this iteration
        else:
            self.write_now(data)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write_now(self, data: bytes | bytearray | memoryview) -> None:
        """Write at once, after anything held (`write`, and `gateway.api.direct_writes`)."""
        held = self._held
        if held is not None:
            self._held = None
            data = held + data
        self._transport.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)


class HttpToolsProtocol(UvicornHttpToolsProtocol):
    """uvicorn's protocol on a `CoalescingTransport` (`uvicorn.run(..., http=HttpToolsProtocol)`),
    offering each request's cycle to `gateway.api.direct_writes` in the scope's extensions."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        # Not when uvicorn writes an access log (its `send` does). The task that runs the app
        # starts in a later loop iteration, so it sees the extension. A weak reference: the
        # cycle holds the scope, and a cycle of references per request would wait for the
        # garbage collector (docs/performance.md), where reference counting frees it now.
        if cycle is not None and cycle.scope is self.scope and not self.access_log:
            self.scope["extensions"] = {DIRECT_WRITES: weakref.ref(cycle)}  # type: ignore[dict-item]
