"""How `gateway serve` runs uvicorn: one worker, or several with a listening socket each.

uvicorn's supervisor binds one socket and its workers all accept from it. Whichever worker's loop
comes back first takes the next connections, so the split follows the loops' timing, and a burst
can land mostly on one: two workers once split the 256 connections of the benchmark 81/175
(docs/performance.md). Here the supervisor binds the address with SO_REUSEPORT and never listens
on it; each worker opens a socket of its own on the same address (`gateway.event_loop`), and the
kernel spreads new connections over the workers' sockets by a hash of their addresses, as nginx's
`reuseport` does. A worker that dies takes the connections waiting in its own queue with it;
uvicorn starts another, and the others' sockets take the new connections meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from gateway.http_protocol import HttpProtocol

log = logging.getLogger("uvicorn.error")


class WorkersConfig(uvicorn.Config):
    """uvicorn's configuration, whose supervisor socket lets every worker bind the address too."""

    def bind_socket(self) -> socket.socket:
        if self.uds is not None or self.fd is not None:
            return super().bind_socket()
        family = socket.AF_INET6 if self.host and ":" in self.host else socket.AF_INET
        sock = socket.socket(family=family)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            log.error(exc)
            sys.exit(STARTUP_FAILURE)
        sock.set_inheritable(True)
        return sock


def run(host: str, port: int, workers: int) -> None:
    options: dict[str, Any] = {
        "factory": True,
        "interface": "asgi3",  # said, not guessed: a compiled build's front is no Python coroutine function
        "loop": "gateway.event_loop:new_event_loop",  # uvloop, accepting new connections in batches
        "http": HttpProtocol,  # uvicorn's httptools protocol, compiled, with the proxy's own writes
        "access_log": False,
        "log_level": "warning",
        "timeout_graceful_shutdown": 30,
        "server_header": False,
        "proxy_headers": False,  # the gateway never reads the client address; skip the rewrite per request
    }
    if workers <= 1:
        uvicorn.run("gateway.asgi:app_factory", host=host, port=port, **options)
        return
    config = WorkersConfig("gateway.asgi:app_factory", host=host, port=port, workers=workers, **options)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the supervisor has stopped its workers
        Multiprocess(config, sockets=[config.bind_socket()]).run()
