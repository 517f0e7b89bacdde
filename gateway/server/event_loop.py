"""The event loop `gateway serve` runs: uvloop, with new connections accepted in batches.

libuv accepts one connection each time its loop polls the listening socket (libuv#3696, since
1.45), and a loaded worker polls only between its callbacks, so a burst of new connections (a
batch job starting its workers against a busy gateway) waits in the kernel's accept queue, one
connection per loop iteration. asyncio's own loop accepts up to the listen backlog at a time;
`BatchAcceptLoop.create_server` does the same on uvloop: it listens itself, accepts up to
`ACCEPT_BATCH` connections each time the listening socket is readable (a few when the socket is
shared between workers, `SHARED_ACCEPT_BATCH`), and hands each one to uvloop
(`connect_accepted_socket`), which serves it like any connection of its own. Everything else is
uvloop's. uvicorn takes it as its `loop=` factory (`gateway.server.event_loop:new_event_loop`).
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Iterable
from typing import Any

import structlog
import uvloop

log = structlog.get_logger("gateway.server")

ACCEPT_BATCH = 128  # connections accepted per readiness of a socket this process listens on alone
# A socket that several workers accept from: a few at a time, so that a burst spreads over them
# (the less busy worker's loop comes back sooner and takes more) instead of going to whichever
# loop wakes first.
SHARED_ACCEPT_BATCH = 8
ACCEPT_RETRY_S = 1.0  # asyncio's pause when the process is out of file descriptors
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class BatchAcceptLoop(uvloop.Loop):
    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: ProtocolFactory,
        host: str | None = None,
        port: int | None = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        **options: Any,
    ) -> asyncio.AbstractServer:
        """A plain TCP server (what uvicorn asks for) accepting in batches; anything else (TLS,
        Unix sockets, reuse_port and other options) is uvloop's own server."""
        if (
            ssl is not None
            or options
            or (sock is not None and sock.family not in (socket.AF_INET, socket.AF_INET6))
        ):
            uvloops: Any = super().create_server  # its stubs are overloads per argument combination
            server: asyncio.AbstractServer = await uvloops(
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl, **options
            )
            return server
        if sock is None:
            return BatchAcceptServer(self, protocol_factory, await self._listen(host, port, backlog))
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
            # The supervisor bound the address for its workers (gateway.server.serving): this
            # worker listens on a socket of its own, and the kernel spreads connections over them.
            return BatchAcceptServer(self, protocol_factory, [_own_listener(sock, backlog)])
        sock.listen(backlog)  # a socket bound for several workers to accept from, each a few at a time
        return BatchAcceptServer(self, protocol_factory, [sock], batch=SHARED_ACCEPT_BATCH)

    async def _listen(self, host: str | None, port: int | None, backlog: int) -> list[socket.socket]:
        """Bound, listening sockets for every address of `host`, as asyncio's `create_server`."""
        infos = await self.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        listeners: list[socket.socket] = []
        try:  # socket.create_server: SO_REUSEADDR, and IPv6 sockets bound to IPv6 only
            for family, _, _, _, address in dict.fromkeys(infos):
                listeners.append(socket.create_server(address, family=family, backlog=backlog))
        except OSError:
            for listener in listeners:
                listener.close()
            raise
        return listeners


def _own_listener(shared: socket.socket, backlog: int) -> socket.socket:
    """A listening socket on the address `shared` is bound to, IPv6-only if that one is."""
    dualstack = shared.family == socket.AF_INET6 and not shared.getsockopt(
        socket.IPPROTO_IPV6, socket.IPV6_V6ONLY
    )
    return socket.create_server(
        shared.getsockname(), family=shared.family, backlog=backlog, reuse_port=True, dualstack_ipv6=dualstack
    )


class BatchAcceptServer(asyncio.AbstractServer):
    """Listening sockets whose connections go to uvloop; what uvicorn uses of a server."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol_factory: ProtocolFactory,
        listeners: Iterable[socket.socket],
        batch: int = ACCEPT_BATCH,
    ) -> None:
        self._loop = loop
        self._batch = batch
        self._protocol_factory = protocol_factory
        self.sockets = list(listeners)
        self._serving = True
        self._handovers: set[asyncio.Task[None]] = set()
        for listener in self.sockets:
            listener.setblocking(False)
            self._watch(listener)

    def _watch(self, listener: socket.socket) -> None:
        if self._serving:
            self._loop.add_reader(listener.fileno(), self._accept, listener)

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(self._batch):
            try:
                connection, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty
            except ConnectionAbortedError:
                continue  # the client gave up before it was accepted
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                # Out of file descriptors or memory: stop accepting for a moment, as asyncio does,
                # rather than spin on a listening socket that stays readable.
                log.warning("accept_paused", error=errno.errorcode.get(exc.errno or 0, str(exc.errno)))
                self._loop.remove_reader(listener.fileno())
                self._loop.call_later(ACCEPT_RETRY_S, self._watch, listener)
                return
            connection.setblocking(False)
            handover = self._loop.create_task(self._hand_over(connection))
            self._handovers.add(handover)
            handover.add_done_callback(self._handovers.discard)

    async def _hand_over(self, connection: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._protocol_factory, connection)
        except OSError:  # reset before its protocol started: nothing to serve
            connection.close()

    def close(self) -> None:
        if not self._serving:
            return
        self._serving = False
        for listener in self.sockets:
            self._loop.remove_reader(listener.fileno())
            listener.close()

    async def wait_closed(self) -> None:
        """Connections already handed over are the server's (uvicorn's) to close, not this one's."""
        if self._handovers:
            await asyncio.gather(*self._handovers, return_exceptions=True)

    def is_serving(self) -> bool:
        return self._serving

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def start_serving(self) -> None:
        """Serving starts with the server."""

    async def serve_forever(self) -> None:
        raise NotImplementedError("gateway serve runs the server through uvicorn")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's `loop=` factory (`gateway.server.event_loop:new_event_loop`)."""
    return BatchAcceptLoop()
