"""uvicorn's own lines, as `gateway serve` configures its logging: through the gateway's renderer,
JSON lines on stdout (or the console renderer), never uvicorn's formats.

Each case runs in a process of its own: logging and structlog are configured once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import msgspec

from tests.support.gateway import REPO

# What a worker does before serving (uvicorn.Config applies `log_config`), then lines as uvicorn,
# its access log and a library write them.
SERVER = """
import logging
import uvicorn
from gateway.server.serving import APP, uvicorn_options
from gateway.settings import load_settings

uvicorn.Config(APP, **(uvicorn_options(load_settings()) | {"access_log": True}))
logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/healthz", "1.1", 200)
logging.getLogger("httpx").warning("a library's warning")
logging.getLogger("sqlalchemy.engine").info("a library's info line")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
"""


def run_server_lines(log_format: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"GATEWAY_LOG_FORMAT": log_format}
    return subprocess.run(
        [sys.executable, "-c", SERVER],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )


def test_in_json_every_line_is_an_event_of_the_gateways_format() -> None:
    result = run_server_lines("json")
    assert result.stderr == ""
    events = [msgspec.json.decode(line) for line in result.stdout.splitlines()]
    assert [(e["logger"], e["level"], e["event"]) for e in events] == [
        ("uvicorn.error", "info", "Started server process [42]"),
        ("uvicorn.access", "info", '127.0.0.1:5000 - "GET /healthz HTTP/1.1" 200'),
        ("httpx", "warning", "a library's warning"),
        ("uvicorn.error", "error", "Exception in ASGI application"),
    ]
    assert all(e["timestamp"].endswith("Z") for e in events)
    assert "ZeroDivisionError" in events[-1]["exception"]  # the traceback, as a field of the line


def test_in_the_console_the_lines_are_structlogs_not_uvicorns() -> None:
    result = run_server_lines("console")
    lines = result.stdout.splitlines()
    assert any("Started server process [42]" in line and "uvicorn.error" in line for line in lines)
    assert any("a library's warning" in line for line in lines)
    assert "ZeroDivisionError" in result.stdout
    assert not any(line.startswith(("INFO:", "WARNING:", "ERROR:")) for line in lines)  # uvicorn's prefix
    assert not any(line.startswith("{") for line in lines)
