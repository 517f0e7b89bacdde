"""The console's test stack: `gateway serve` in front of `gateway mock-upstream`, with PostgreSQL and
Redis of its own (tests/support/stores.py), the teams and usage the tests make through the admin API
and the openai SDK, and a headless Debian Chromium driven by Playwright.

Two models on one provider, priced so that every figure of the usage page can be worked out from
what a test sent. Jobs run one line at a time, so a job whose lines ask the mock for a delay is seen
running for seconds.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import GatewayProcess, Team, create_team
from tests.support.upstream import RunningUpstream

CHROMIUM = Path("/usr/bin/chromium")
ADMIN_KEY = "admin-browser-secret"
DATABASE = "gateway_test_browser"
MILLION = Decimal(1_000_000)
# USD per million tokens: (input, cached input, output)
PRICES = {
    "chat": (Decimal("0.50"), Decimal("0.25"), Decimal("1.50")),
    "chat-mini": (Decimal("0.20"), Decimal("0.10"), Decimal("0.40")),
}

CONFIG = """
providers:
  - name: up
    kind: openai
    region: eu-west
    base_url: {upstream}/v1
    api_key: upstream-secret
    timeout_s: 30
    measure_ttft: true
models:
  - name: chat
    deployments:
      - provider: up
        model: upstream-chat
        price: {{input: 0.50, cached_input: 0.25, output: 1.50}}
  - name: chat-mini
    deployments:
      - provider: up
        model: upstream-mini
        price: {{input: 0.20, cached_input: 0.10, output: 0.40}}
retry:
  max_attempts: 1
circuit:
  failure_threshold: 1000
jobs: {{poll_interval_s: 0.2, concurrency: 1, runner: {runner}}}
"""


def chromium_or_skip() -> Path:
    """Debian's Chromium (`make browser` installs it); missing, the tests skip, but never in CI."""
    if CHROMIUM.is_file():
        return CHROMIUM
    message = f"{CHROMIUM} is missing: `make browser` installs Debian's chromium"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def write_config(path: Path, upstream: RunningUpstream, *, runner: bool) -> Path:
    path.write_text(CONFIG.format(upstream=upstream.base_url, runner="true" if runner else "false"))
    return path


def gateway_env(database_url: str, redis_url: str | None) -> dict[str, str]:
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
        "GATEWAY_REDIS_URL": redis_url or "",
    }


@dataclass
class ConsoleStack:
    gateway: GatewayProcess
    upstream: RunningUpstream
    admin: httpx.Client
    screenshots: Path

    @property
    def base_url(self) -> str:
        return self.gateway.base_url

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url + "/v1", api_key=key, max_retries=0, timeout=30)

    def new_team(self, name: str, **fields: object) -> Team:
        return create_team(self.admin, name, **fields)

    def team_usage(self, team_id: str) -> dict[str, Any]:
        """The admin report's one row for a team (zeros before it has any record)."""
        rows = self.admin.get("/admin/usage", params={"team_id": team_id}).raise_for_status().json()["data"]
        return rows[0] if rows else {"requests": 0}

    def wait_for_requests(self, team_id: str, count: int) -> dict[str, Any]:
        """The team's report row once `count` records are written (the writer works off the request path)."""
        return wait_until(
            lambda: (row := self.team_usage(team_id))["requests"] >= count and row, f"{count} records"
        )


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    """Poll until `check` returns something truthy; fail after a generous deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.1)


def expected_cost(model: str, prompt: int, cached: int, completion: int) -> Decimal:
    """What one request costs at the configured prices, and what its cached tokens saved."""
    price_in, price_cached, price_out = PRICES[model]
    return ((prompt - cached) * price_in + cached * price_cached + completion * price_out) / MILLION


def expected_saving(model: str, cached: int) -> Decimal:
    price_in, price_cached, _ = PRICES[model]
    return cached * (price_in - price_cached) / MILLION


def usd(amount: Decimal) -> str:
    """An amount as the console writes it (six decimal places)."""
    return f"${amount.quantize(Decimal('0.000001')):,.6f}"


@contextlib.contextmanager
def foreign_site(html: str) -> Iterator[str]:
    """Another origin on this machine (another port) serving one page: where a forged form comes from."""

    class OnePage(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OnePage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
