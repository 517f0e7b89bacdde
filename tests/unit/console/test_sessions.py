"""The session cookie a sign-in sets, over http and behind an https proxy."""

from __future__ import annotations

import pytest
from litestar import Response
from litestar.testing import RequestFactory

from gateway.console.sessions import COOKIE, ConsoleSessions, served_over_https
from gateway.console.tokens import TokenSigner


@pytest.mark.parametrize(
    ("headers", "https"),
    [({}, False), ({"x-forwarded-proto": "https"}, True), ({"x-forwarded-proto": "http"}, False)],
)
def test_the_cookie_is_secure_when_the_browser_used_https(headers: dict[str, str], https: bool) -> None:
    request = RequestFactory().post("/ui/login", headers=headers)
    assert served_over_https(request) is https
    response: Response[object] = Response(None)
    ConsoleSessions(TokenSigner(b"k" * 32), ttl_s=600).start(response, request, "the.token")
    [cookie] = [c for c in response.cookies if c.key == COOKIE]
    assert (cookie.value, cookie.path, cookie.max_age) == ("the.token", "/ui", 600)
    assert cookie.httponly and cookie.samesite == "strict" and cookie.secure is https


def test_https_to_the_gateway_itself_makes_it_secure() -> None:
    request = RequestFactory(server="console.example").get("/ui/usage")
    request.scope["scheme"] = "https"
    assert served_over_https(request)
