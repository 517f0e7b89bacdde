"""The HTTP/1.1 server protocol `gateway serve` runs under uvicorn: uvicorn's httptools protocol,
ported to the compiled build, with the proxy's own write paths.

uvicorn's `HttpToolsProtocol` (uvicorn/protocols/http/httptools_impl.py, BSD-3-Clause, Copyright ©
2017-present, Encode OSS Ltd.) is interpreted Python, and it runs for every request: nine header
callbacks, the scope, a request cycle with an `asyncio.Event`, a task, flow control, a keep-alive
timer armed and cancelled, and the ASGI `send` twice per response with a regular-expression search
per header. Counted with callgrind, that was the largest share of the worker's instructions left
outside the gateway's own compiled code (docs/performance.md). This module does the same work
with the same behaviour on the wire, in a module mypyc compiles (setup.py, HOT_PATH):

- the same parser (httptools' llhttp), scope, ASGI `receive`/`send`, pipelining, flow control,
  `Expect: 100-continue`, 400 on unparseable requests, 503 past `limit_concurrency`, keep-alive
  timeout, graceful shutdown through uvicorn's server state, and the access log when it is on;
- a response's head is held back until its first body bytes, which then go out in the same write
  (or at the latest when the loop's current iteration ends): one `send` system call per response,
  not two;
- the request's `Cycle` is offered in the ASGI scope's extensions (`DIRECT_WRITES`), where the
  proxy front writes a whole response
  (`Cycle.write_whole`) or a stream's frame (`Cycle.write_frame`) without building ASGI messages;
- the keep-alive timer is armed once per idle period, not once per response;
- WebSocket upgrades are not served (the gateway has no WebSocket endpoint): such a request is
  answered as plain HTTP, as uvicorn does without a WebSocket library.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import urllib.parse
from collections import deque
from typing import Any, cast

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.utils import (
    get_client_addr,
    get_local_addr,
    get_path_with_query_string,
    get_remote_addr,
    is_ssl,
)
from uvicorn.server import ServerState

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

    def _start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """Hold the response's status line and headers until its first body bytes."""
        protocol = self.protocol
        self.response_started = True
        self.waiting_for_100_continue = False
        if self.access_scope is not None:
            protocol.log_access(self.access_scope, status)
        content = [STATUS_LINE[status]]
        has_connection_close = False
        for name, value in protocol.server_state.default_headers + headers:
            check_header_names(name)
            check_header_values(value)
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
        protocol = self.protocol
        every = protocol.server_state.default_headers + headers
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
        self.response_started = True
        self.waiting_for_100_continue = False
        if self.access_scope is not None:
            protocol.log_access(self.access_scope, status)
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


class HttpProtocol(asyncio.Protocol):
    """One client connection: `uvicorn.Config(http=HttpProtocol)`."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.app: Any = config.loaded_app
        self.loop: asyncio.AbstractEventLoop = _loop or asyncio.get_event_loop()
        self.logger = logging.getLogger("uvicorn.error")
        self.access_logger = logging.getLogger("uvicorn.access")
        self.access_log: bool = self.access_logger.hasHandlers()
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # answer the first of a pipeline
        self.root_path: str = config.root_path
        self.asgi_version: str = config.asgi_version
        self.limit_concurrency: int | None = config.limit_concurrency
        self.reset_contextvars: bool = bool(getattr(config, "reset_contextvars", False))
        self.app_state = app_state
        # Any: uvicorn types it int, and takes a float (a compiled read of an int would check it)
        self.timeout_keep_alive = float(cast(Any, config).timeout_keep_alive)
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._idle = False
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        # Per connection
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.read_paused = False
        self.write_paused = False
        self._writable: asyncio.Future[None] | None = None
        self.pipeline: deque[tuple[Cycle, Any, dict[str, Any]]] = deque()
        # Per request
        self.url = b""
        self.scope: dict[str, Any] = {}
        self.headers: list[tuple[bytes, bytes]] = []
        self.expect_100_continue = False
        self.cycle: Cycle | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.connections.add(self)
        self.transport = transport  # type: ignore[assignment]
        self.server = get_local_addr(self.transport)  # type: ignore[assignment]
        self.client = get_remote_addr(self.transport)
        self.scheme = "https" if is_ssl(self.transport) else "http"

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        cycle, self.cycle = self.cycle, None  # a cycle holds its protocol: no loop left behind
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.signal()
        for waiting, _, _ in self.pipeline:
            waiting.disconnected = True
        self.pipeline.clear()
        self.scope = {}  # the last request's scope holds its cycle, which holds this protocol
        self.resume_writing()
        if exc is None:
            self.transport.close()
        self._cancel_keep_alive()

    def eof_received(self) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        self._idle = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no WebSocket endpoint: the request was served as plain HTTP
        except httptools.HttpParserError:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")

    def send_400_response(self, msg: str) -> None:
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content += (name, b": ", value, b"\r\n")
        content += (
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\n" % len(msg),
            b"connection: close\r\n",
            b"\r\n",
            msg.encode("ascii"),
        )
        self.transport.write(b"".join(content))
        self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = {
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
        }

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        scope = self.scope
        http_version: str = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        parsed_url: Any = httptools.parse_url(self.url)  # Any: its stubs say bytes where it may be None
        raw_path: bytes = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path if self.root_path else raw_path
        scope["query_string"] = parsed_url.query or b""
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app: Any = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        else:
            app = self.app
        existing = self.cycle
        cycle = self.cycle = Cycle(
            self, scope, http_version != "1.0" and parser.should_keep_alive(), self.expect_100_continue
        )
        scope["extensions"] = {DIRECT_WRITES: cycle}  # the task runs the app in a later iteration
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, app, scope)
        else:  # a pipelined request waits for the one before it
            self.pause_reading()
            self.pipeline.appendleft((cycle, app, scope))

    def _start_asgi_task(self, cycle: Cycle, app: Any, scope: dict[str, Any]) -> None:
        if self.reset_contextvars:  # uvicorn's opt-in: no context from the lifespan leaks into a request
            task = self.loop.create_task(cycle.run_asgi(app, scope), context=contextvars.Context())
        else:
            task = self.loop.create_task(cycle.run_asgi(app, scope))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.pause_reading()
        cycle.signal()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        cycle.more_body = False
        cycle.signal()

    def on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.resume_reading()
        if self.pipeline:
            cycle, app, scope = self.pipeline.pop()
            self._start_asgi_task(cycle, app, scope)
        else:
            self._idle, self._idle_since = True, self.loop.time()
            if self._keep_alive_timer is None:
                self._keep_alive_timer = self.loop.call_later(
                    self.timeout_keep_alive, self._keep_alive_expired
                )

    def _keep_alive_expired(self) -> None:
        """Close a connection idle for `timeout_keep_alive` since its last response; one timer per
        idle period, re-armed for what is left when requests came meanwhile."""
        self._keep_alive_timer = None
        if not self._idle or self.transport.is_closing():
            return  # a request is being served: its response arms the timer again
        left = self._idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._keep_alive_timer = self.loop.call_later(left, self._keep_alive_expired)
        else:
            self.transport.close()

    def _cancel_keep_alive(self) -> None:
        timer, self._keep_alive_timer = self._keep_alive_timer, None
        if timer is not None:
            timer.cancel()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close when idle, else after the response in progress."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

    # Flow control
    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    async def drain(self) -> None:
        if self.write_paused:
            if self._writable is None:
                self._writable = self.loop.create_future()
            await asyncio.shield(self._writable)

    def log_access(self, scope: dict[str, Any], status: int) -> None:
        self.access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            get_client_addr(scope),  # type: ignore[arg-type]
            scope["method"],
            get_path_with_query_string(scope),  # type: ignore[arg-type]
            scope["http_version"],
            status,
        )
