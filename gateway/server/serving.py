"""How `gateway serve` runs uvicorn: one worker, or several with a listening socket each.

uvicorn's supervisor binds one socket and its workers all accept from it, so which worker takes a
new connection depends on whose loop comes back first, and a burst can land mostly on one. With
several workers, the address is bound here with SO_REUSEPORT and never listened on; uvicorn's own
supervisor (`Multiprocess`: health checks, restarts) hands it to each worker, whose loop opens a
socket of its own on the same address (`gateway.server.event_loop`), and the kernel spreads new
connections over the workers' sockets by a hash of their addresses, as nginx's `reuseport` does. A
worker that dies takes the connections waiting in its own queue with it; uvicorn starts another,
and the others' sockets take the new connections meanwhile.

With several workers, each keeps its metrics in files of its own in one directory, fresh for each
`gateway serve` and owned by this process (`process_group_metrics`), so that a scrape answered by
any worker reports them all (gateway.metrics.instruments). uvicorn's own log lines, in the supervisor and in
each worker, go through the gateway's renderer (`gateway.logs.server_log_config`).

uvicorn's httptools protocol bounds neither the size of a request's head nor the time it takes to
arrive, and closes an idle connection only after a response (`timeout_keep_alive`): production puts
a reverse proxy in front for those (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from gateway.logs import configure_logging, server_log_config
from gateway.settings import Settings

APP = "gateway.server.asgi:app_factory"
OPTIONS: dict[str, Any] = {
    "factory": True,
    "http": "httptools",
    "ws": "none",  # no WebSocket endpoint: an upgrade request is answered as plain HTTP
    "loop": "gateway.server.event_loop:new_event_loop",  # uvloop, accepting new connections in batches
    "access_log": False,  # the gateway logs its own line per request
    "log_level": "info",  # start-up, shutdown and the workers' comings and goings
    "timeout_graceful_shutdown": 30,
    "server_header": False,
    # forwarded headers are read only from GATEWAY_TRUSTED_PROXIES (gateway.server.forwarded);
    # uvicorn's own option would trust 127.0.0.1 unless told otherwise
    "proxy_headers": False,
}


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """`OPTIONS`, with those the settings give."""
    return OPTIONS | {
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "limit_concurrency": settings.limit_concurrency,
        "log_config": server_log_config(settings.log_format),
    }


def run(settings: Settings, host: str, port: int, workers: int) -> None:
    configure_logging(settings.log_format)  # the supervisor's own lines (its metering writer's restarts)
    options = uvicorn_options(settings)
    with process_group_metrics(settings, workers):
        if workers <= 1:
            announce(host, port, workers)
            uvicorn.run(APP, host=host, port=port, **options)
            return
        config = uvicorn.Config(APP, host=host, port=port, workers=workers, **options)
        shared = reuse_port_socket(host, port)
        announce(host, port, workers)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the supervisor has stopped its workers
            Multiprocess(config, sockets=[shared]).run()


@contextlib.contextmanager
def process_group_metrics(settings: Settings, workers: int) -> Iterator[Path | None]:
    """The directory the workers keep their metrics in, fresh for this `gateway serve`: the one
    PROMETHEUS_MULTIPROC_DIR names, emptied of metric files, or else (several workers) a temporary
    one, removed at the end. A worker started later (uvicorn restarts a dead one) finds it in its
    environment, as prometheus_client does. One worker and no directory: its metrics stay in its
    own memory, and None is yielded."""
    given = settings.metrics_dir
    if given is None and workers <= 1:
        yield None
        return
    directory = Path(given) if given is not None else Path(tempfile.mkdtemp(prefix="gateway-metrics-"))
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):  # a previous run's counts must not add to this one's
        stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)  # what the workers' settings will say
    try:
        yield directory
    finally:
        if given is None:
            shutil.rmtree(directory, ignore_errors=True)


def listening_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on `host:port`, or None: the port is out of range, taken,
    or the host is not an address of this machine. Bound once and released at once; uvicorn (or
    `reuse_port_socket`) binds it again for good."""
    if not 1 <= port <= 65535:
        return f"cannot serve on port {port}: a TCP port is a number from 1 to 65535 (GATEWAY_PORT or --port)"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(
            socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
        )  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"cannot serve on {listening_url(host, port)}: the port is in use by another "
                    "program (another gateway?): stop it, or choose another port with GATEWAY_PORT or --port"
                )
            return (
                f"cannot serve on {listening_url(host, port)}: {exc.strerror or exc} (GATEWAY_HOST or --host)"
            )
        except (OverflowError, socket.gaierror) as exc:
            return f"cannot serve on {listening_url(host, port)}: {exc} (GATEWAY_HOST or --host)"
    return None


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
