"""The Origin check and the CSRF token of console POSTs."""

from __future__ import annotations

import pytest
from litestar.testing import RequestFactory

from gateway.console.auth.forgery import CrossSiteRefused, check_form, check_origin
from gateway.console.auth.sessions import Viewer

HOST = "console.example:8080"
VIEWER = Viewer(sid="s", csrf_token="the-token")


def post(**headers: str):  # type: ignore[no-untyped-def]
    return RequestFactory().post("/ui/teams", headers={"host": HOST, **headers})


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": f"http://{HOST}"},
        {"origin": f"https://{HOST}"},
        {"referer": f"http://{HOST}/ui/teams"},
        {},
    ],
)
def test_a_post_from_this_host_passes(headers: dict[str, str]) -> None:
    check_origin(post(**headers))


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "http://console.example:8081"},
        {"origin": "null"},
        {"referer": "http://evil.example/ui/teams"},
        {"origin": "http://evil.example", "referer": f"http://{HOST}/"},
        # a trusted proxy's X-Forwarded-Host is already the Host here (gateway.server.forwarded):
        # the header itself, from whoever sent it, names no host
        {"origin": "https://evil.example", "x-forwarded-host": "evil.example"},
    ],
)
def test_a_post_from_elsewhere_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(CrossSiteRefused):
        check_origin(post(**headers))


@pytest.mark.parametrize(
    ("form", "passes"), [({"csrf_token": "the-token"}, True), ({"csrf_token": "another"}, False), ({}, False)]
)
def test_a_form_needs_the_sessions_csrf_token(form: dict[str, str], passes: bool) -> None:
    request = post(origin=f"http://{HOST}")
    if passes:
        check_form(request, VIEWER, form)
    else:
        with pytest.raises(CrossSiteRefused):
            check_form(request, VIEWER, form)
