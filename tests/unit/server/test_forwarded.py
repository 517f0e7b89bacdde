"""Forwarded headers believed from trusted proxies only: scheme, client address and host."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.server.forwarded import trusting_proxies
from gateway.settings import load_settings

FORWARDED = [
    (b"host", b"10.0.0.2:8080"),
    (b"x-forwarded-proto", b"https"),
    (b"x-forwarded-for", b"203.0.113.7, 10.0.0.9"),
    (b"x-forwarded-host", b"console.example.com"),
]


def seen(trusted: tuple[str, ...], peer: str) -> dict[str, Any]:
    """What the app behind `trusting_proxies` sees of a request from `peer` with forwarded headers."""
    scopes: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scopes.append(scope)

    scope = {"type": "http", "scheme": "http", "client": (peer, 51000), "headers": list(FORWARDED)}
    asyncio.run(trusting_proxies(app, trusted)(scope, None, None))  # type: ignore[arg-type]
    [got] = scopes
    return {"scheme": got["scheme"], "client": got["client"][0], "host": dict(got["headers"])[b"host"]}


def test_nobody_is_trusted_by_default() -> None:
    assert load_settings({}).trusted_proxies == ()
    assert seen((), "10.0.0.9") == {"scheme": "http", "client": "10.0.0.9", "host": b"10.0.0.2:8080"}


@pytest.mark.parametrize("peer", ["10.0.0.9", "127.0.0.1"])
def test_a_trusted_proxy_describes_the_request(peer: str) -> None:
    trusted = load_settings({"GATEWAY_TRUSTED_PROXIES": "10.0.0.0/24, 127.0.0.1"}).trusted_proxies
    assert seen(trusted, peer) == {"scheme": "https", "client": "203.0.113.7", "host": b"console.example.com"}


def test_an_untrusted_client_cannot_claim_https_another_host_or_address() -> None:
    trusted = load_settings({"GATEWAY_TRUSTED_PROXIES": "10.0.0.0/24"}).trusted_proxies
    assert seen(trusted, "192.0.2.50") == {"scheme": "http", "client": "192.0.2.50", "host": b"10.0.0.2:8080"}


def test_a_trusted_proxy_setting_that_is_not_an_address_fails_at_start() -> None:
    with pytest.raises(ConfigError, match=r"GATEWAY_TRUSTED_PROXIES: 'proxy\.internal' is not an IP"):
        load_settings({"GATEWAY_TRUSTED_PROXIES": "10.0.0.1,proxy.internal"})
