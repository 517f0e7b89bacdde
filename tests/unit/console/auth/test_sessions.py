"""The session cookie a sign-in sets: `__Host-gateway_console` over https, `gateway_console` over
plain http; which one is the request's scheme's to say, not a header's."""

from __future__ import annotations

import pytest
from litestar import Response
from litestar.testing import RequestFactory

from gateway.console.auth.sessions import (
    COOKIE,
    SECURE_COOKIE,
    ConsoleSessions,
    cookie_name,
    served_over_https,
)
from gateway.console.auth.tokens import TokenSigner


def sign_in_request(scheme: str, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    request = RequestFactory(server="console.example").post("/ui/login", headers=headers or {})
    request.scope["scheme"] = scheme
    return request


def started(request) -> list:  # type: ignore[no-untyped-def,type-arg]
    response: Response[object] = Response(None)
    ConsoleSessions(TokenSigner(b"k" * 32), ttl_s=600).start(response, request, "the.token")
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
