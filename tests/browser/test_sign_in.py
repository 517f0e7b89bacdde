"""Signing in and out in Chromium: the session cookie's attributes, refusals that do not tell one bad
key from another, a session that ends with its key, a sign-out that holds for a copied cookie on
every process sharing Redis, and failed sign-ins throttled (and logged without the key)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page

from gateway.auth.secrets import new_key_secret
from tests.browser.conftest import Shoot, SignIn
from tests.browser.stack import ADMIN_KEY, ConsoleStack, gateway_env, write_config
from tests.support.gateway import GatewayProcess

pytestmark = pytest.mark.e2e

COOKIE = "gateway_console"
REFUSED = "That key was not accepted."
TWELVE_HOURS_S = 12 * 3600


def session_cookie(page: Page) -> dict[str, object]:
    [cookie] = [c for c in page.context.cookies() if c["name"] == COOKIE]
    return dict(cookie)


def try_key(page: Page, base_url: str, key: str) -> str:
    """Send the sign-in form with `key`; the page's error, if it shows one."""
    page.goto(base_url + "/ui/login")
    page.fill("input[name=key]", key)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    error = page.locator(".error")
    return error.inner_text() if error.count() else ""


def test_signing_in_sets_a_strict_session_cookie_that_holds_no_key(
    stack: ConsoleStack, new_context: Callable[[], BrowserContext], shoot: Shoot
) -> None:
    page = new_context().new_page()
    page.goto(stack.base_url + "/ui/batches")
    page.wait_for_url("**/ui/login?next=%2Fui%2Fbatches")
    shoot(page, "login")
    page.fill("input[name=key]", ADMIN_KEY)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/batches")  # back where it was going
    assert page.locator('[data-role="admin"]').is_visible()
    cookie = session_cookie(page)
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert cookie["secure"] is False  # served over plain http here; over https it is Secure
    assert TWELVE_HOURS_S - 60 < float(cookie["expires"]) - time.time() <= TWELVE_HOURS_S  # type: ignore[arg-type]
    assert ADMIN_KEY not in str(cookie["value"])
    assert page.evaluate("document.cookie") == "", "no script reads the session"


def test_every_refused_key_gets_the_same_answer(
    stack: ConsoleStack, new_context: Callable[[], BrowserContext]
) -> None:
    revoked = stack.new_team(f"gone-{uuid.uuid4().hex[:6]}")
    stack.admin.delete(f"/admin/keys/{revoked.key_id}").raise_for_status()
    page = new_context().new_page()
    made_up = "sk-gw-" + uuid.uuid4().hex * 2
    for key in (made_up, revoked.key, "not a key at all", ADMIN_KEY + "x"):
        assert try_key(page, stack.base_url, key) == REFUSED, key
        assert page.url.endswith("/ui/login")
        assert not [c for c in page.context.cookies() if c["name"] == COOKIE]


def test_a_session_ends_when_its_key_is_revoked(stack: ConsoleStack, sign_in: SignIn) -> None:
    team = stack.new_team(f"ending-{uuid.uuid4().hex[:6]}")
    page = sign_in(team.key)
    assert team.key[:12] in page.locator('[data-role="team"]').inner_text()
    stack.admin.delete(f"/admin/keys/{team.key_id}").raise_for_status()
    page.goto(stack.base_url + "/ui/batches")
    page.wait_for_url("**/ui/login?**ended=1")
    assert "session has ended" in page.locator(".notice").inner_text()
    assert not [c for c in page.context.cookies() if c["name"] == COOKIE], (
        "the ended session's cookie is gone"
    )


def test_a_signed_out_session_stays_out_even_with_a_copy_of_its_cookie(
    stack: ConsoleStack, sign_in: SignIn, new_context: Callable[[], BrowserContext]
) -> None:
    page = sign_in(ADMIN_KEY)
    copied = session_cookie(page)
    page.click("text=Sign out")
    page.wait_for_url("**/ui/login?signed_out=1")
    assert page.locator(".notice").inner_text() == "You have signed out."
    elsewhere = new_context()
    elsewhere.add_cookies([copied])  # type: ignore[list-item]
    replay = elsewhere.new_page()
    replay.goto(stack.base_url + "/ui/usage")
    replay.wait_for_url("**/ui/login?**")


@pytest.fixture(scope="module")
def twin_gateway(stack: ConsoleStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Another process of the stack: its database and its Redis, and no memory of the first one."""
    config = write_config(tmp_path_factory.mktemp("twin") / "gateway.yaml", stack.upstream, runner=False)
    env = gateway_env(stack.gateway.env["GATEWAY_DATABASE_URL"], stack.gateway.env["GATEWAY_REDIS_URL"])
    gateway = GatewayProcess(config, env).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def test_a_session_started_on_one_process_is_good_on_another_until_signed_out_on_either(
    stack: ConsoleStack,
    sign_in: SignIn,
    twin_gateway: GatewayProcess,
    new_context: Callable[[], BrowserContext],
) -> None:
    """The processes share the session store (Redis). A cookie is not kept apart by port, so the
    browser sends it to both."""
    team = stack.new_team(f"roaming-{uuid.uuid4().hex[:6]}")
    page = sign_in(team.key)
    copied = session_cookie(page)
    page.goto(twin_gateway.base_url + "/ui/batches")
    assert page.url == twin_gateway.base_url + "/ui/batches"
    assert team.key[:12] in page.locator('[data-role="team"]').inner_text()
    page.click("text=Sign out")
    page.wait_for_url("**/ui/login?signed_out=1")
    elsewhere = new_context()
    elsewhere.add_cookies([copied])  # type: ignore[list-item]
    replay = elsewhere.new_page()
    replay.goto(stack.base_url + "/ui/batches")  # the first process: signed out there too
    replay.wait_for_url("**/ui/login?**")


def test_a_process_without_the_shared_redis_does_not_know_the_session(
    stack: ConsoleStack, sign_in: SignIn, lone_gateway: GatewayProcess
) -> None:
    """Sessions live in the store: without Redis a process keeps its own (several processes of one
    gateway share Redis, gateway.commands.preflight)."""
    page = sign_in(ADMIN_KEY)
    page.goto(lone_gateway.base_url + "/ui/batches")
    page.wait_for_url("**/ui/login?**")


def test_failed_sign_ins_are_throttled_and_logged_without_the_key(lone_gateway: GatewayProcess) -> None:
    """On a process of its own without Redis, so that its count holds this address back nowhere else.
    Failed team keys spend the team keys' budget, never the admin key's: the admin still signs in;
    guesses at the admin key spend its own."""
    wrong = [new_key_secret() for _ in range(10)]
    guesses = [f"wrong-admin-{n}-{uuid.uuid4().hex}" for n in range(10)]
    with httpx.Client(base_url=lone_gateway.base_url) as client:
        for key in wrong:
            reply = client.post("/ui/login", data={"key": key})
            assert reply.status_code == 401 and REFUSED in reply.text
        throttled = client.post("/ui/login", data={"key": new_key_secret()})
        assert throttled.status_code == 429 and "Too many failed sign-ins" in throttled.text
        assert 0 < int(throttled.headers["retry-after"]) <= 300 and "set-cookie" not in throttled.headers
        admin = client.post("/ui/login", data={"key": ADMIN_KEY})
        assert admin.status_code == 303 and "set-cookie" in admin.headers, "not locked out by team keys"
        for key in guesses:
            assert client.post("/ui/login", data={"key": key}).status_code == 401
        locked = client.post("/ui/login", data={"key": ADMIN_KEY})
        assert locked.status_code == 429, "ten guesses at the admin key from one address: its budget"
    logs = lone_gateway.logs()
    assert logs.count("console_sign_in_failed") == len(wrong) + len(guesses)
    assert not any(key in logs or key[:12] in logs for key in wrong + guesses)


@pytest.fixture(scope="module")
def behind_https_proxy(
    stack: ConsoleStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """A process of the stack's database trusting 127.0.0.1 as its proxy: the browser's headers
    below are what an https proxy in front would add."""
    config = write_config(tmp_path_factory.mktemp("proxied") / "gateway.yaml", stack.upstream, runner=False)
    env = gateway_env(stack.gateway.env["GATEWAY_DATABASE_URL"], None) | {
        "GATEWAY_TRUSTED_PROXIES": "127.0.0.1"
    }
    gateway = GatewayProcess(config, env).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def test_behind_an_https_proxy_the_browser_keeps_a_host_prefixed_cookie(
    behind_https_proxy: GatewayProcess, new_context: Callable[[], BrowserContext]
) -> None:
    context = new_context()
    context.set_extra_http_headers({"x-forwarded-proto": "https"})
    page = context.new_page()
    page.goto(behind_https_proxy.base_url + "/ui/login")
    page.fill("input[name=key]", ADMIN_KEY)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/usage")
    assert page.locator('[data-role="admin"]').is_visible()
    [cookie] = context.cookies()
    assert (cookie["name"], cookie["path"], cookie["secure"]) == ("__Host-gateway_console", "/", True)
    page.click("text=Sign out")
    page.wait_for_url("**/ui/login?signed_out=1")
    assert context.cookies() == [], "the sign-out cleared the __Host- cookie"
