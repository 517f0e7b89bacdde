"""The serving event loop: uvloop, accepting a burst of new connections in a few loop iterations."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from gateway.server import event_loop
from gateway.server.event_loop import ACCEPT_BATCH, SHARED_ACCEPT_BATCH, BatchAcceptServer, new_event_loop

BURST = 300


def run(scenario: Callable[[], Awaitable[Any]], loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> Any:
    loop = loop_factory()
    try:
        return loop.run_until_complete(scenario())
    finally:
        loop.close()


class Echo(asyncio.Protocol):
    made = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Echo.made += 1
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


def connect_burst(port: int, count: int) -> list[socket.socket]:
    clients = []
    for _ in range(count):
        client = socket.socket()
        client.setblocking(False)
        client.connect_ex(("127.0.0.1", port))  # EINPROGRESS: the kernel completes it
        clients.append(client)
    return clients


async def iterations_to_accept(count: int, shared: bool = False) -> int:
    """Loop iterations a busy loop takes to accept `count` connections opened at once; `shared`:
    on a socket bound by uvicorn's supervisor for its workers."""
    Echo.made = 0
    loop = asyncio.get_running_loop()
    if shared:
        bound = socket.socket()
        bound.bind(("127.0.0.1", 0))
        server = await loop.create_server(Echo, sock=bound, backlog=2048)
    else:
        server = await loop.create_server(Echo, "127.0.0.1", 0, backlog=2048)
    port = server.sockets[0].getsockname()[1]
    clients = connect_burst(port, count)
    iterations = 0
    try:
        while Echo.made < count and iterations < 10 * count:
            await asyncio.sleep(0)  # one loop iteration, as a request's step in a loaded worker
            iterations += 1
        return iterations
    finally:
        for client in clients:
            client.close()
        server.close()
        await server.wait_closed()


def test_a_burst_of_connections_is_accepted_in_a_few_loop_iterations() -> None:
    iterations = run(lambda: iterations_to_accept(BURST), new_event_loop)
    # ACCEPT_BATCH per readiness, then a hand-over task and connection_made for each
    assert Echo.made == BURST
    assert iterations <= BURST // ACCEPT_BATCH + 6


def test_a_socket_shared_by_workers_is_accepted_a_few_at_a_time() -> None:
    """So that a burst spreads over the workers instead of going to the first one awake."""
    iterations = run(lambda: iterations_to_accept(BURST, shared=True), new_event_loop)
    assert Echo.made == BURST
    assert BURST // SHARED_ACCEPT_BATCH <= iterations <= BURST // 2


def test_plain_uvloop_takes_an_iteration_per_connection() -> None:
    """What the batch accept is for: libuv accepts one connection per poll of the listening socket."""
    iterations = run(lambda: iterations_to_accept(BURST), uvloop.new_event_loop)
    assert iterations >= BURST // 2


async def echo_through(server: asyncio.AbstractServer) -> tuple[bytes, int]:
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping")
    echoed = await reader.readexactly(4)
    writer.close()
    await writer.wait_closed()
    return echoed, port


def test_accepted_connections_are_uvloop_connections() -> None:
    async def scenario() -> tuple[bytes, int, type]:
        nodelay = []

        class Probe(Echo):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                sock = transport.get_extra_info("socket")
                nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await asyncio.get_running_loop().create_server(Probe, "127.0.0.1", 0)
        echoed, _ = await echo_through(server)
        server.close()
        await server.wait_closed()
        return echoed, nodelay[0], type(server)

    echoed, nodelay, kind = run(scenario, new_event_loop)
    assert (echoed, nodelay, kind) == (b"ping", 1, BatchAcceptServer)


def test_a_socket_bound_by_uvicorns_supervisor_is_listened_on() -> None:
    """uvicorn's supervisor binds the socket of its workers without listening on it."""
    bound = socket.socket()
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    bound.bind(("127.0.0.1", 0))

    async def scenario() -> bytes:
        server = await asyncio.get_running_loop().create_server(Echo, sock=bound, backlog=64)
        echoed, _ = await echo_through(server)
        server.close()
        await server.wait_closed()
        return echoed

    assert run(scenario, new_event_loop) == b"ping"


def reuse_port_socket(
    family: socket.AddressFamily = socket.AF_INET, host: str = "127.0.0.1"
) -> socket.socket:
    """What `gateway.server.serving.reuse_port_socket` binds in the supervisor: the address, SO_REUSEPORT on."""
    bound = socket.socket(family)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        bound.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # not Linux's default
    bound.bind((host, 0))
    return bound


def test_workers_on_a_reuse_port_address_each_listen_on_a_socket_of_their_own() -> None:
    bound = reuse_port_socket()
    port = bound.getsockname()[1]
    accepted = {"first": 0, "second": 0}

    def counting(worker: str) -> Callable[[], asyncio.Protocol]:
        def factory() -> asyncio.Protocol:
            accepted[worker] += 1
            return Echo()

        return factory

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = await loop.create_server(counting("first"), sock=bound, backlog=256)
        second = await loop.create_server(counting("second"), sock=bound, backlog=256)
        listeners = [*first.sockets, *second.sockets]
        assert bound not in listeners
        assert {s.getsockname()[1] for s in listeners} == {port}
        clients = connect_burst(port, 200)
        for _ in range(2000):
            if sum(accepted.values()) == 200:
                break
            await asyncio.sleep(0.001)
        for client in clients:
            client.close()
        for server in (first, second):
            server.close()
            await server.wait_closed()

    run(scenario, new_event_loop)
    # spread by a hash of each connection's addresses: ~100 each, and 40 is far in the tail
    assert sum(accepted.values()) == 200
    assert min(accepted.values()) >= 40
    with pytest.raises(OSError, match="Invalid argument"):
        bound.accept()  # the supervisor's socket is never listened on: it takes no connections
    bound.close()


def test_a_worker_socket_keeps_the_ipv6_only_option_of_the_supervisors() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this kernel")
    bound = reuse_port_socket(socket.AF_INET6, "::")  # all addresses, IPv6 only
    port = bound.getsockname()[1]

    async def scenario() -> int:
        server = await asyncio.get_running_loop().create_server(Echo, sock=bound, backlog=16)
        reader, writer = await asyncio.open_connection("::1", port)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()
        with pytest.raises(ConnectionRefusedError):  # an IPv4 client finds nobody listening
            await asyncio.open_connection("127.0.0.1", port)
        v6only = server.sockets[0].getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
        server.close()
        await server.wait_closed()
        return int(v6only)

    assert run(scenario, new_event_loop) == 1
    bound.close()


def test_a_closed_server_refuses_connections() -> None:
    async def scenario() -> None:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        _, port = await echo_through(server)
        server.close()
        await server.wait_closed()
        assert not server.is_serving()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)

    run(scenario, new_event_loop)


def test_accepting_pauses_while_out_of_file_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_loop, "ACCEPT_RETRY_S", 0.05)

    class OutOfDescriptorsOnce(socket.socket):
        failed = False

        def accept(self) -> tuple[socket.socket, Any]:
            if not OutOfDescriptorsOnce.failed:
                OutOfDescriptorsOnce.failed = True
                raise OSError(errno.EMFILE, "Too many open files")
            return super().accept()

    listener = OutOfDescriptorsOnce()
    listener.bind(("127.0.0.1", 0))

    async def scenario() -> bytes:
        server = await asyncio.get_running_loop().create_server(Echo, sock=listener)
        echoed, _ = await asyncio.wait_for(echo_through(server), timeout=5)
        server.close()
        await server.wait_closed()
        return echoed

    assert run(scenario, new_event_loop) == b"ping"  # served once the pause was over
    assert OutOfDescriptorsOnce.failed


def test_tls_and_other_options_get_uvloops_own_server() -> None:
    async def scenario() -> type:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0, reuse_port=True)
        server.close()
        await server.wait_closed()
        return type(server)

    assert run(scenario, new_event_loop) is not BatchAcceptServer
