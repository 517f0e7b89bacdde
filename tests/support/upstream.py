"""Run `python -m mock_upstream` as a real subprocess on a free port, for end-to-end tests.

    with start_mock_upstream(latency_ms=5) as upstream:
        client = openai.OpenAI(base_url=f"{upstream.base_url}/v1", api_key="x")
        ...
        upstream.set_behaviour(fail_rate=1, fail_status=429)
        assert upstream.requests()[-1]["body"]["model"] == "m"

As a pytest fixture: `yield from mock_upstream_fixture()` in a fixture function.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.support.children import die_with_parent, stop

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 15.0
FLAGGED = {"latency_ms", "chunk_delay_ms", "chunks", "prompt_tokens", "completion_tokens", "cached_tokens",
           "fail_rate", "fail_status", "retry_after", "seed"}  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _flag_args(flags: dict[str, Any]) -> list[str]:
    """`latency_ms=5` -> `--latency-ms 5`; anything without a flag goes into `--behaviour` JSON."""
    args: list[str] = []
    rest = {}
    for key, value in flags.items():
        if key in FLAGGED:
            args += [f"--{key.replace('_', '-')}", str(value)]
        else:
            rest[key] = value
    if rest:
        args += ["--behaviour", json.dumps(rest)]
    return args


class RunningUpstream:
    """A mock upstream subprocess and a small client for its `/_mock/*` control API."""

    def __init__(self, port: int, process: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.process = process
        self._control = httpx.Client(base_url=self.base_url, timeout=10)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mock upstream exited with {self.process.returncode}")
            try:
                self._control.get("/_mock/behaviour", timeout=0.5)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"mock upstream did not answer on {self.base_url} within {timeout_s}s")

    def set_behaviour(self, **behaviour: Any) -> dict[str, Any]:
        """Replace the behaviour (no arguments: the defaults); returns it as the mock reports it."""
        response = self._control.put("/_mock/behaviour", json=behaviour)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def behaviour(self) -> dict[str, Any]:
        result: dict[str, Any] = self._control.get("/_mock/behaviour").raise_for_status().json()
        return result

    def requests(self) -> list[dict[str, Any]]:
        """Recorded requests in arrival order: method, path, query, headers, body."""
        result: list[dict[str, Any]] = self._control.get("/_mock/requests").raise_for_status().json()
        return result

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._control.get("/_mock/stats").raise_for_status().json()
        return result

    def clear(self) -> None:
        """Forget recorded requests, stats and every prompt-cache prefix."""
        self._control.delete("/_mock/requests").raise_for_status()
        self._control.delete("/_mock/cache").raise_for_status()

    def stop(self) -> None:
        """Terminate the process, then kill it if it does not exit in time."""
        self._control.close()
        stop(self.process)

    def __enter__(self) -> RunningUpstream:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def start_mock_upstream(**flags: Any) -> RunningUpstream:
    """Start the mock on a free port with these behaviour flags and wait until it answers."""
    port = free_port()
    command = [sys.executable, "-m", "mock_upstream", "--port", str(port), *_flag_args(flags)]
    process = subprocess.Popen(command, cwd=REPO, preexec_fn=die_with_parent)
    upstream = RunningUpstream(port, process)
    upstream.wait_ready()
    return upstream


def mock_upstream_fixture(**flags: Any) -> Iterator[RunningUpstream]:
    """The body of a pytest fixture: `yield from mock_upstream_fixture()`."""
    with start_mock_upstream(**flags) as upstream:
        yield upstream


def fresh(upstream: RunningUpstream) -> Iterator[RunningUpstream]:
    """The body of a per-test fixture over a shared mock: nothing recorded and its default
    behaviour when the test starts, the default behaviour again when it ends."""
    upstream.clear()
    upstream.set_behaviour()
    yield upstream
    upstream.set_behaviour()
