"""One request on a connection of `gateway.http_protocol`: its ASGI `receive` and `send`, the
response's framing, and the proxy's own writes.

Ported with the protocol from uvicorn's `RequestResponseCycle` (uvicorn/protocols/http/
httptools_impl.py, BSD-3-Clause, Copyright © 2017-present, Encode OSS Ltd.), compiled by mypyc
(setup.py, HOT_PATH). A response's head is held back until its first body bytes, which then go out
in the same write (or at the latest when the loop's current iteration ends): one `send` system
call per response, not two. The cycle is offered in the ASGI scope's extensions (`DIRECT_WRITES`),
where the proxy front writes a whole response (`Cycle.write_whole`) or a stream's frame
(`Cycle.write_frame`) without building ASGI messages.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

if TYPE_CHECKING:
    from gateway.http_protocol import HttpProtocol

DIRECT_WRITES = "gateway.direct_writes"  # the scope extension: the request's Cycle

# Bytes that may not appear in a response header name or value (uvicorn's HEADER_RE and
# HEADER_VALUE_RE), marked 1 in a translation table: translating the names or values joined and
# looking for a 1 is one C-level pass each, where the regular expressions took ~10,000
# instructions a response.
_NAME_FORBIDDEN = frozenset(b'\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f()<>@,;:[]={} \\"')  # fmt: skip
_NAME_MARKS = bytes([1 if b in _NAME_FORBIDDEN else 0 for b in range(256)])
_VALUE_MARKS = bytes([0 if b == 9 or 0x20 <= b < 0x7F or b >= 0x80 else 1 for b in range(256)])


def check_header_names(names: bytes) -> None:
    if 1 in names.translate(_NAME_MARKS):
        raise RuntimeError("Invalid HTTP header name.")


def check_header_values(values: bytes) -> None:
    if 1 in values.translate(_VALUE_MARKS):
        raise RuntimeError("Invalid HTTP header value.")


class Cycle:
    """One request and its response: the ASGI `receive` and `send`, and the direct writes."""

    def __init__(
        self, protocol: HttpProtocol, scope: dict[str, Any], keep_alive: bool, expect_100_continue: bool
    ) -> None:
        self.protocol = protocol
        # Not the scope itself, which holds the cycle (DIRECT_WRITES): a loop of references per
        # request would wait for the garbage collector, where reference counting frees it now.
        self.is_head = scope["method"] == "HEAD"
        self.access_scope: dict[str, Any] | None = scope if protocol.access_log else None
        self.transport: asyncio.Transport = protocol.transport
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.disconnected = False
        # Request state
        self.body = bytearray()
        self.more_body = True
        self._message_ready = False
        self._message_waiter: asyncio.Future[None] | None = None
        # Response state
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0
        self._held: bytes | None = None  # a response head waiting for its first body bytes
        self.finished = False  # run_asgi has returned: no more responses are reported

    # Request body and disconnect: what `receive` waits for
    def signal(self) -> None:
        self._message_ready = True
        waiter = self._message_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait_message(self) -> None:
        if not self._message_ready:
            waiter = self._message_waiter = self.protocol.loop.create_future()
            try:
                await waiter
            finally:
                self._message_waiter = None
        self._message_ready = False

    async def run_asgi(self, app: Any, scope: dict[str, Any]) -> None:
        logger = self.protocol.logger
        failure: BaseException | None = None
        result: object = None
        try:
            result = await app(scope, self.receive, self.send)
        except BaseException as exc:
            failure = exc  # answered after the handler: no await inside one (setup.py, HOT_PATH)
        try:
            if failure is not None:
                logger.error("Exception in ASGI application\n", exc_info=failure)
                if not self.response_started:
                    await self.send_500_response()
                else:
                    self.close()
            elif result is not None:
                logger.error("ASGI callable should return None, but returned '%s'.", result)
                self.close()
            elif not self.response_started and not self.disconnected:
                logger.error("ASGI callable returned without starting response.")
                await self.send_500_response()
            elif not self.response_complete and not self.disconnected:
                logger.error("ASGI callable returned without completing response.")
                self.close()
        finally:
            self.finished = True

    async def send_500_response(self) -> None:
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"21"),
            (b"connection", b"close"),
        ]
        await self.send({"type": "http.response.start", "status": 500, "headers": headers})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error", "more_body": False})

    async def receive(self) -> dict[str, Any]:
        protocol = self.protocol
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            protocol.resume_reading()
            await self._wait_message()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
        self.body = bytearray()
        return message

    async def send(self, message: dict[str, Any]) -> None:
        protocol = self.protocol
        if protocol.write_paused and not self.disconnected:
            await protocol.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self._start(message["status"], list(message.get("headers", ())))
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
            body: bytes = message.get("body", b"")
            more_body: bool = message.get("more_body", False)
            if self.is_head:
                self.expected_content_length = 0
            elif self.chunked_encoding:
                framed = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
                self.write_now(framed if more_body else framed + b"0\r\n\r\n")
            else:
                if len(body) > self.expected_content_length:
                    raise RuntimeError("Response content longer than Content-Length")
                self.expected_content_length -= len(body)
                self.write_now(body)
            if not more_body:
                if self.expected_content_length != 0:
                    raise RuntimeError("Response content shorter than Content-Length")
                self._complete()
        else:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")

    def _started(self, status: int) -> None:
        """What every response's start does, whichever way it is written."""
        self.response_started = True
        self.waiting_for_100_continue = False
        if self.access_scope is not None:
            self.protocol.log_access(self.access_scope, status)

    def _start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """Hold the response's status line and headers until its first body bytes."""
        protocol = self.protocol
        self._started(status)
        content = [STATUS_LINE[status]]
        has_connection_close = False
        every = protocol.server_state.default_headers + headers
        check_header_names(b"".join([header[0] for header in every]))  # as write_whole checks them
        check_header_values(b"".join([header[1] for header in every]))
        for name, value in every:
            name = name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection" and b"close" in [token.lower().strip() for token in value.split(b",")]:
                self.keep_alive = False
                has_connection_close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if self.chunked_encoding is None and not self.is_head and status not in (204, 304):
            self.chunked_encoding = True  # neither content-length nor transfer-encoding given
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self._held = b"".join(content)
        protocol.loop.call_soon(self.flush)  # a head without a body still goes out this iteration

    def _complete(self) -> None:
        self.response_complete = True
        self.signal()
        if not self.keep_alive:
            self.close()
        if not self.finished:
            self.protocol.on_response_complete()

    def write_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """The whole response in one write: `status`, `headers` (lowercase names, no
        content-length, checked as `send` checks them) and `body`, with the server's default
        headers, `content-length`, and `connection: close` when the connection ends after it.

        Raises RuntimeError, as `send` does, for a header name or value that could split the
        response, or a response already started."""
        if self.disconnected:
            return
        if self.response_started:
            raise RuntimeError("The response has already started")
        every = self.protocol.server_state.default_headers + headers
        parts = [STATUS_LINE[status]]
        names: list[bytes] = []
        values: list[bytes] = []
        for header in every:
            name, value = header[0], header[1]
            names.append(name)
            values.append(value)
            parts += (name, b": ", value, b"\r\n")
        check_header_names(b"".join(names))  # joining adds no byte to either
        check_header_values(b"".join(values))
        parts.append(b"content-length: %d\r\n" % len(body))
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        parts += (b"\r\n", body)
        self._started(status)
        self.transport.write(b"".join(parts))
        self._complete()

    def write_frame(self, data: bytes) -> bool:
        """Write one frame of a chunked response `send` started; False when `send` must do it
        (writing is paused, the client is gone, or the response is not chunked)."""
        if (
            self.protocol.write_paused
            or self.disconnected
            or self.response_complete
            or not self.chunked_encoding
        ):
            return False
        if data:
            self.write_now(b"%x\r\n%b\r\n" % (len(data), data))
        return True

    def write_now(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            data = held + data
        self.transport.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self.transport.is_closing():
            self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()
