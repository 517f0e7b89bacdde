"""The session cookie a sign-in sets: `__Host-gateway_console` over https, `gateway_console` over
plain http; which one is the request's scheme's to say, not a header's. A session's lifetime, its
CSRF token, and the console's secret."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from litestar import Response
from litestar.testing import RequestFactory

from gateway.console.auth.sessions import (
    COOKIE,
    SECURE_COOKIE,
    ConsoleSessions,
    SignInRequired,
    console_secret,
    cookie_name,
    served_over_https,
)
from gateway.settings import Settings
from tests.unit.console.conftest import console_settings


def sign_in_request(scheme: str, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    request = RequestFactory(server="console.example").post("/ui/login", headers=headers or {})
    request.scope["scheme"] = scheme
    return request


def started(request) -> list:  # type: ignore[no-untyped-def,type-arg]
    response: Response[object] = Response(None)
    ConsoleSessions(b"k" * 32, ttl_s=600).start(response, request, "the.token")
    return response.cookies


def test_over_https_the_cookie_has_the_host_prefix_and_its_attributes() -> None:
    request = sign_in_request("https")
    [cookie] = started(request)
    assert (cookie.key, cookie.value, cookie.path, cookie.max_age) == (SECURE_COOKIE, "the.token", "/", 600)
    assert cookie.secure and cookie.httponly and cookie.samesite == "strict" and cookie.domain is None
    assert cookie_name(request) == SECURE_COOKIE == "__Host-gateway_console"


def test_over_plain_http_the_cookie_is_the_unprefixed_one_for_the_console_path() -> None:
    request = sign_in_request("http")
    [cookie] = started(request)
    assert (cookie.key, cookie.path, cookie.max_age) == (COOKIE, "/ui", 600)
    assert not cookie.secure and cookie.httponly and cookie.samesite == "strict"
    assert cookie_name(request) == COOKIE


@pytest.mark.parametrize("header", ["x-forwarded-proto", "x-forwarded-ssl"])
def test_a_clients_forwarded_header_does_not_make_plain_http_https(header: str) -> None:
    """Believed only from a trusted proxy, whose word the server has put in the scheme already
    (gateway.server.forwarded)."""
    request = sign_in_request("http", {header: "https"})
    assert not served_over_https(request)
    [cookie] = started(request)
    assert cookie.key == COOKIE and not cookie.secure


@pytest.mark.parametrize(("scheme", "name", "path"), [("https", SECURE_COOKIE, "/"), ("http", COOKIE, "/ui")])
def test_ending_a_session_clears_the_cookie_with_the_attributes_it_was_set_with(
    scheme: str, name: str, path: str
) -> None:
    response: Response[object] = Response(None)
    ConsoleSessions.end(response, sign_in_request(scheme))
    [cookie] = response.cookies
    assert (cookie.key, cookie.value, cookie.path, cookie.max_age) == (name, "", path, 0)
    assert cookie.secure is (scheme == "https")


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class AdminOnlyServices:
    """What opening and reading an admin session reads of the services: no Redis, no database."""

    settings: Settings = field(default_factory=lambda: console_settings("the-admin-key"))
    redis: None = None


def with_cookie(sid: str):  # type: ignore[no-untyped-def]
    request = RequestFactory(server="console.example").get("/ui/usage", headers={"cookie": f"{COOKIE}={sid}"})
    request.scope["scheme"] = "http"
    return request


async def test_a_session_lasts_its_lifetime_from_sign_in_and_no_longer() -> None:
    clock, services = Clock(), AdminOnlyServices()
    console = ConsoleSessions(b"s" * 32, ttl_s=60, clock=clock)
    sid = await console.open(services, None)  # type: ignore[arg-type]
    clock.now += 59
    viewer = await console.viewer(with_cookie(sid), services)  # type: ignore[arg-type]
    assert viewer.admin and viewer.sid == sid
    clock.now += 1
    with pytest.raises(SignInRequired) as ended:
        await console.viewer(with_cookie(sid), services)  # type: ignore[arg-type]
    assert ended.value.ended


async def test_each_session_has_its_own_id_and_csrf_token() -> None:
    services = AdminOnlyServices()
    console = ConsoleSessions(b"s" * 32, ttl_s=60)
    first, second = await console.open(services, None), await console.open(services, None)  # type: ignore[arg-type]
    assert first != second and console.csrf_token(first) != console.csrf_token(second)
    assert console.csrf_token(first) != ConsoleSessions(b"x" * 32, ttl_s=60).csrf_token(first)


async def test_without_a_secret_nobody_is_signed_in() -> None:
    with pytest.raises(SignInRequired) as refused:
        await ConsoleSessions(None, ttl_s=60).viewer(with_cookie("A" * 43), AdminOnlyServices())  # type: ignore[arg-type]
    assert not refused.value.ended


def test_the_secret_is_the_configured_one_else_derived_from_the_admin_key() -> None:
    assert console_secret("shared", "admin") == b"shared"
    derived = console_secret(None, "admin")
    assert derived is not None and derived != b"admin" and derived == console_secret(None, "admin")
    assert derived != console_secret(None, "another admin key")
    assert console_secret(None, None) is None
