"""Browser fixtures: the console stack (tests/browser/stack.py), Chromium, and signed-in pages.

Screenshots go to `GATEWAY_SCREENSHOTS` when it is set (`GATEWAY_SCREENSHOTS=docs/console` renews
the ones docs/console.md shows), else to a temporary directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from tests.browser.stack import (
    ADMIN_KEY,
    DATABASE,
    ConsoleStack,
    chromium_or_skip,
    gateway_env,
    write_config,
)
from tests.support.gateway import REPO, GatewayProcess, recreate_database
from tests.support.stores import redis_url
from tests.support.upstream import start_mock_upstream

REDIS_URL = redis_url("browser")
VIEWPORT = {"width": 1366, "height": 900}  # a laptop's screen

SignIn = Callable[[str], Page]
Shoot = Callable[[Page, str], None]


@pytest.fixture(scope="package")
def chromium() -> Path:
    return chromium_or_skip()


@pytest.fixture(scope="package")
def stack(chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    database_url = recreate_database(DATABASE)
    upstream = start_mock_upstream()
    workdir = tmp_path_factory.mktemp("browser")
    config = write_config(workdir / "gateway.yaml", upstream, runner=True)
    gateway = GatewayProcess(config, gateway_env(database_url, REDIS_URL)).start()
    admin = httpx.Client(
        base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
    )
    shots = os.environ.get("GATEWAY_SCREENSHOTS")
    screenshots = (REPO / shots) if shots else workdir / "screenshots"
    screenshots.mkdir(parents=True, exist_ok=True)
    try:
        yield ConsoleStack(gateway, upstream, admin, screenshots)
    finally:
        admin.close()
        gateway.stop()
        upstream.stop()


@pytest.fixture(scope="package")
def lone_gateway(stack: ConsoleStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A second process on the same database, without Redis and running no jobs: what it counts (failed
    sign-ins) stays in its own memory and reaches no other process."""
    config = write_config(tmp_path_factory.mktemp("lone") / "gateway.yaml", stack.upstream, runner=False)
    gateway = GatewayProcess(config, gateway_env(stack.gateway.env["GATEWAY_DATABASE_URL"], None)).start()
    try:
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture(scope="package")
def playwright_driver() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
def browser(playwright_driver: Playwright, chromium: Path) -> Iterator[Browser]:
    launched = playwright_driver.chromium.launch(executable_path=str(chromium), headless=True)
    try:
        yield launched
    finally:
        launched.close()


@pytest.fixture
def new_context(browser: Browser) -> Iterator[Callable[[], BrowserContext]]:
    """Fresh browser contexts (cookies of their own), closed after the test."""
    opened: list[BrowserContext] = []

    def open_one() -> BrowserContext:
        context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
        context.set_default_timeout(30_000)
        opened.append(context)
        return context

    yield open_one
    for context in opened:
        context.close()


@pytest.fixture
def sign_in(stack: ConsoleStack, new_context: Callable[[], BrowserContext]) -> SignIn:
    """A page signed in with a key, in a context of its own, on the usage page."""

    def signed_in(key: str) -> Page:
        page = new_context().new_page()
        page.goto(stack.base_url + "/ui/login")
        page.fill("input[name=key]", key)
        page.click("button[type=submit]")
        page.wait_for_url("**/ui/usage")
        return page

    return signed_in


@pytest.fixture
def shoot(stack: ConsoleStack) -> Shoot:
    def screenshot(page: Page, name: str) -> None:
        page.screenshot(path=str(stack.screenshots / f"{name}.png"), full_page=True)

    return screenshot
