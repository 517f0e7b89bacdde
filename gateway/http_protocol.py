"""The HTTP/1.1 server protocol `gateway serve` runs under uvicorn: uvicorn's httptools protocol,
ported to the compiled build, with the proxy's own write paths.

uvicorn's `HttpToolsProtocol` (uvicorn/protocols/http/httptools_impl.py, BSD-3-Clause, Copyright ©
2017-present, Encode OSS Ltd.) is interpreted Python, and it runs for every request: nine header
callbacks, the scope, a request cycle with an `asyncio.Event`, a task, flow control, a keep-alive
timer armed and cancelled, and the ASGI `send` twice per response with a regular-expression search
per header. Counted with callgrind, that was the largest share of the worker's instructions left
outside the gateway's own compiled code (docs/performance.md). This module (the connection)
and `gateway.http_cycle` (each request on it) do the same work with the same behaviour on the
wire, in modules mypyc compiles (setup.py, HOT_PATH):

- the same parser (httptools' llhttp), scope, ASGI `receive`/`send`, pipelining, flow control,
  `Expect: 100-continue`, 400 on unparseable requests, 503 past `limit_concurrency`, keep-alive
  timeout, graceful shutdown through uvicorn's server state, and the access log when it is on;
- each request's `gateway.http_cycle.Cycle` (its ASGI `receive` and `send`) holds a response's
  head back until its first body bytes, one `send` system call per response, and is offered in
  the ASGI scope's extensions for the proxy's own writes;
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

from gateway.http_cycle import DIRECT_WRITES, Cycle
from gateway.loop_tasks import start_task


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
        url = self.url
        query: bytes
        # Read as text: on CPython 3.11 `bytes in bytes` first tries the needle as an integer, and
        # formats and drops a TypeError (~2,000 instructions a test); `str in str` does not.
        target = url.decode("latin-1")
        if target[:1] == "/" and "?" not in target and "#" not in target and target.isascii():
            raw_path, query, path = url, b"", target  # a plain path: parse_url's answer
        else:
            parsed_url: Any = httptools.parse_url(url)  # Any: its stubs say bytes where it may be None
            raw_path, query = parsed_url.path, parsed_url.query or b""
            path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path if self.root_path else raw_path
        scope["query_string"] = query
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
        # uvicorn's opt-in `reset_contextvars`: no context from the lifespan leaks into a request
        context = contextvars.Context() if self.reset_contextvars else None
        task = start_task(self.loop, cycle.run_asgi(app, scope), "http-request", context)
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
