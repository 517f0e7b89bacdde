"""How `gateway serve` runs uvicorn: one worker, or several with a listening socket each.

uvicorn's supervisor binds one socket and its workers all accept from it, so which worker takes a
new connection depends on whose loop comes back first, and a burst can land mostly on one. With
several workers, the address is bound here with SO_REUSEPORT and never listened on; uvicorn's own
supervisor (`Multiprocess`: health checks, restarts) hands it to each worker, whose loop opens a
socket of its own on the same address (`gateway.server.event_loop`), and the kernel spreads new
connections over the workers' sockets by a hash of their addresses, as nginx's `reuseport` does. A
worker that dies takes the connections waiting in its own queue with it; uvicorn starts another,
and the others' sockets take the new connections meanwhile.

uvicorn's httptools protocol bounds neither the size of a request's head nor the time it takes to
arrive, and closes an idle connection only after a response (`timeout_keep_alive`): production puts
a reverse proxy in front for those (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from gateway.settings import Settings

APP = "gateway.server.asgi:app_factory"
OPTIONS: dict[str, Any] = {
    "factory": True,
    "http": "httptools",
    "ws": "none",  # no WebSocket endpoint: an upgrade request is answered as plain HTTP
    "loop": "gateway.server.event_loop:new_event_loop",  # uvloop, accepting new connections in batches
    "access_log": False,
    "log_level": "warning",
    "timeout_graceful_shutdown": 30,
    "server_header": False,
    "proxy_headers": False,  # the gateway never reads the client address
}


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """`OPTIONS`, with those the settings give."""
    return OPTIONS | {
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "limit_concurrency": settings.limit_concurrency,
    }


def run(settings: Settings, host: str, port: int, workers: int) -> None:
    options = uvicorn_options(settings)
    if workers <= 1:
        announce(host, port, workers)
        uvicorn.run(APP, host=host, port=port, **options)
        return
    config = uvicorn.Config(APP, host=host, port=port, workers=workers, **options)
    shared = reuse_port_socket(host, port)
    announce(host, port, workers)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the supervisor has stopped its workers
        Multiprocess(config, sockets=[shared]).run()


def listening_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def announce(host: str, port: int, workers: int) -> None:
    """One line for the person who started the server (uvicorn's own is below its warning level);
    on stderr, so that stdout holds log lines only."""
    processes = "1 worker" if workers <= 1 else f"{workers} workers"
    print(f"gateway: serving on {listening_url(host, port)} ({processes})", file=sys.stderr, flush=True)


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """The address every worker listens on, bound with SO_REUSEPORT; inherited by the workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        logging.getLogger("uvicorn.error").error(exc)
        raise SystemExit(1) from None
    sock.set_inheritable(True)
    return sock
